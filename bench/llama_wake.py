"""How long a llama-server takes to come back from its idle sleep, against a cold start (issue #33).

Run: ``PYTHONPATH=src .venv/bin/python bench/llama_wake.py [--n 20] [--idle-s 1] [--json]`` (about
``n × (idle_s + 1.5)`` s; needs ``scripts/build-llama-server.sh``'s binary and the tiny model, or
``--model FILE``).

What is measured, on the server the live tier starts (:class:`ebb.demo.llamacpp.LlamaServerLauncher`:
2 slots, one thread, ``--sleep-idle-seconds IDLE``):

* **cold start** (``--n`` servers, after one more that is not counted: it puts the GGUF in the page
  cache): from ``Popen`` to ``GET /health`` 200, polled every 5 ms — what a replacement costs
  (process start and model load).
* **wake** (``--n`` cycles on one server): wait until ``GET /props`` reads ``"is_sleeping": true``
  (the model unloaded), then time ``POST /tokenize`` — the call the tier wakes with: it returns once
  the model is reloaded (``wait_until_no_sleep``) — and then until ``/props`` reads false. The
  tier's actuator adds up to one 0.1 s supervisor tick on top before the woken server rejoins.

Prints the median, P90 and maximum of each (ms). A tier's ``wake_s`` below the wake's maximum makes
the policy count on capacity sooner than it comes; the actuator logs each wake slower than
``wake_s`` and the demo prints the slowest.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ebb.actuate.engine_http import EngineCallError, EngineHttp
from ebb.demo.llamacpp import LlamaServerLauncher, llama_server_binary, tiny_model

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _health(url: str) -> bool:
    try:
        with OPENER.open(url + "/health", timeout=1.0) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _until(what: Callable[[], bool], within_s: float, step_s: float) -> float:
    """Poll ``what()`` until true; the monotonic time it first was. RuntimeError after ``within_s``."""
    deadline = time.monotonic() + within_s
    while not what():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not reached within {within_s} s")
        time.sleep(step_s)
    return time.monotonic()


def _asleep(api: EngineHttp) -> bool:
    try:
        return api.props_is_sleeping()
    except EngineCallError:
        return False


def measure(n: int, idle_s: int, model: Path, logs: Path) -> dict[str, list[float]]:
    launcher = LlamaServerLauncher(llama_server_binary(), model, logs, slots=2, sleep_idle_s=idle_s)
    cold, wake, props = [], [], []
    for i in range(n + 1):
        launch = launcher.launch(f"server-{i}", 2)
        assert launch.url is not None
        with open(logs / f"server-{i}.log", "ab") as log:
            t0 = time.monotonic()
            proc = subprocess.Popen(launch.args, stdout=log, stderr=subprocess.STDOUT)
        try:
            up = _until(lambda: _health(launch.url or ""), 60.0, 0.005)
            cold.append((up - t0) * 1000.0)
            if i < n:
                continue
            api = EngineHttp(launch.url, 5.0)
            for _ in range(n):  # the last server: n sleep-wake cycles
                _until(lambda: _asleep(api), idle_s + 10.0, 0.05)
                t0 = time.monotonic()
                api.tokenize("wake", timeout_s=60.0)
                wake.append((time.monotonic() - t0) * 1000.0)
                props.append((_until(lambda: not _asleep(api), 10.0, 0.002) - t0) * 1000.0)
        finally:
            proc.terminate()
            proc.wait(10.0)
    return {"cold_start_ms": cold[1:], "wake_tokenize_ms": wake, "wake_props_false_ms": props}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--idle-s", type=int, default=1)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ebb-llama-wake-") as d:
        runs = measure(a.n, a.idle_s, a.model or tiny_model(), Path(d))
    summary = {k: {"n": len(v), "median_ms": round(float(np.median(v)), 1),
                   "p90_ms": round(float(np.percentile(v, 90)), 1), "max_ms": round(float(max(v)), 1)}
               for k, v in runs.items()}
    if a.json:
        print(json.dumps(summary, indent=1))
        return
    for k, s in summary.items():
        print(f"{k:22s} n={s['n']:3d}  median {s['median_ms']:8.1f} ms  p90 {s['p90_ms']:8.1f} ms  "
              f"max {s['max_ms']:8.1f} ms")


if __name__ == "__main__":
    main()
