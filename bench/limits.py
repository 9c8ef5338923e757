"""Hostile and large inputs are refused or read within their time bounds: the timing half of the limit tests.

The unit tests check what each reader does with a hostile or a large input — the one-line error, the
line it names, the result, the bound on work (nodes composed, bytes of the report, requests counted
before allocating) — and never how long it took. This benchmark runs the same operations and
times them against the bounds those tests used to assert (issue #12's "refused in milliseconds,
never a hang"; issue #30 moved them here):

* ``yaml-*``: the bounded YAML reader (tests/unit/config/test_yaml_limits.py): billion laughs
  < 1 s, 100,000 brackets < 2 s, each red-team config reproduction < 3 s.
* ``lint-*``: ``ebb lint`` (tests/unit/lint/test_lint_limits.py, test_corpus.py): billion laughs
  < 1 s, every other hostile or edge file < 5 s, the CLI on three hostile files < 30 s, each red-team
  lint reproduction < 5 s, the lint corpus and the held-out set < 10 s each.
* ``cap-*``: the request cap (tests/unit/model/test_request_cap.py): scaling a log x1e9 refused
  < 1 s; ``ebb simulate`` on a 60 x 1e9 counts file at request fidelity exits 2 in < 60 s.
* ``trace-*``: trace readers (tests/unit/sources/test_trace_limits.py, test_trace_loading.py): each
  hostile trace refused < 2 s; a 5,000,000-line counts file read < 5 s.
* ``report-2m``: the HTML report of two 2,000,000-bin timelines (tests/unit/score/test_report.py) < 5 s.

Each case checks its result first (the same refusal or value as its unit test: a wrong result is a
failure whatever the time), then reports the median of ``--repeats`` runs (fewer for the cases that
take seconds), the bound, and the ratio median / bound. Cases whose data is absent (the shared
red-team folder, the lint corpus) are listed as skipped. Exit 0 when every ratio is at most 1, 1
when a bound is broken or a result is wrong.

    python bench/limits.py [--repeats 5] [--only lint] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ebb.config.workloads import load_workload_classes
from ebb.config.yamlio import load_yaml
from ebb.errors import ConfigError, InputError, TraceFormatError
from ebb.gates.metrics_gate import load_gates
from ebb.lint import ALL_RULES, lint_paths
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries, RequestTrace
from ebb.model.trace_ops import scale_requests
from ebb.score.report import render_report
from ebb.score.results import PolicyRun, Scorecard, Timeline
from ebb.sources.traces import load_trace
from ebb.sources.traces._common import MAX_TOKENS
from ebb.testing.hostile_inputs import laughs, mooncake_line

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REDTEAM = SHARED / "redteam" / "inputs"
LINT_CORPUS = SHARED / "lint-corpus"
HELDOUT = ROOT / "tests" / "data" / "lint" / "heldout"
RUN = "from ebb.cli.main import main; main()"


@dataclass(frozen=True)
class Case:
    """One timed operation: ``run`` performs it and raises AssertionError when its result is wrong.

    The time is the wall time of ``run``, unless it returns a number: then that many seconds (a
    latency the measured process reports itself).
    """

    name: str
    bound_s: float
    run: Callable[[], float | None]
    slow: bool = False
    """Takes seconds: run at most 3 times."""
    prepare: Callable[[], None] | None = None
    """Builds the case's input once, before (and outside) the timed runs."""
    absent: str | None = None
    """Why it is skipped (its data is not here), or None."""


def refused(fn: Callable[[], object], kind: type[BaseException], needle: str) -> None:
    """Run ``fn``; AssertionError unless it raises ``kind`` whose text holds ``needle`` (a case's result check)."""
    try:
        fn()
    except kind as exc:
        if needle not in str(exc):
            raise AssertionError(f"refused, but without {needle!r}: {exc}") from exc
        return
    raise AssertionError(f"not refused (expected {kind.__name__} naming {needle!r})")


