"""How long ``ebb simulate`` will take, said before it starts, and how far it is while it runs.

* :func:`estimate_run`: before any work, the requests, the simulated span and the expected wall
  time, from the trace as loaded (a ``--peak-replicas`` calibration rescales the load later, so the
  estimate says "before calibration" then). The cost model is the engines' measured throughput on
  this project's 2-core machine: :data:`REQUESTS_PER_S` in request fidelity and :data:`BINS_PER_S` in
  fluid (README, ``bench/sim_throughput.py``), plus a policy's own cost per simulated second
  (:data:`POLICY_S_PER_SIM_S`; ``bench/fluid_long.py``), and the oracle's search as
  :data:`ORACLE_RUNS` runs. It is an order of magnitude, said with "≈"; the progress refines it.
* :class:`StepProgress`: the ``on_step`` callback of :func:`ebb.sim.compare.compare`. The run is
  the oracle's search plus one simulation per policy; each ``oracle:``/``simulating`` message starts
  the next step. On a terminal: a bar with the percentage of steps done, elapsed time and time left
  (from the steps done so far, else from the estimate). Off a terminal (CI logs, pipes): one plain
  line per step and a heartbeat line every :data:`HEARTBEAT_S` seconds, to stderr, so a 30-minute
  run is never silent and stdout stays for results.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Final, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ebb.score.units import human_count, human_span

__all__ = ["RunEstimate", "StepProgress", "estimate_run"]

REQUESTS_PER_S: Final = 500_000.0
"""Request-fidelity engine throughput per policy (simulated requests per wall second; 484–569 k measured)."""
BINS_PER_S: Final = 250_000.0
"""Fluid engine throughput per policy (bins per wall second; 251 k measured)."""
POLICY_S_PER_SIM_S: Final = {("fluid", "ebb"): 15e-6, ("fluid", "default"): 7e-6,
                              ("request", "ebb"): 4e-3, ("request", "default"): 40e-6}
"""A policy's own wall seconds per simulated second (its run's less the engine's 4 µs per bin), by
fidelity. Fluid: 58 days of per-second counts alone, ``bench/fluid_long.py --days 58 --calibrate-days 1
--policy hpa,ebb`` on a quiet 2-core machine, HPA 53.0 s (10.6 µs per simulated second) and Ebb 92.8 s
(18.5 µs; 1.6–2× that with the machine busy). Request: Ebb's L1 reads 50 ms fine samples, 3.5–8 ms
per simulated second on azure-conv ×50."""
ORACLE_RUNS: Final = 4
"""The oracle's search, counted as this many policy runs (azure-conv ×50: 7.8 s against HPA's 2.3 s)."""
HEARTBEAT_S: Final = 30.0
"""Off a terminal, a line at least this often while a step runs."""
_FLUID_BIN_S: Final = 1.0


@dataclass(frozen=True)
class RunEstimate:
    """What a run holds and how long it should take here (≈, see the module docstring)."""

    requests: int
    span_s: float
    runs: int
    """Policy simulations, the oracle's search counted as :data:`ORACLE_RUNS`."""
    expected_s: float
    calibrated_later: bool

    def line(self) -> str:
        later = " before load calibration" if self.calibrated_later else ""
        return (f"{human_count(self.requests)} requests over {human_span(self.span_s)}{later}; "
                f"{self.runs - ORACLE_RUNS} policies + the oracle's search: expected ≈ {human_span(self.expected_s)}")


def estimate_run(requests: int, span_s: float, fidelity: str, policies: list[str], *, load_scale: float = 1.0,
                 calibrated_later: bool = False, bin_s: float = _FLUID_BIN_S) -> RunEstimate:
    """The estimate for ``policies`` (their names, e.g. ``["hpa", "ebb"]``) on a trace of ``requests``
    over ``span_s`` seconds at ``load_scale`` in ``fidelity`` (``request`` or ``fluid``)."""
    reqs = int(requests * load_scale)
    engine_s = (reqs / REQUESTS_PER_S) if fidelity == "request" else (span_s / max(bin_s, 1e-3)) / BINS_PER_S
    def own(name: str) -> float:
        key = (fidelity, name.split(":")[0])
        return POLICY_S_PER_SIM_S[key] if key in POLICY_S_PER_SIM_S else POLICY_S_PER_SIM_S[(fidelity, "default")]

    per_policy = [engine_s + span_s * own(p) for p in policies]
    oracle = ORACLE_RUNS * (engine_s + span_s * own("default"))
    return RunEstimate(reqs, span_s, len(policies) + ORACLE_RUNS, sum(per_policy) + oracle, calibrated_later)


class StepProgress:
    """The ``on_step`` callback, as a context manager (see the module docstring)."""

    def __init__(self, console: Console, steps: int, estimate_s: float, *, enabled: bool = True,
                 stream: TextIO | None = None, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.steps = steps
        self.estimate_s = estimate_s
        self.enabled = enabled
        self.tty = console.is_terminal
        self._stream = stream if stream is not None else sys.stderr
        self._heartbeat_s = heartbeat_s
        self._started = time.monotonic()
        self._done = -1  # the first step message starts step 1, with 0 done
        self._what = "preparing workload"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                             TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                             console=console, transient=True, disable=not (enabled and self.tty))
        self._task = self._bar.add_task(self._what, total=steps)
        self._beat: threading.Thread | None = None

    def __enter__(self) -> StepProgress:
        self._started = time.monotonic()
        self._bar.__enter__()
        if self.enabled and not self.tty:
            self._beat = threading.Thread(target=self._heartbeat, name="ebb-progress", daemon=True)
            self._beat.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=1.0)
        self._bar.__exit__(kind, exc, tb)

    def __call__(self, message: str) -> None:
        with self._lock:
            if message.startswith(("simulating", "oracle: searching")):
                self._done = min(self._done + 1, self.steps - 1)
            self._what = message
        self._bar.update(self._task, description=message, completed=max(self._done, 0))
        if self.enabled and not self.tty:
            self._plain(message)

    def revise(self, estimate: RunEstimate) -> None:
        """A better estimate (the calibrated workload's): said once, and used until a step is done."""
        self.estimate_s = estimate.expected_s + (time.monotonic() - self._started)
        if not self.enabled:
            return
        if self.tty:
            self._bar.console.print(estimate.line())
        else:
            print(estimate.line(), file=self._stream, flush=True)

    def left_s(self) -> float:
        """Seconds left: the mean step so far × the steps left, else the estimate less the time spent."""
        elapsed = time.monotonic() - self._started
        if self._done > 0:
            return elapsed / self._done * (self.steps - self._done)
        return max(0.0, self.estimate_s - elapsed)

    def _plain(self, message: str) -> None:
        done = max(self._done, 0)
        elapsed = time.monotonic() - self._started
        print(f"ebb simulate: step {done + 1}/{self.steps} ({100 * done / self.steps:.0f} % done), "
              f"{human_span(elapsed)} elapsed, ≈ {human_span(self.left_s())} left: {message}",
              file=self._stream, flush=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            with self._lock:
                what = self._what
            self._plain(f"still {what}")
