"""How long a comparison (:func:`ebb.sim.compare.compare`) will take on this machine, said before it runs.

The estimate is a list of :class:`Phase` s, the steps :func:`~ebb.sim.compare.compare` reports
through ``on_step``: the load calibration's rounds (``--peak-replicas``), the oracle's search, then
one run per policy. Each phase holds a number of simulations of the same workload.

* :func:`plan_run` counts the work, simulating nothing: the workload's *units* (requests in request
  fidelity, bins in fluid) at the load multiple (``--load-scale`` K, or the calibration's first
  guess), each policy's reconciles over the span, the fleet the oracle starts (about K times the
  unscaled trace's peak of work), and the simulations per phase (the oracle's searches:
  :func:`~ebb.sim.baselines.oracle.search_runs`; :data:`CALIBRATION_ROUNDS` calibration rounds).
* :meth:`RunPlan.floor` prices that work at the fastest rates measured here
  (:data:`FLOOR_S_PER_UNIT`, :data:`FLOOR_S_PER_REPLICA`): a lower bound, the only estimate a run of
  10^13 requests gets, since nothing of it can be simulated to measure it.
* :func:`measure` runs the actual policies, and one oracle candidate, on a slice of the actual
  trace at the actual load: the first :data:`SLICE_SHARE` (0.2–2 %) of its requests, the share sized
  so that the slice takes about :data:`CALIBRATION_S` at the floor's rates. Each measured wall time is
  scaled by the work ratio, (units + reconciles) of the whole over the slice's. The span alone is
  not the measure: idle time costs an engine little. So the estimate carries this machine's speed
  as it is now, whatever else runs on it (``make demo`` on this project's shared 2-core machine:
  ≈ 1 min 17 s said after a 0.35 s slice, 1 min 15 s taken).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from ebb.config.policy_specs import PolicySpecItem
from ebb.decide.base import Policy, react_of
from ebb.model.trace import CountSeries, RequestTrace
from ebb.model.trace_ops import window
from ebb.score.units import human_count, human_span
from ebb.sim.baselines.oracle import OraclePolicy, search_runs
from ebb.sim.compare import (
    Workload,
    arrivals_per_second,
    calibration_reference,
    first_load_guess,
    prepare,
    probe_schedule,
    search_share,
    simulate_one,
    unit_peak_replicas,
)
from ebb.sim.policies import build_policy
from ebb.sim.policy import scheduled
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings

__all__ = ["CALIBRATING", "CALIBRATION_ROUNDS", "CALIBRATION_S", "FLOOR_S_PER_REPLICA", "FLOOR_S_PER_UNIT",
           "MAX_SLICE_S", "MIN_SLICE_S", "ORACLE", "SLICE_SHARE", "Phase", "RunEstimate", "RunPlan", "measure",
           "plan_run", "slice_end_s"]

FLOOR_S_PER_UNIT: Final = {"request": 1e-6, "fluid": 2e-6}
"""Fewest wall seconds one simulation spends per unit: a request (request fidelity; 2–5 µs measured,
``bench/sim_throughput.py``) or a bin (fluid; 4 µs measured)."""
FLOOR_S_PER_REPLICA: Final = 5e-6
"""Fewest wall seconds one simulation spends per replica of its fleet (about 15 µs measured: a fluid
run of the oracle holding 100,000 replicas took 1.46 s, against 0.05 s at 10,000)."""
CALIBRATION_S: Final = 1.0
"""Wall seconds the slice of :func:`measure` is sized to at the floor's rates; it takes longer by as
much as the machine is slower than the floor (``make demo``'s 2 % slice: 0.35 s)."""
SLICE_SHARE: Final = (0.002, 0.02)
"""Smallest and largest share of the trace's requests the slice holds."""
MAX_SLICE_S: Final = 5.0
"""Most wall seconds the slice may take at the floor's rates; past it the floor is said unmeasured."""
MIN_SLICE_S: Final = 30.0
"""Shortest slice (s of trace): two HPA reconciles."""
CALIBRATION_ROUNDS: Final = 3
"""Rounds a ``--peak-replicas`` calibration is planned with: a fresh oracle search, then searches near
it (``make demo``'s takes 3; :func:`~ebb.sim.compare.calibrate` stops after 1 to 4). Progress adds
or drops rounds as they happen."""
CALIBRATING: Final = "calibrating"
"""The key of a calibration round's phase (its ``on_step`` messages start with it)."""
ORACLE: Final = "oracle"
"""The key of the oracle search's phase."""


@dataclass(frozen=True)
class Phase:
    """One step of the comparison: its ``on_step`` key, its simulations, the wall seconds expected."""

    key: str
    """``calibrating`` (one per round), ``oracle``, or ``simulating SPEC`` (the message that starts it)."""
    runs: int
    expected_s: float


@dataclass(frozen=True)
class RunPlan:
    """What a comparison will simulate, counted before any of it runs (:func:`plan_run`)."""

    fidelity: str
    load_scale: float
    """``--load-scale``, or times the calibration's first guess when ``calibrating``."""
    calibrating: bool
    requests: int
    """Requests at ``load_scale`` (expected: a thinned copy rounds)."""
    span_s: float
    units: int
    """The workload's units: requests (request fidelity) or bins (fluid)."""
    reference_units: int
    """The calibration reference's units at ``load_scale`` (its fidelity: ``reference_fidelity``)."""
    reference_fidelity: str
    fleet: int
    """Replicas the oracle's schedule peaks at, about: every simulation starts near it."""
    items: tuple[PolicySpecItem, ...]

    def phase_runs(self) -> list[tuple[str, int, float]]:
        """``(key, simulations, share of the workload each simulates)`` per phase, in order."""
        share = search_share(self.span_s)
        verify = 0 if share >= 1.0 else 1  # a digest search is then checked on the whole workload
        out: list[tuple[str, int, float]] = []
        if self.calibrating:
            out += [(CALIBRATING, search_runs(near=r > 0), share) for r in range(CALIBRATION_ROUNDS)]
        out.append((ORACLE, search_runs(near=self.calibrating), share))
        if verify:
            out.append((ORACLE, verify, 1.0))
        out += [(f"simulating {i.text}", 1, 1.0) for i in self.items]
        return out

    def floor(self) -> RunEstimate:
        """The plan priced at :data:`FLOOR_S_PER_UNIT` and :data:`FLOOR_S_PER_REPLICA`: a lower bound."""
        def run_s(units: int, fidelity: str) -> float:
            return FLOOR_S_PER_UNIT[fidelity] * units + FLOOR_S_PER_REPLICA * self.fleet

        def per_run(key: str) -> float:
            if key == CALIBRATING:
                return run_s(self.reference_units, self.reference_fidelity)
            return run_s(self.units, self.fidelity)

        return self.priced(per_run, measured_share=0.0)

    def priced(self, per_run: Callable[[str], float], *, measured_share: float) -> RunEstimate:
        """The phases with ``per_run(key)`` wall seconds per simulation of the whole workload."""
        merged: list[Phase] = []
        for key, runs, share in self.phase_runs():
            s = runs * share * per_run(key)
            if merged and merged[-1].key == key == ORACLE:  # the digest search and its full check: one step
                merged[-1] = Phase(key, merged[-1].runs + runs, merged[-1].expected_s + s)
            else:
                merged.append(Phase(key, runs, s))
        return RunEstimate(self.requests, self.span_s, len(self.items), tuple(merged), measured_share,
                           self.load_scale, self.calibrating, self.fidelity)


@dataclass(frozen=True)
class RunEstimate:
    """The phases of a run with the wall seconds each should take here."""

    requests: int
    span_s: float
    policies: int
    phases: tuple[Phase, ...]
    measured_share: float
    """Share of the trace's requests the estimate was measured on; 0.0: the floor, nothing measured."""
    load_scale: float
    calibrating: bool
    fidelity: str

    @property
    def expected_s(self) -> float:
        return sum(p.expected_s for p in self.phases)

    @property
    def simulations(self) -> int:
        return sum(p.runs for p in self.phases)

    def rescaled(self, requests: int, load_scale: float) -> RunEstimate:
        """The estimate once the calibration has found the load (``load_scale``, ``requests`` at it):
        each phase after the calibration scales with the requests in request fidelity; fluid bins do
        not change."""
        found = replace(self, requests=requests, load_scale=load_scale, calibrating=False)
        if self.fidelity != "request" or self.requests <= 0:
            return found
        r = requests / self.requests
        return replace(found, phases=tuple(
            p if p.key == CALIBRATING else replace(p, expected_s=p.expected_s * r) for p in self.phases))

    def line(self) -> str:
        """One line: the work, and the time it should take (≥ when it is the floor, ≈ when measured)."""
        load = f" at load ≈ x{self.load_scale:.3g} before calibration" if self.calibrating else ""
        how = (f"≈ {human_span(self.expected_s)} (measured on {100 * self.measured_share:.2g} % of the trace)"
               if self.measured_share > 0 else f"≥ {human_span(self.expected_s)} (counted, not measured)")
        return (f"{human_count(self.requests)} requests over {human_span(self.span_s)}{load}; "
                f"{self.simulations} simulations: expected {how}")


def plan_run(trace: RequestTrace | CountSeries, items: Sequence[PolicySpecItem], settings: SimSettings, *,
             fidelity: str, load_scale: float = 1.0, peak_replicas: int | None = None,
             fluid_bin_s: float | None = None) -> RunPlan:
    """Count the work of ``compare(trace, items, settings, fidelity=..., ...)`` without simulating it.

    Cost: one pass over the unscaled trace (its work rate, and in fluid its bins); nothing scales
    with the load, so a ``--load-scale 1e9`` is counted as fast as ``1``."""
    unit_peak = unit_peak_replicas(trace, settings)
    k = load_scale
    if peak_replicas is not None and unit_peak > 0:
        k *= first_load_guess(peak_replicas, unit_peak)
    requests = int(round(trace.requests * k))
    ref = calibration_reference(trace, settings)(1.0)
    if isinstance(ref, RequestTrace):
        ref_units, ref_fid = int(round(ref.requests * k)), "request"
    else:
        ref_units, ref_fid = len(ref.counts), "fluid"
    units = requests
    if fidelity == "fluid":  # bins do not depend on the load: count them on the unscaled workload
        units = _units(prepare(trace, "fluid", settings, fluid_bin_s=fluid_bin_s))
    return RunPlan(fidelity, k, peak_replicas is not None, requests, trace.duration_s, units, ref_units, ref_fid,
                   int(math.ceil(k * unit_peak)), tuple(items))


def _units(w: Workload) -> int:
    return w.requests if isinstance(w, RequestTrace) else len(w.counts)


def _reconciles(policy: Policy, span_s: float, fidelity: str) -> float:
    """Decisions a policy makes over ``span_s``: its reconciles, plus its fast path's if it has one.
    Zero for a :class:`~ebb.sim.policy.Scheduled` policy (the oracle, static) in request fidelity: the
    engine reconciles it only where its answer changes, so its cost follows the requests, not the span
    (counting its reconciles priced two requests 6 h apart at ≈ 9 min; they took 9 s)."""
    if fidelity == "request" and scheduled(policy) is not None:
        return 0.0
    n = span_s / max(float(policy.interval_s), 1e-3)
    react = react_of(policy)
    if react is not None and react.react_interval_s:
        n += span_s / max(float(react.react_interval_s), 1e-3)
    return n


def slice_end_s(trace: RequestTrace | CountSeries, share: float) -> float:
    """The trace second by which ``share`` of its requests have arrived, at least :data:`MIN_SLICE_S`
    and three of a count series' bins, at most the whole span."""
    cum = np.cumsum(arrivals_per_second(trace))
    total = float(cum[-1]) if len(cum) else 0.0
    end = float(np.searchsorted(cum, share * total, side="left") + 1) if total > 0 else trace.duration_s
    floor_s = max(MIN_SLICE_S, 3 * trace.bin_s if isinstance(trace, CountSeries) else 0.0)
    return min(max(end, floor_s), max(trace.duration_s, 1.0))


def measure(plan: RunPlan, trace: RequestTrace | CountSeries, settings: SimSettings, *,
            fluid_bin_s: float | None = None, clock: Callable[[], float] | None = None) -> RunEstimate:
    """The plan priced by running its policies, and one oracle candidate, on a slice of the trace at
    the plan's load (see the module docstring); ``clock`` times each run (default ``time.perf_counter``).

    The floor instead, unmeasured, when the slice would take over :data:`MAX_SLICE_S` even at the
    floor's rates (a fleet of millions: the slice starts it too) or holds no request. A run's fleet
    start is a fixed cost, not scaled with the work: the floor's share of it is taken off the
    slice's time before scaling and added back at the plan's fleet."""
    clock = clock or time.perf_counter
    floor = plan.floor()
    measured_runs = len(plan.items) + 1 + (1 if plan.calibrating else 0)
    per_pass = FLOOR_S_PER_UNIT[plan.fidelity] * plan.units * measured_runs
    share = min(SLICE_SHARE[1], max(SLICE_SHARE[0], CALIBRATION_S / per_pass if per_pass > 0 else 1.0))
    if share * per_pass + measured_runs * FLOOR_S_PER_REPLICA * plan.fleet > MAX_SLICE_S or trace.requests == 0:
        return floor
    part = window(trace, 0.0, slice_end_s(trace, share))
    quick = replace(settings, warmup_s=0.0)  # a warm-up longer than the slice would leave nothing scored
    w = prepare(part, plan.fidelity, quick, load_scale=plan.load_scale, fluid_bin_s=fluid_bin_s)
    if w.requests == 0:
        return floor
    ctx = PolicyContext(settings=quick, oracle_schedule=probe_schedule(w, quick))

    def timed(workload: Workload, policy: Policy, full_units: int) -> float:
        t0 = clock()
        tl = simulate_one(workload, policy, quick).timeline
        fleet_s = FLOOR_S_PER_REPLICA * ctx.oracle_peak
        took = max(clock() - t0 - fleet_s, 0.0)
        # The slice's simulated span runs to its last completion, past its last arrival: a slice of a
        # burst of 30 s jobs arriving at once reconciles for 40 s, not 0.
        ran_s = max(workload.duration_s, float(tl.t_s[-1] + tl.bin_s) if len(tl.t_s) else 0.0)
        whole = full_units + _reconciles(policy, plan.span_s, plan.fidelity)
        part_work = _units(workload) + _reconciles(policy, ran_s, plan.fidelity)
        return took * whole / max(part_work, 1.0) + FLOOR_S_PER_REPLICA * plan.fleet

    simulate_one(w, OraclePolicy(ctx.oracle_schedule), quick)  # once untimed: a process's first run pays one-time costs
    per_key = {ORACLE: timed(w, OraclePolicy(ctx.oracle_schedule), plan.units)}
    per_key |= {f"simulating {i.text}": timed(w, build_policy(i, ctx), plan.units) for i in plan.items}
    if plan.calibrating:
        ref = calibration_reference(part, quick)(plan.load_scale)
        same = plan.reference_fidelity == plan.fidelity == "request"
        per_key[CALIBRATING] = per_key[ORACLE] if same else timed(
            ref, OraclePolicy(probe_schedule(ref, quick)), plan.reference_units)
    return plan.priced(per_key.__getitem__, measured_share=part.requests / trace.requests)