# -- inputs (the hostile texts are ebb.testing.hostile_inputs', shared with the unit tests) --------

def _write(tmp: Path, name: str, content: str | bytes) -> Path:
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# -- cases ----------------------------------------------------------------------------------------

def yaml_cases() -> list[Case]:
    laughs9, deep = laughs(9), "x: " + "[" * 100_000 + "]" * 100_000 + "\n"
    out = [Case("yaml-laughs9", 1.0, lambda: refused(lambda: load_yaml(laughs9, "l.yaml"), ConfigError, "nodes")),
           Case("yaml-100k-brackets", 2.0,
                lambda: refused(lambda: load_yaml(deep, "d.yaml"), ConfigError, "nested deeper"))]
    gates = ["repro/gates_deep.yaml", "crashers/gates/01_RecursionError.txt", "crashers/gates/02_HANG>3s.txt"]
    for name in ["repro/wl_deep.yaml", "repro/wl_null_alpha.yaml", "crashers/workloads/01_AssertionError.txt",
                 "crashers/workloads/02_RecursionError.txt", "crashers/workloads/03_HANG>3s.txt", *gates]:
        path = REDTEAM / name

        def run(path: Path = path, gate: bool = name in gates) -> None:
            if gate:
                refused(lambda: load_gates(path.read_bytes().decode("utf-8", "replace"), str(path)), ConfigError, "")
            else:
                refused(lambda: load_workload_classes(path), ConfigError, "")
        out.append(Case(f"yaml-redteam {name}", 3.0, run, absent=None if path.is_file() else f"{path} absent"))
    return out


def lint_cases(tmp: Path) -> list[Case]:
    def one_error(path: Path, needle: str) -> Callable[[], None]:
        def run() -> None:
            result = lint_paths([path], ALL_RULES)
            assert len(result.errors) == 1 and needle in result.errors[0].message, result.errors
        return run

    def clean(path: Path) -> Callable[[], None]:
        def run() -> None:
            result = lint_paths([path], ALL_RULES)
            assert result.errors == [], result.errors
        return run

    head = "apiVersion: v1\nkind: ConfigMap\n"
    out = [Case("lint-laughs9", 1.0, one_error(_write(tmp, "laughs.yaml", laughs(9, head=head)), "1,000,000 nodes")),
           Case("lint-laughs5", 5.0, clean(_write(tmp, "laughs5.yaml", laughs(5, head=head))))]
    hostile = [
        ("deep.yaml", "apiVersion: v1\nkind: X\nx: " + "[" * 10_000 + "]" * 10_000 + "\n", "nested deeper than 64"),
        ("deep.json", "[" * 100_000 + "]" * 100_000, "JSON nested deeper than 64"),
        ("deep.conf", "[" * 100_000 + "]" * 100_000, "JSON nested deeper than 64"),
        ("deep.py", "x = " + "-" * 100_000 + "1\n", "nested too deeply for the parser"),
        ("chain.py", "import torch\nx = a" + ".b" * 50_000 + "\n", "nested too deeply for the parser"),
        ("nul.py", "import torch\x00\n", "null bytes"),
        ("big.json", '{"fp16": {"enabled": true, "loss_scale": 1' + "0" * 400 + "}}", "outside"),
        ("digits.json", '{"a": ' + "9" * 5000 + "}", "invalid JSON"),
        ("rec.yaml", "a: &a [*a]\n", "recursive alias"),
    ]
    out += [Case(f"lint-{name}", 5.0, one_error(_write(tmp, name, text), needle)) for name, text, needle in hostile]
    edge = [("ok.json", '{"a":' * 63 + '{"train_batch_size": 8}' + "}" * 63),
            ("hpa.yaml", "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nspec:\n  minReplicas: "
             + "9" * 5000 + "\n  maxReplicas: 99999999999999999999\n  when: 2023-13-45\n  flag: !!bool maybe\n"),
            ("warn.py", "import torch\nx = [0x1for i in y]\npat = '\\d'\n")]
    out += [Case(f"lint-{name}", 5.0, clean(_write(tmp, name, text))) for name, text in edge]

    cli_dir = tmp / "cli"
    cli_dir.mkdir()
    files = [_write(cli_dir, "laughs.yaml", laughs(9, head=head)), _write(cli_dir, "deep.json", "[" * 100_000),
             _write(cli_dir, "deep.py", "x = " + "-" * 100_000 + "1\n")]

    def cli() -> None:
        res = subprocess.run([sys.executable, "-c", RUN, "lint", *map(str, files)], capture_output=True, text=True,
                             timeout=120, env=os.environ | {"COLUMNS": "80"}, check=False)
        assert res.returncode == 2 and res.stdout.strip().splitlines()[-1] == \
            "3 file(s), 0 finding(s), 3 parse error(s)", (res.returncode, res.stdout, res.stderr)
    out.append(Case("lint-cli-3-hostile-files", 30.0, cli, slow=True))

    for name in ["manual/laughs9.yaml", "manual/laughs6.yaml", "manual/laughs5.yaml", "manual/deep.json",
                 "manual/deep.yaml", "manual/deep.py", "manual/nul.py", "manual/deep_ok.json",
                 "crashers/lint/01_RecursionError.json", "crashers/lint/02_MemoryError.py",
                 "crashers/lint/03_RecursionError.yaml"]:
        path = REDTEAM / name

        def redteam(path: Path = path) -> None:
            result = lint_paths([path], ALL_RULES)
            assert result.files == 1 and len(result.errors) <= 1, result.errors
        out.append(Case(f"lint-redteam {name}", 5.0, redteam, absent=None if path.is_file() else f"{path} absent"))

    for label, root in (("corpus", LINT_CORPUS), ("heldout", HELDOUT)):
        def whole(root: Path = root) -> None:
            assert lint_paths([root], ALL_RULES).files > 0
        out.append(Case(f"lint-{label}", 10.0, whole, slow=True, absent=None if root.is_dir() else f"{root} absent"))
    return out


