"""How long ``ebb simulate`` will take, said before it starts, and how far it is while it runs.

* :func:`refuse_over_budget`: a run whose estimate (:mod:`ebb.sim.estimate`, measured on a slice of
  the trace, or its floor when nothing can be measured) passes ``--max-run-min`` is refused before it
  starts, with the estimate and the flags that shrink it.
* :class:`StepProgress`: the ``on_step`` callback of :func:`ebb.sim.compare.compare`. Each
  ``calibrating``/``oracle:``/``simulating`` message starts the next phase of the estimate. Time
  left is the estimate of the phases not done, times how much slower than estimated the phases
  done so far of the same family ran (the oracle's searches, calibration included, err alike; each
  policy run is measured on its own, so policy phases start from 1.0): the ratio corrects the
  measurement as the run goes. A phase running past its own estimate is never said to be ending:
  its remaining time is taken as a quarter of its time so far (so "left" grows while it overruns,
  and is never "≈ 0 s" while anything runs), and the overrun counts in its family's ratio. A policy
  run on a request log says how much of the span it has simulated (:meth:`StepProgress.within`);
  from 5 % on, its time left is extrapolated from its own pace instead (a 23-day long-service run
  measured 8 min on its first 2 %, whose sample times sit within a microsecond of the reconciles —
  no quiet stretch forms there —, and took 2.6 min). On a
  terminal: a bar with the share done, elapsed and time left. Off a terminal (CI logs, pipes): one
  plain line per step and a heartbeat line every :data:`HEARTBEAT_S` seconds, to stderr, so a
  30-minute run is never silent and stdout stays for results.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Final, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.progress_bar import ProgressBar
from rich.text import Text

from ebb.config.policy_specs import PolicySpecItem
from ebb.config.simulate_settings import OutputSettings
from ebb.errors import ConfigError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.score.units import human_count, human_span
from ebb.sim.estimate import CALIBRATING, ORACLE, Phase, RunEstimate, measure, plan_run
from ebb.sim.settings import SimSettings

__all__ = ["HEARTBEAT_S", "StepProgress", "refuse_over_budget", "run_estimate"]

HEARTBEAT_S: Final = 30.0
"""Off a terminal, a line at least this often while a step runs."""
OVERRUN_LEFT: Final = 0.25
"""A phase past its estimate is taken to need this share of its time so far again."""
MIN_SHARE: Final = 0.05
"""A policy run's own progress (:meth:`StepProgress.within`) replaces its estimate from this share of
its span on."""


def refuse_over_budget(est: RunEstimate, max_run_min: float, *, fluid_possible: bool) -> None:
    """ConfigError (exit 2, one line) when ``est`` passes ``max_run_min`` minutes (0: no limit): the
    estimate and the flags that shrink the run (``--fidelity fluid`` only where it is not already
    fluid and the service-time model does not rule it out)."""
    if max_run_min <= 0 or est.expected_s <= max_run_min * 60.0:
        return
    shrink = ["replay part of the trace with --window-s START:END"]
    if fluid_possible and est.fidelity == "request":
        shrink.append("--fidelity fluid")
    shrink.append("a smaller --peak-replicas" if est.calibrating else "a smaller --load-scale")
    raise ConfigError(f"this run would take too long: {est.line()}, past --max-run-min {max_run_min:g} "
                      f"(fix: {', '.join(shrink)}; or raise --max-run-min, 0 for no limit)")


def run_estimate(trace: RequestTrace | CountSeries, items: Sequence[PolicySpecItem], settings: SimSettings,
                 fidelity: str, load_scale: float, peak_replicas: int | None, fluid_bin_s: float | None,
                 out: OutputSettings, console: Console) -> RunEstimate:
    """The run's estimate, said on ``console`` unless ``--quiet``: counted (nothing simulated) and refused
    when even its floor passes ``--max-run-min``, then measured on a slice of the trace (about 1 s) and
    refused if that passes it. Quiet with no limit: the floor alone (nothing to say or check)."""
    plan = plan_run(trace, items, settings, fidelity=fidelity, load_scale=load_scale,
                    peak_replicas=peak_replicas, fluid_bin_s=fluid_bin_s)
    fluid_possible = settings.cluster.service is None
    floor = plan.floor()
    refuse_over_budget(floor, out.max_run_min, fluid_possible=fluid_possible)
    if out.quiet and out.max_run_min <= 0:
        return floor
    est = measure(plan, trace, settings, fluid_bin_s=fluid_bin_s)
    refuse_over_budget(est, out.max_run_min, fluid_possible=fluid_possible)
    if not out.quiet:
        console.print(escape(est.line()), soft_wrap=True)
    return est


class _Left(ProgressColumn):
    """The time left, from the owner's phases (not rich's own step rate)."""

    def __init__(self, owner: StepProgress) -> None:
        super().__init__()
        self.owner = owner

    def render(self, task: Task) -> Text:
        return Text(f"≈ {human_span(self.owner.left_s())} left", style="progress.remaining")


class _Bar(ProgressColumn):
    """A bar of the share of the estimated work done."""

    def __init__(self, owner: StepProgress) -> None:
        super().__init__()
        self.owner = owner

    def render(self, task: Task) -> ProgressBar:
        return ProgressBar(total=100.0, completed=self.owner.done_pct(), width=30)


class _Done(ProgressColumn):
    """The share of the estimated work done, in percent."""

    def __init__(self, owner: StepProgress) -> None:
        super().__init__()
        self.owner = owner

    def render(self, task: Task) -> Text:
        return Text(f"{self.owner.done_pct():3.0f}%", style="progress.percentage")


_SEARCH = "search"


def _family(key: str) -> str:
    """Phases whose estimates err alike: the oracle's searches (calibration included); each policy
    run is its own (measured on its own slice: one policy's pace says nothing of another's)."""
    return _SEARCH if key in (CALIBRATING, ORACLE) else key


def _key(message: str) -> str | None:
    """The phase a step message starts, or None for a message within a phase."""
    if message.startswith("calibrating"):
        return CALIBRATING
    if message.startswith("oracle: searching"):
        return ORACLE
    if message.startswith("simulating "):
        return message
    return None


class StepProgress:
    """The ``on_step`` callback, as a context manager (see the module docstring)."""

    def __init__(self, console: Console, estimate: RunEstimate, *, enabled: bool = True,
                 stream: TextIO | None = None, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.enabled = enabled
        self.tty = console.is_terminal
        self._stream = stream if stream is not None else sys.stderr
        self._heartbeat_s = heartbeat_s
        self._phases: list[Phase] = list(estimate.phases)
        self._cur = -1  # index of the running phase; -1 before the first step message
        self._share = 0.0  # how far the running phase says it is (within); 0 when it says nothing
        self._phase_started = self._started = time.monotonic()
        # Actual and estimated seconds of the phases finished so far, per family (_family).
        self._done_actual: dict[str, float] = {}
        self._done_expected: dict[str, float] = {}
        self._steps = sum(1 for i, p in enumerate(self._phases)
                          if p.key != CALIBRATING or i == 0 or self._phases[i - 1].key != CALIBRATING)
        self._step = 0
        self._what = "preparing workload"
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._bar = Progress(TextColumn("{task.description}"), _Bar(self), _Done(self),
                             TimeElapsedColumn(), _Left(self), console=console, transient=True,
                             disable=not (enabled and self.tty))
        self._task = self._bar.add_task(self._what)
        self._beat: threading.Thread | None = None

    def __enter__(self) -> StepProgress:
        self._phase_started = self._started = time.monotonic()
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
            key = _key(message)
            if key is not None:
                self._advance(key)
            self._what = message
        self._bar.update(self._task, description=message)
        if self.enabled and not self.tty:
            self._plain(message)

    def _advance(self, key: str) -> None:
        """Close the running phase (its time joins the ratio) and start the next one for ``key``:
        the next planned calibration round, or one more like the last; else the first later phase
        with that key (rounds planned but not run are dropped); else a phase nobody planned (0 s)."""
        now = time.monotonic()
        if self._cur >= 0:
            fam = _family(self._phases[self._cur].key)
            self._done_actual[fam] = self._done_actual.get(fam, 0.0) + now - self._phase_started
            self._done_expected[fam] = self._done_expected.get(fam, 0.0) + self._phases[self._cur].expected_s
        nxt = self._cur + 1
        if key == CALIBRATING and self._cur >= 0 and self._phases[self._cur].key == CALIBRATING:
            if nxt >= len(self._phases) or self._phases[nxt].key != CALIBRATING:
                self._phases.insert(nxt, self._phases[self._cur])  # one more round than planned
        else:
            self._step += 1
            later = [i for i in range(nxt, len(self._phases)) if self._phases[i].key == key]
            if later:
                del self._phases[nxt:later[0]]
            else:
                self._phases.insert(nxt, Phase(key, 1, 0.0))
        self._cur = nxt
        self._phase_started = now
        self._share = 0.0

    def within(self, share: float) -> None:
        """The running policy run has simulated ``share`` (0–1) of its span: from :data:`MIN_SHARE` on,
        its time left is extrapolated from its own pace, not its estimate (a slice measured before
        the run can be unlike the rest of the trace)."""
        with self._lock:
            self._share = max(self._share, min(share, 1.0))

    def revise(self, estimate: RunEstimate) -> None:
        """A better estimate (the calibrated load's): its phases replace those not started; said once."""
        with self._lock:
            start = self._cur + 1
            self._phases[start:] = [p for p in estimate.phases if p.key != CALIBRATING]
        if not self.enabled:
            return
        line = (f"load calibrated to x{estimate.load_scale:.3g}: {human_count(estimate.requests)} requests; "
                f"≈ {human_span(self.left_s())} left")
        if self.tty:
            self._bar.console.print(escape(line), soft_wrap=True)
        else:
            print(line, file=self._stream, flush=True)

    def _ratio(self, family: str, running_s: float) -> float:
        """Actual over estimated time of the ``family``'s phases done, with the running one once it
        overruns; 1.0 (the measured estimate) before any of them is done."""
        actual, expected = self._done_actual.get(family, 0.0), self._done_expected.get(family, 0.0)
        ratio = actual / expected if expected > 0 else 1.0
        cur = self._phases[self._cur]
        if _family(cur.key) == family and running_s > ratio * cur.expected_s and expected + cur.expected_s > 0:
            ratio = max(ratio, (actual + running_s) / (expected + cur.expected_s))
        return ratio

    def left_s(self) -> float:
        """Seconds left (see the module docstring); above 0 while a phase runs."""
        with self._lock:
            if self._cur < 0:
                return sum(p.expected_s for p in self._phases)
            running = time.monotonic() - self._phase_started
            cur = self._phases[self._cur]
            ahead = cur.expected_s * self._ratio(_family(cur.key), running) - running
            if self._share >= MIN_SHARE:
                ahead = running * (1.0 - self._share) / self._share
            return max(ahead, OVERRUN_LEFT * running) + sum(
                self._ratio(_family(p.key), running) * p.expected_s for p in self._phases[self._cur + 1:])

    def done_pct(self) -> float:
        """The share of the run done, in percent: elapsed over elapsed plus :meth:`left_s`."""
        elapsed = time.monotonic() - self._started
        total = elapsed + self.left_s()
        return 100.0 * elapsed / total if total > 0 else 0.0

    def _plain(self, message: str) -> None:
        elapsed = time.monotonic() - self._started
        print(f"ebb simulate: step {max(self._step, 1)}/{self._steps} ({self.done_pct():.0f} % done), "
              f"{human_span(elapsed)} elapsed, ≈ {human_span(self.left_s())} left: {message}",
              file=self._stream, flush=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            with self._lock:
                what = self._what
            self._plain(f"still {what}")
