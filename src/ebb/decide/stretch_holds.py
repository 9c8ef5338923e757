"""Reconciles proven holds inside a quiet stretch: the hold proof for a request simulator's samples.

A quiet stretch (:mod:`ebb.decide.quiet_stretch`) plans every 100 ms sample between two events at
once, but its reconciles still ran ``decide`` one by one: once a simulated second, ~90 µs of policy
and ~30 µs of the engine's per-pod views each, two thirds of a 23-day long-service run after the
stretches. Most of those reconciles are plain holds. :func:`stretch_holds` proves how many leading
reconciles of a stretch are — the answer ``decide`` would give, nothing recorded — with the fluid
engine's proof (:func:`~ebb.decide.hold_proof.held_prefix`), fed what a request stretch's reconciles
read instead of one 1 s bin each:

* **Cycle peaks**: the largest need of each reconcile's ~10 samples (the plan's needs, reduced).
* **Sizing window**: :meth:`~ebb.decide.ebb_state.EbbState.window_needs_at`, the window at each
  reconcile once its samples are in.
* **L1 P99**: only reconciles whose 1 s L1 window holds nothing but the stretch's steady demand (the
  samples after the last one that differed, over 1.2 s back: ten 100 ms buckets and one of slack);
  its P99 is then that demand's bin value (:meth:`~ebb.window.small.SmallWindow.lone_quantiles`).
* **Latency window**: no completion arrives in a stretch, so its rows only age out. Where a TTFT row
  is left the P99 is at most the window's peak (calm, :func:`~ebb.decide.ebb_rules.calm_window`): the
  weight steps calm; where none is and the fleet is idle, the P99 reads 0 (calm too); otherwise it is
  unknown: the weight stays, and a veto repeats only if the last one named the unknown latency too
  (:func:`~ebb.decide.ebb_rules.repeats_last_veto`).
* **No queue**: every sample's queue empty (no persistent queue, no capacity learned).

The state is then what those ``decide`` calls leave: the samples through the last proven hold taken
(:meth:`~ebb.decide.ebb_state.EbbState.ingest_planned`), its cycle closed, the windows trimmed at its
time and the L1 window's head moved there. The engine decides the next reconcile as always.

Pure: arrays in, an int out, the policy's state advanced; no I/O. Cost: ~60 numpy calls per call,
whatever the number of reconciles (at most the comeback ring's capacity). Tested equal to ``decide``
one reconcile at a time, end to end (``tests/unit/sim/test_request_quiet_stretch.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.decide.ebb_rules import EbbConfig
from ebb.decide.hold_block import holds_possible
from ebb.decide.hold_proof import held_prefix
from ebb.decide.latency import TTFT
from ebb.decide.need import SamplePlan

__all__ = ["L1_STEADY_S", "StretchSamples", "stretch_holds", "stretch_samples"]

_NS = 1_000_000_000
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
L1_STEADY_S = 1.2
"""How far back (s) from a reconcile a sample leaves the L1 window for sure: its ten 100 ms buckets,
one more for the newest bucket's start and one for the nanoseconds' rounding."""


@dataclass(frozen=True, eq=False)
class StretchSamples:
    """A planned stretch's samples, as its ingest and its proofs read them (built once a stretch)."""

    plan: SamplePlan
    served: FloatArray
    """Served demand per sample (replica units)."""
    demand: list[float]
    """The same as Python floats (:meth:`~ebb.decide.ebb_state.EbbState.ingest_planned` reads them one by one)."""
    queued: list[float]
    settled_s: float
    """The last sample whose demand differs from the final one's (the first sample when none does:
    the window may hold others from before it); +inf when any sample queued (no hold is proven)."""

    def l1_steady(self, t_s: float) -> bool:
        """Whether a reconcile at ``t_s`` reads an L1 window of the final demand only."""
        return t_s >= self.settled_s + L1_STEADY_S


def stretch_samples(plan: SamplePlan, served: FloatArray, queued: list[float]) -> StretchSamples:
    """The :class:`StretchSamples` of a plan, its served demand and queue."""
    differs = np.flatnonzero(served != served[-1])
    first = int(differs[-1]) if len(differs) else 0
    settled_s = float(plan.t[first]) if not any(queued) else math.inf
    return StretchSamples(plan, served, served.tolist(), queued, settled_s)