def cap_cases(tmp: Path) -> list[Case]:
    n = 100
    log = RequestTrace(TraceName("r"), np.arange(n, dtype=np.float64), np.full(n, 10, dtype=np.int64),
                       np.full(n, 5, dtype=np.int64), source="log.csv")
    counts = _write(tmp, "counts_1e9.txt", "# bin_s=1\n" + "1000000000\n" * 60)

    def simulate() -> None:
        res = subprocess.run([sys.executable, "-c", RUN, "simulate", "--trace", str(counts), "--format", "counts",
                              "--fidelity", "request", "--quiet", "--ledger", "", "--peak-replicas", "off"],
                             capture_output=True, text=True, timeout=180, env=os.environ | {"COLUMNS": "1000"},
                             check=False)
        assert res.returncode == 2 and "60,000,000,000 requests" in res.stderr, (res.returncode, res.stderr)
    return [Case("cap-scale-requests-x1e9", 1.0,
                 lambda: refused(lambda: scale_requests(log, 1e9, seed=0), InputError, "100,000,000,000 requests")),
            Case("cap-simulate-counts-1e9", 60.0, simulate, slow=True)]


def trace_cases(tmp: Path) -> list[Case]:
    azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    row = "2023-11-16 18:17:03.9799600,{},{}\n"
    hostile: list[tuple[str, str, str, str]] = [  # (name, text, format, needle)
        ("mooncake-deep", mooncake_line() + '{"timestamp": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
         "mooncake", "nested deeper than 64"),
        ("auto-deep", mooncake_line() + '{"timestamp": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
         "auto", "nested deeper than 64"),
        ("auto-deep-first-line", '{"timestamp": ' + "[" * 5000 + "]" * 5000 + "}\n", "auto", "nested deeper than 64"),
    ]
    for fmt in ("mooncake", "auto"):
        for tokens, needle in (("99999999999999999999999", "larger than 10,000,000"),
                               (str(MAX_TOKENS + 1), "larger than 10,000,000"),
                               ("1000000000", "larger than 10,000,000"), ("9" * 5000, "bad JSON"), ("-1", "negative")):
            label = tokens if len(tokens) <= 12 else f"{len(tokens)}-digits"
            hostile.append((f"{fmt}-tokens-{label}", mooncake_line() + mooncake_line(1, tokens), fmt, needle))
    for ts, needle in (("1" + "0" * 400, "larger than"), (str(2**53 + 1), "larger than"), ("1e400", "not finite"),
                       ("NaN", "not finite"), ("-5", "negative")):
        hostile.append((f"mooncake-timestamp-{ts if len(ts) <= 12 else f'{len(ts)}-digits'}", mooncake_line(ts),
                        "mooncake", needle))
    for value, needle in (("99999999999999999999", "larger than"), ("12345678901234567890123", "larger than"),
                          ("1000000000", "larger than"), (str(MAX_TOKENS + 1), "larger than"),
                          ("9" * 5000, "is larger than"), ("1e30", "larger than"), ("-3", "negative")):
        label = value if len(value) <= 12 else f"{len(value)}-digits"
        hostile.append((f"azure-tokens-{label}", azure + row.format(10, 5) + row.format(value, 5), "azure", needle))
    out = []
    for i, (name, text, fmt, needle) in enumerate(hostile):
        path = _write(tmp, f"t{i}.{'csv' if fmt == 'azure' else 'jsonl'}", text)
        out.append(Case(f"trace-{name}", 2.0,
                        lambda path=path, fmt=fmt, needle=needle: refused(lambda: load_trace(path, fmt),
                                                                           TraceFormatError, needle)))
    values = np.random.default_rng(0).poisson(40, 5_000_000)
    big = tmp / "big.txt"

    def write_big() -> None:
        big.write_text("# bin_s=1\n" + "\n".join(map(str, values.tolist())) + "\n")

    def five_million() -> None:
        loaded = load_trace(big)
        assert isinstance(loaded, CountSeries) and np.array_equal(loaded.counts, values)
    out.append(Case("trace-5m-line-counts", 5.0, five_million, slow=True, prepare=write_big))
    return out


