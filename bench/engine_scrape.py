"""Engine scrape cost: GET + parse + read of one real ``/metrics`` page, per pod and per 100-pod node, vs plain prometheus_client.

Run: ``.venv/bin/python bench/engine_scrape.py [--repeat 7] [--json]`` (about 20–40 s; needs ../shared).

Pages (real captures, ``../shared/data/engine-metrics/``, cut by the README's line ranges):

* **vllm**: the cncf/k8s-ai-conformance kops vLLM V1 dump, lines 115–675 (561 lines, ~60 KB: the
  python/process collectors, every ``vllm:*`` family with ``_created`` series, http_* histograms);
* **llamacpp**: ``llamacpp/captured-here/metrics_busy_4slots_6deferred.txt`` (a real llama-server).

Each page is served by an in-process ``http.server`` on 127.0.0.1 (one thread per connection,
``Connection: close``, as :func:`ebb.sources.http_get.get` asks). Measured in this one process:

* **ours, per pod** = ``http_get.get`` + :func:`parse_exposition` + :func:`read_engine` with the
  engine's profile (the agent's per-endpoint work each poll); also the parse and read alone;
* **peer, per pod** = the same GET + ``prometheus_client.parser.text_string_to_metric_families``
  over the same text, every sample materialised (iterated), nothing else;
* **per 100-pod node** = 100 sequential GETs (pod paths ``/pod/N/metrics``) + parse (+ read for
  ours): what one agent polling every engine pod of a dense node does per poll.

Then **cost per MiB and per series** of synthetic vLLM pages at 1 and 4 MiB (the agent's page cap),
three shapes: *plain* (distinct ``vllm:num_requests_running{pod=...}`` series, the fast path),
*escaped* (16 KB lines of ``\\"`` in a label value, prometheus_client's slow path: the review's
quadratic suspect) and *label bomb* (60k-series lines with a second label). Parse + read is timed
for ours and ``text_string_to_metric_families`` for the peer (median of ``--repeat`` runs, at
least 3); **linearity** = the cost per MiB at 4 MiB over that at 1 MiB (1.0 = linear; the agent's
parse budget, :mod:`ebb.agent.parse_pool`, assumes it stays near 1).

Each figure is the median of ``--repeat`` runs (each of ``--inner`` calls for the per-pod ones);
ratio = ours / peer (> 1 means ours costs more). Absolute times are for this machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from ebb.sources import http_get  # noqa: E402
from ebb.sources.engines import PROFILES, parse_exposition, read_engine  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "engine-metrics"
KOPS = "vllm/cncf__k8s-ai-conformance__v1.35__kops__tests__Test_SchedulingOrchestration_PodAutoscaling__output.md"
LLAMA = "llamacpp/captured-here/metrics_busy_4slots_6deferred.txt"
PODS = 100


def pages() -> dict[str, bytes]:
    lines = (DATA / KOPS).read_text(encoding="utf-8").split("\n")[114:675]  # README: emb 115–675
    return {"vllm": ("\n".join(lines) + "\n").encode(), "llamacpp": (DATA / LLAMA).read_bytes()}


def serve(bodies: dict[str, bytes]) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            engine = self.path.split("/")[1]
            body = bodies.get(engine)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def peer_parse(text: str) -> int:
    n = 0
    for fam in text_string_to_metric_families(text):
        for _ in fam.samples:
            n += 1
    return n


MIB = 1 << 20
HEAD = ('vllm:num_requests_running{model_name="m"} 3\nvllm:num_requests_waiting{model_name="m"} 1\n'
        'vllm:kv_cache_usage_perc{model_name="m"} 0.25\nvllm:request_prefill_time_seconds_sum{model_name="m"} 1\n')


def shaped(shape: str, size: int) -> tuple[bytes, int]:
    """A page of ``shape`` about ``size`` bytes long, and its number of series lines."""
    if shape == "plain":
        line = 'vllm:num_requests_running{model_name="m",pod="%07d"} 0\n'
        n = size // len(line % 0)
        return (HEAD + "".join(line % i for i in range(n))).encode(), n
    if shape == "escaped":
        line = 'junk{a="' + '\\"' * 8000 + '"} 1\n'
        n = size // len(line)
        return (HEAD + line * n).encode(), n
    line = 'vllm:num_requests_running{model_name="m",x="%d",y="yyyyyyyyyyyyyyyyyyyyyy"} 0\n'
    n = size // len(line % 100000)
    return (HEAD + "".join(line % i for i in range(n))).encode(), n


def sizes(repeat: int) -> dict[str, Any]:
    """Cost per MiB and per series, ours and the peer's, at 1 and 4 MiB (module docstring)."""
    profile, out = PROFILES["vllm"], {}
    for shape in ("plain", "escaped", "label bomb"):
        row: dict[str, Any] = {}
        for mib in (1, 4):
            body, n = shaped(shape, mib * MIB)
            text = body.decode()
            ours = median_s(lambda: read_engine(parse_exposition(body, source=shape), profile, source=shape),
                            max(3, repeat // 2), 1)
            peer = median_s(lambda: peer_parse(text), max(3, repeat // 2), 1)
            row[f"{mib}MiB"] = {"bytes": len(body), "series": n, "ours_s": ours, "peer_s": peer,
                                "ours_ms_per_mib": ours * 1e3 * MIB / len(body),
                                "ours_us_per_series": ours * 1e6 / n, "ratio": ours / peer}
        row["linearity"] = row["4MiB"]["ours_ms_per_mib"] / row["1MiB"]["ours_ms_per_mib"]
        out[shape] = row
    return out


def median_s(fn: Callable[[], object], repeat: int, inner: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        runs.append((time.perf_counter() - t0) / inner)
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--inner", type=int, default=40, help="calls per timed run for the per-pod figures")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not (DATA / KOPS).is_file():
        print(f"needs the shared captures at {DATA}", file=sys.stderr)
        return 2
    bodies = pages()
    server, base = serve(bodies)
    limits = http_get.HttpLimits(deadline_s=5.0)
    results: dict[str, Any] = {}
    try:
        for engine, body in bodies.items():
            profile = PROFILES[engine]
            url = f"{base}/{engine}/metrics"
            text = body.decode()

            def ours_pod() -> object:
                reply = http_get.get(url, limits)
                return read_engine(parse_exposition(reply.body, source=url), profile, source=url)

            def peer_pod() -> object:
                return peer_parse(http_get.get(url, limits).body.decode("utf-8"))

            def ours_node() -> object:
                for i in range(PODS):
                    u = f"{base}/{engine}/pod/{i}/metrics"
                    read_engine(parse_exposition(http_get.get(u, limits).body, source=u), profile, source=u)
                return None

            def peer_node() -> object:
                for i in range(PODS):
                    peer_parse(http_get.get(f"{base}/{engine}/pod/{i}/metrics", limits).body.decode("utf-8"))
                return None

            expo = parse_exposition(body, source=url)
            reading = read_engine(expo, profile, source=url)
            ours_pod(), peer_pod()  # warm up (imports, first connections)
            r = {
                "bytes": len(body), "lines": text.count("\n"), "samples": expo.n_samples,
                "peer_samples": peer_parse(text), "running": reading.running, "waiting": reading.waiting,
                "get_s": median_s(lambda: http_get.get(url, limits), args.repeat, args.inner),
                "parse_s": median_s(lambda: parse_exposition(body, source=url), args.repeat, args.inner),
                "read_s": median_s(lambda: read_engine(expo, profile, source=url), args.repeat, args.inner),
                "peer_parse_s": median_s(lambda: peer_parse(text), args.repeat, args.inner),
                "ours_pod_s": median_s(ours_pod, args.repeat, args.inner),
                "peer_pod_s": median_s(peer_pod, args.repeat, args.inner),
                "ours_node_s": median_s(ours_node, max(3, args.repeat // 2), 1),
                "peer_node_s": median_s(peer_node, max(3, args.repeat // 2), 1),
            }
            r["parse_ratio"] = (r["parse_s"] + r["read_s"]) / r["peer_parse_s"]
            r["pod_ratio"] = r["ours_pod_s"] / r["peer_pod_s"]
            r["node_ratio"] = r["ours_node_s"] / r["peer_node_s"]
            results[engine] = r
    finally:
        server.shutdown()
        server.server_close()
    results["sizes"] = sizes(args.repeat)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"engine scrape cost (median of {args.repeat} runs; per-pod runs of {args.inner} calls; loopback HTTP)")
    for engine, r in results.items():
        if engine == "sizes":
            continue
        print(f"\n{engine}: {r['bytes']:,} bytes, {r['lines']} lines, {r['samples']} samples kept "
              f"(prometheus_client: {r['peer_samples']}); read running={r['running']:g} waiting={r['waiting']:g}")
        print(f"  {'step':<34}{'ours':>12}{'prometheus_client':>20}{'ratio':>8}")
        print(f"  {'GET alone (per pod)':<34}{r['get_s'] * 1e6:>10.0f}µs")
        print(f"  {'parse (+ read_engine) per pod':<34}{(r['parse_s'] + r['read_s']) * 1e6:>10.0f}µs"
              f"{r['peer_parse_s'] * 1e6:>18.0f}µs{r['parse_ratio']:>8.2f}")
        print(f"  {'  of which read_engine':<34}{r['read_s'] * 1e6:>10.0f}µs")
        print(f"  {'GET + parse (+ read) per pod':<34}{r['ours_pod_s'] * 1e6:>10.0f}µs"
              f"{r['peer_pod_s'] * 1e6:>18.0f}µs{r['pod_ratio']:>8.2f}")
        print(f"  {f'{PODS}-pod node (sequential GETs)':<34}{r['ours_node_s'] * 1e3:>10.1f}ms"
              f"{r['peer_node_s'] * 1e3:>18.1f}ms{r['node_ratio']:>8.2f}")
    print("\ncost by page size (parse + read_engine; peer: prometheus_client parse)")
    print(f"  {'shape':<12}{'size':>6}{'series':>9}{'ours ms/MiB':>13}{'ours µs/series':>16}{'ratio':>7}{'linearity':>11}")
    for shape, row in results["sizes"].items():
        for mib in (1, 4):
            c = row[f"{mib}MiB"]
            lin = f"{row['linearity']:>11.2f}" if mib == 4 else ""
            print(f"  {shape:<12}{mib:>4}Mi{c['series']:>9,}{c['ours_ms_per_mib']:>13.0f}"
                  f"{c['ours_us_per_series']:>16.1f}{c['ratio']:>7.2f}{lin}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