def stretch_holds(pol: EbbConfig, samples: StretchSamples, taken: int, ticks_s: list[float], cuts: list[int],
                  ready: int, spec: int) -> int:
    """How many leading reconciles at ``ticks_s`` are provably holds, each deciding after the
    samples before ``cuts[k]`` (increasing, past ``taken``, the samples already ingested, its
    previous reconcile's cycle closed), in a fleet of ``spec`` with ``ready`` ready; the policy's
    state advanced through them (module docstring). 0, nothing changed, when none is proven."""
    st = pol.state
    m = min(len(ticks_s), len(cuts), st.bound.ring_capacity)
    if m == 0 or not samples.l1_steady(ticks_s[0]) or st.first_t is None or st.cycle_peak != 0.0 or \
            not holds_possible(pol):
        return 0
    ticks = np.asarray(ticks_s[:m], dtype=np.float64)
    m = min(m, int(np.searchsorted(ticks, st.bursts.hold_from(float(ticks[0])), side="left")))
    ends = np.asarray(cuts[:m], dtype=np.int64) - taken
    if m == 0 or int(ends[0]) < 1 or not bool((ends[1:] > ends[:-1]).all()):
        return 0
    ticks = ticks[:m]
    stop = taken + int(ends[-1])
    plan = samples.plan
    t_new, needs = plan.t[taken:stop], plan.need[taken:stop]
    peaks = np.maximum.reduceat(needs, np.concatenate(([0], ends[:-1])))
    window = st.window_needs_at(t_new, needs, ticks, ends)
    l1 = np.repeat(st.l1.lone_quantiles(samples.served[-1:]), m)
    ttft_peak, calm = _latency_reads(pol, ticks, t_new, samples.served[taken:stop], ends)
    cap = max(ready, 1) * st.capacity
    held = held_prefix(pol, ticks, peaks, window, l1, cap, spec, ttft_peak, calm)
    if held:
        _advance(pol, samples, taken, taken + int(ends[held - 1]), float(ticks[held - 1]), peaks[:held],
                 ticks[:held], cap)
    return held


def _latency_reads(pol: EbbConfig, ticks: FloatArray, t_new: FloatArray, served: FloatArray, ends: IntArray
                   ) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Per reconcile, an upper bound of the TTFT P99 ``decide`` reads (the window's peak while a row
    is left, -inf where an idle fleet reads 0, NaN where it is unknown) and whether it steps the weight."""
    st = pol.state
    lat = st.latency
    assert st.first_t is not None
    has_rows = lat.newest_s(TTFT) >= ticks - lat.window_s  # what trim at the reconcile keeps
    busy_t = np.where(served > 0.0, t_new, -math.inf)  # no queue (checked)
    last_busy = np.maximum(np.maximum.accumulate(busy_t)[ends - 1], st.last_busy_t)
    idle = ~has_rows & (ticks - np.maximum(last_busy, st.first_t) >= lat.window_s) & \
        (ticks - t_new[ends - 1] <= pol.max_staleness_s)
    peak = lat.peak(TTFT)
    ttft_peak = np.where(has_rows, peak, np.where(idle, -math.inf, math.nan))
    return np.asarray(ttft_peak, dtype=np.float64), np.asarray(has_rows | idle, dtype=np.bool_)


def _advance(pol: EbbConfig, samples: StretchSamples, start: int, stop: int, t_last: float, peaks: FloatArray,
             ticks: FloatArray, cap: float) -> None:
    """The state the proven holds' ``decide`` calls leave past what :func:`held_prefix` recorded: their
    samples ingested, the last cycle closed, the windows trimmed and read at the last reconcile."""
    st = pol.state
    st.ingest_planned(samples.plan, start, stop, samples.demand, samples.queued)
    st.cycle_peak = 0.0
    outgrown = np.flatnonzero(peaks > cap)  # decide's test of each cycle's peak
    if len(outgrown):
        st.last_outgrown_t = float(ticks[int(outgrown[-1])])
    read_t = st.read_time(t_last)
    st.trim(read_t)
    st.l1.quantile(0.99, int(read_t * _NS))  # decide's query moves the window's head