def _timeline(n: int, seed: int, nan_every: int) -> Timeline:
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64)
    demand = 50 + 30 * np.sin(t / max(n / 6, 1)) + rng.normal(0, 2, n)
    replicas = (np.ceil(demand / 12) + rng.integers(0, 2, n)).astype(np.float64)
    ttft = rng.lognormal(5, 0.5, n)
    e2e = ttft * 5
    ttft[::nan_every] = np.nan
    e2e[::nan_every] = np.nan
    return Timeline(t_s=t, bin_s=1.0, demand_rps=demand, replicas=replicas,
                    ready_replicas=np.maximum(replicas - 0.5, 0.0), ttft_p50_ms=ttft / 2, ttft_p99_ms=ttft,
                    e2e_p50_ms=e2e / 2, e2e_p99_ms=e2e, violations=np.zeros(n, dtype=np.int64))


def _card(policy: str, gpu_hours: float) -> Scorecard:
    return Scorecard(policy=policy, trace="synthetic", fidelity="fluid", requests=10_000, gpu_hours=gpu_hours,
                     cost_usd=gpu_hours * 2.5, slo_violations=0, slo_violation_pct=0.0, ttft_p50_ms=120.0,
                     ttft_p99_ms=480.0, e2e_p50_ms=900.0, e2e_p99_ms=2500.0, scale_ups=4, scale_downs=3,
                     dropped_requests=0, peak_replicas=8, mean_replicas=4.2, slo_ttft_ms=500.0, slo_e2e_ms=3000.0,
                     wall_s=0.4)


