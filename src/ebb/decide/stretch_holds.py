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

import numpy as np
import numpy.typing as npt

from ebb.decide.ebb_rules import EbbConfig
from ebb.decide.hold_block import holds_possible
from ebb.decide.hold_proof import held_prefix
from ebb.decide.latency import TTFT
from ebb.decide.need import SamplePlan

__all__ = ["L1_STEADY_S", "stretch_holds"]

_NS = 1_000_000_000
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
L1_STEADY_S = 1.2
"""How far back (s) from a reconcile a sample leaves the L1 window for sure: its ten 100 ms buckets,
one more for the newest bucket's start and one for the nanoseconds' rounding."""


def stretch_holds(pol: EbbConfig, plan: SamplePlan, demand: list[float], queued: list[float], taken: int,
                  ticks_s: list[float], cuts: list[int], ready: int, spec: int, settled_s: float,
                  served: FloatArray) -> int:
    """How many leading reconciles at ``ticks_s`` are provably holds, each deciding after the plan's
    samples before ``cuts[k]`` (increasing, past ``taken``, the samples already ingested, its
    previous reconcile's cycle closed), in a fleet of ``spec`` with ``ready`` ready, the plan's
    samples after ``settled_s`` all of demand ``demand[-1]`` (``served``: ``demand`` as an array)
    and none queued; the policy's state advanced through them (module docstring). 0, nothing
    changed, when none is proven."""
    st = pol.state
    m = min(len(ticks_s), len(cuts), st.bound.ring_capacity)
    if m == 0 or not ticks_s[0] >= settled_s + L1_STEADY_S or st.first_t is None or st.cycle_peak != 0.0 or \
            not holds_possible(pol):
        return 0
    ticks = np.asarray(ticks_s[:m], dtype=np.float64)
    m = min(m, int(np.searchsorted(ticks, st.bursts.hold_from(float(ticks[0])), side="left")))
    ends = np.asarray(cuts[:m], dtype=np.int64) - taken
    if m == 0 or int(ends[0]) < 1 or not bool((ends[1:] > ends[:-1]).all()):
        return 0
    ticks = ticks[:m]
    stop = taken + int(ends[-1])
    t_new, needs = plan.t[taken:stop], plan.need[taken:stop]
    peaks = np.maximum.reduceat(needs, np.concatenate(([0], ends[:-1])))
    window = st.window_needs_at(t_new, needs, ticks, ends)
    l1 = np.repeat(st.l1.lone_quantiles(np.array([demand[-1]], dtype=np.float64)), m)
    ttft_peak, calm = _latency_reads(pol, ticks, t_new, served[taken:stop], ends)
    cap = max(ready, 1) * st.capacity
    held = held_prefix(pol, ticks, peaks, window, l1, cap, spec, ttft_peak, calm)
    if held:
        _advance(pol, plan, demand, queued, taken, taken + int(ends[held - 1]), float(ticks[held - 1]),
                 peaks[:held], ticks[:held], cap)
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


def _advance(pol: EbbConfig, plan: SamplePlan, demand: list[float], queued: list[float], start: int, stop: int,
             t_last: float, peaks: FloatArray, ticks: FloatArray, cap: float) -> None:
    """The state the proven holds' ``decide`` calls leave past what :func:`held_prefix` recorded: their
    samples ingested, the last cycle closed, the windows trimmed and read at the last reconcile."""
    st = pol.state
    st.ingest_planned(plan, start, stop, demand, queued)
    st.cycle_peak = 0.0
    outgrown = np.flatnonzero(peaks > cap)  # decide's test of each cycle's peak
    if len(outgrown):
        st.last_outgrown_t = float(ticks[int(outgrown[-1])])
    read_t = st.read_time(t_last)
    st.trim(read_t)
    st.l1.quantile(0.99, int(read_t * _NS))  # decide's query moves the window's head