def report_cases() -> list[Case]:
    n = 2_000_000
    runs: list[PolicyRun] = []

    def timelines() -> None:
        runs[:] = [PolicyRun(_card("hpa:target=0.5", 3.0), _timeline(n, 7, 1000)),
                   PolicyRun(_card("ebb:safe", 2.0), _timeline(n, 8, 999))]

    def render() -> None:
        doc = render_report(runs, title="Simulate <report>", trace_desc="synthetic & diurnal",
                            settings={"fidelity": "fluid", "price": "$2.50/GPU-h"})
        assert len(doc.encode("utf-8")) < 3_000_000 and "downsampled" in doc
    return [Case("report-2m-bins", 5.0, render, slow=True, prepare=timelines)]


# -- running --------------------------------------------------------------------------------------

def measure(case: Case, repeats: int) -> dict[str, Any]:
    """The case's median seconds over ``repeats`` runs (3 at most for a slow case), and its ratio to the bound."""
    if case.absent is not None:
        return {"case": case.name, "bound_s": case.bound_s, "skipped": case.absent}
    if case.prepare is not None:
        case.prepare()
    times: list[float] = []
    for _ in range(min(repeats, 3) if case.slow else repeats):
        t0 = time.perf_counter()
        try:
            reported = case.run()
        except AssertionError as exc:
            return {"case": case.name, "bound_s": case.bound_s, "wrong": str(exc)[:300]}
        times.append(time.perf_counter() - t0 if reported is None else reported)
    median = statistics.median(times)
    return {"case": case.name, "bound_s": case.bound_s, "median_s": median, "min_s": min(times),
            "runs": len(times), "ratio": median / case.bound_s}


def run(build: Callable[[Path, ExitStack], list[Case]], doc: str) -> int:
    """Parse the command line, build the cases (inputs under a temporary folder, servers on ``stack``),
    time them and print one row each; 0 when every bound holds, 1 otherwise. Shared by bench/deadlines.py
    and bench/demo_worker.py."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per case (slow cases: at most 3)")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, ExitStack() as stack:
        rows = [measure(c, args.repeats) for c in build(Path(d), stack) if args.only in c.name]
    broken = [r for r in rows if "wrong" in r or r.get("ratio", 0.0) > 1.0]
    if args.json:
        print(json.dumps({"rows": rows, "broken": [r["case"] for r in broken]}, indent=2))
    else:
        print(f"{'case':<52} {'median':>10} {'bound':>8} {'ratio':>7}")
        for r in rows:
            if "skipped" in r:
                print(f"{r['case']:<52} {'skipped':>10} {r['bound_s']:>7.3g}s  ({r['skipped']})")
            elif "wrong" in r:
                print(f"{r['case']:<52} {'WRONG':>10} {r['bound_s']:>7.3g}s  {r['wrong']}")
            else:
                flag = "  BROKEN" if r["ratio"] > 1.0 else ""
                print(f"{r['case']:<52} {r['median_s'] * 1000:>8.1f}ms {r['bound_s']:>7.3g}s {r['ratio']:>7.3f}{flag}")
        ran = [r for r in rows if "ratio" in r]
        worst = max(ran, key=lambda r: r["ratio"], default=None)
        skipped = sum("skipped" in r for r in rows)
        print(f"{len(ran)} case(s) timed, {skipped} skipped, {len(broken)} broken"
              + (f"; worst ratio {worst['ratio']:.3f} ({worst['case']})" if worst else ""))
    return 1 if broken else 0


def all_cases(tmp: Path, stack: ExitStack) -> list[Case]:
    """Every case of this benchmark (``stack`` unused: no server here)."""
    return [*yaml_cases(), *lint_cases(tmp), *cap_cases(tmp), *trace_cases(tmp), *report_cases()]


if __name__ == "__main__":
    sys.exit(run(all_cases, __doc__ or ""))
