"""What a controller cycle read, how it reads it, and the small conversions around it.

:class:`Sensed` is one cycle's (or fast-path tick's) read of the source and the fleet, with why the
data cannot back a scale-down; :class:`Sensor` does the reading (source cursor, freshness of the
newest sample seen, fleet completeness; the controller's "fail static on bad data" and "monotonic
time" guarantees); :func:`observation` turns a read into the policy's
:class:`~ebb.model.observation.Observation`; :func:`rebase` maps an agent's Unix-stamped samples
onto the policy's monotonic timeline; :func:`actuated` and :func:`victim_names` turn the actuator's
answers into ledger fields. Only :class:`Sensor` does I/O (through the source and actuator it is
handed).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from ebb.actuate.base import ActuationResult, Actuator, FleetState, SizedBySource
from ebb.errors import EbbError
from ebb.live.settings import CycleOutcome
from ebb.live.timeline import Tick
from ebb.live.ttft_seen import NO_TTFT, TtftSeen
from ebb.model.decisions import JSON
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals, Observation, PodView
from ebb.model.spans import Spans
from ebb.sources.live import FreshSource, SignalSource

__all__ = ["Sensed", "Sensor", "actuated", "covered", "empty_fine", "observation", "rebase", "victim_names"]

log = logging.getLogger("ebb.live.controller")


@dataclass(frozen=True)
class Sensed:
    """What one cycle read before deciding: the source's signals and the fleet."""

    sig: LiveSignals
    state: FleetState
    note: str
    """Why the data is not fresh and complete (stale, unreachable, incomplete fleet); "" when it is."""
    stale_s: float | None
    """Age of the freshest sample ever seen (s); None when the source has never answered."""
    max_staleness_s: float
    """Data older than this (s) backs no decision at all."""
    down_fresh_s: float = math.inf
    """Data older than this (s; capped at ``max_staleness_s``) backs scale-ups only (the freshness
    rule: the source's :attr:`~ebb.sources.live.FreshSource.down_fresh_s`, else the staleness limit)."""
    ttft: TtftSeen = NO_TTFT
    """TTFT of the completions read since the previous cycle's read (:meth:`Sensor.sense`)."""

    @property
    def unfit(self) -> str:
        """Why this data must not back a scale-down; "" when it may (module docstring: the freshness rule)."""
        if self.note:
            return self.note
        if self.stale_s is None or self.stale_s > self.max_staleness_s:
            return "no fresh data"
        fresh = min(self.down_fresh_s, self.max_staleness_s)
        if self.stale_s > fresh:
            return f"data {self.stale_s:.1f} s old: a scale-down needs data at most {fresh:g} s old"
        return ""

    def outcome(self, n: int, t_s: float, action: str, to_replicas: int, decision_id: DecisionId | None = None,
                *, acted: bool = False, note: str = "", signals: Mapping[str, float] | None = None) -> CycleOutcome:
        return CycleOutcome(n, t_s, action, self.state.spec_replicas, to_replicas, self.state.ready_replicas,
                            self.stale_s, decision_id, acted, note, dict(signals or {}), ttft=self.ttft)


def empty_fine() -> FineSignals:
    return FineSignals()


def rebase(f: FineSignals, tick: Tick) -> FineSignals:
    """Unix sample stamps onto the policy's monotonic timeline (by age; vectorised)."""
    offset = tick.wall_s - tick.t_s
    return FineSignals(t_s=f.t_s - offset, prefill_replicas=f.prefill_replicas, slot_replicas=f.slot_replicas,
                       queued=f.queued, done_t_s=f.done_t_s - offset, done_ttft_ms=f.done_ttft_ms,
                       done_e2e_ms=f.done_e2e_ms, done_weight=f.done_weight, done_wait_ms=f.done_wait_ms)


def actuated(res: ActuationResult) -> dict[str, JSON]:
    """The actuator's report as outcome snapshot fields."""
    return {"applied": res.applied, "replicas_before": res.replicas_before, "replicas_after": res.replicas_after,
            "removed": list(res.removed), "added": list(res.added)}


def victim_names(state: FleetState) -> Callable[[ReplicaId], str]:
    """Replica id → the actuator's name for it. An id the fleet does not hold (no policy should
    name one) gets a name no actuator gives, so a resume can never match it to a replica."""
    names = {r.replica: r.name for r in state.replicas}
    return lambda rid: names.get(rid, f"<unknown replica {int(rid)}>")


class Sensor:
    """Reads a cycle's data: the source from a cursor, then the fleet (module docstring).

    Fresh means the freshest sample *seen* (``newest_s``) is at most ``max_staleness_s`` old, not
    that this read returned one: a read with nothing newer than the cursor (a fast-path read just
    took the newest bucket) is no sign of a stalled source. A wall-clock step resets the cursor and
    the freshness reference (the policy's windows run on the monotonic clock and keep their history).
    """

    def __init__(self, t0_s: float, *, lookback_s: float, max_staleness_s: float) -> None:
        self.lookback_s = lookback_s
        self.max_staleness_s = max_staleness_s
        self.cursor_s = t0_s - lookback_s
        """Unix time the next read continues from."""
        self.newest_s: float | None = None
        """The freshest sample any read returned since the last clock step (Unix s)."""
        self.down_fresh_s = math.inf
        """The source's scale-down freshness (:class:`~ebb.sources.live.FreshSource`; inf: the staleness limit)."""
        self._coverage: tuple[int, int] | None = None  # (seen, ready) of the incomplete fleet last logged
        self.freshness = "fresh"
        """The data's state after the last read: ``fresh`` (backs any decision), ``aged`` (older than
        the source's :attr:`down_fresh_s`: scale-ups only) or ``stale`` (older
        than ``max_staleness_s``, or never seen: no decision); each change is logged once."""
        self._ttft = NO_TTFT
        """TTFT of the completions every read since the last :meth:`sense` returned (the fast path's
        reads consume samples too): what the next cycle's outcome reports."""

    def staleness(self, tick: Tick) -> float | None:
        """Age of the freshest sample seen (s); None when the source has never answered."""
        return None if self.newest_s is None else tick.wall_s - self.newest_s

    def read(self, source: SignalSource, span: Spans, tick: Tick, *, quiet: bool = False) -> tuple[LiveSignals, str]:
        """The source's samples since the cursor and why they cannot back a scale-down ("" when they
        can). ``quiet``: a fast-path tick logs no source trouble (the next cycle does, in its trace)."""
        now = tick.wall_s
        if tick.step_s is not None:
            log.warning("wall clock stepped by %+.1f s: source cursor and data freshness reset "
                        "(the policy's windows run on the monotonic clock and keep their history)", tick.step_s)
            self.cursor_s, self.newest_s = now - self.lookback_s, None
        since = max(self.cursor_s, now - self.lookback_s)
        try:
            with span.layer("ebb.source") as s:
                sig = source.read(since)
                s.set(**{"ebb.source.samples": int(len(sig.fine.t_s))})
        except EbbError as exc:  # unreachable or malformed: no data this cycle (fail static)
            if not quiet:
                log.warning("source: %s — no data this cycle, scale-down blocked", exc)
            return LiveSignals(empty_fine()), f"source: {exc}"
        newest = sig.newest_sample_s
        if newest is not None and newest > now + self.max_staleness_s:
            # From the future by more than the staleness bound: a clock we cannot trust.
            if not quiet:
                log.warning("source: newest sample is %.1f s in the future — ignored, scale-down blocked",
                            newest - now)
            return LiveSignals(empty_fine()), "samples from the future"
        if newest is not None:
            self.newest_s = max(self.newest_s or -math.inf, newest)
        if len(sig.fine.done_ttft_ms):
            self._ttft = self._ttft.merged(TtftSeen.of(sig.fine.done_ttft_ms, sig.fine.done_weight))
        if len(sig.fine.t_s):
            self.cursor_s = max(self.cursor_s, min(float(np.max(sig.fine.t_s)), now))
        age = None if self.newest_s is None else now - self.newest_s
        self._note_freshness(age, quiet)
        if age is None or age > self.max_staleness_s:
            return LiveSignals(empty_fine(), newest_sample_s=newest), "stale data"
        return sig, ""

    def _note_freshness(self, age_s: float | None, quiet: bool) -> None:
        """Log the data's freshness when it changes state (never once per cycle; see :attr:`freshness`)."""
        down = min(self.down_fresh_s, self.max_staleness_s)
        state = ("stale" if age_s is None or age_s > self.max_staleness_s else
                 "aged" if age_s > down else "fresh")
        if state == self.freshness or quiet:
            return
        self.freshness = state
        if age_s is None:
            log.warning("no sample from the source yet: no decision until one arrives")
        elif state == "stale":
            log.warning("newest sample is %.1f s old, over the %g s allowed (--max-staleness-s): no decision "
                        "on it until fresher data arrives (an agent behind, stalled or with its clock behind)",
                        age_s, self.max_staleness_s)
        elif state == "aged":
            log.warning("newest sample is %.1f s old: scale-ups only; a scale-down needs data at most %g s old "
                        "(an agent behind or with its clock behind: see ebb_agent_clock_offset_seconds)", age_s, down)
        else:
            log.info("data fresh again: newest sample %.1f s old", age_s)

    def sense(self, source: SignalSource, actuator: Actuator, span: Spans, tick: Tick) -> Sensed:
        """Read the source, then the fleet (a fleet sized by the source told what this read covered
        first: :class:`~ebb.actuate.base.SizedBySource`), then check the read covers the fleet
        (:func:`covered`: the ready replicas the source reads,
        :attr:`~ebb.actuate.base.FleetState.source_ready`)."""
        self.down_fresh_s = source.down_fresh_s if isinstance(source, FreshSource) else math.inf
        sig, note = self.read(source, span, tick)
        ttft, self._ttft = self._ttft, NO_TTFT
        if not note and isinstance(actuator, SizedBySource):
            actuator.source_saw(sig.replicas_seen)  # a fleet sized by what the source reads (recommend mode)
        with span.layer("ebb.actuate.state"):
            state = actuator.state()
        if not note:
            sig, note = covered(sig, state.source_ready)
            self._note_coverage(sig.replicas_seen if note else None, state.source_ready)
        return Sensed(sig, state, note, self.staleness(tick), self.max_staleness_s, self.down_fresh_s, ttft)

    def _note_coverage(self, seen: int | None, ready: int) -> None:
        """Log an incomplete fleet when it starts or its counts change, and its end (never per cycle)."""
        now = None if seen is None else (seen, ready)
        if now == self._coverage:
            return
        if now is not None:
            log.warning("source covers %d of %d ready replicas: scale-down blocked, their demand extrapolated "
                        "for scale-ups, until every ready replica reports", seen, ready)
        else:
            log.info("source covers every ready replica again")
        self._coverage = now


def covered(sig: LiveSignals, ready: int) -> tuple[LiveSignals, str]:
    """``sig`` as the policy sees it over ``ready`` replicas, and why it cannot back a scale-down
    ("" when it can). Samples over fewer replicas than are ready understate demand: they back no
    scale-down, but their served demand is extrapolated to the ready fleet (``× ready / seen``: the
    silent replicas taken as loaded as the average of those reporting), so one bad pod never stops
    a scale-up on the others' overload nor teaches the policy's memory a need that is too low. The
    cycle and the fast path both see the fleet through this."""
    seen = sig.replicas_seen
    if seen is None or seen >= ready:
        return sig, ""
    out = extrapolated(sig, ready / seen) if seen > 0 else LiveSignals(empty_fine(), newest_sample_s=sig.newest_sample_s)
    return out, f"incomplete fleet: {seen} of {ready} ready replicas reported (their demand extrapolated)"


def extrapolated(sig: LiveSignals, factor: float) -> LiveSignals:
    """``sig`` with its served demand (prefill and slot replicas) times ``factor``; queue, completions
    and everything else as read."""
    f = sig.fine
    return replace(sig, fine=replace(f, prefill_replicas=f.prefill_replicas * factor,
                                     slot_replicas=f.slot_replicas * factor))


def observation(seen: Sensed, tick: Tick) -> Observation:
    """What the policy is shown of a cycle's read (times on its monotonic timeline; the fleet's
    sleepers, :attr:`~ebb.actuate.base.FleetState.asleep`, as ``asleep_replicas``)."""
    sig, state = seen.sig, seen.state
    pods = tuple(PodView(replica=r.replica, created_s=tick.policy_time(r.created_s),
                         ready_s=None if r.ready_s is None else tick.policy_time(r.ready_s), util_ratio=None,
                         inflight=sig.inflight_by_replica.get(r.name), qps=None, zone=r.zone)
                 for r in state.replicas)
    inflight = sum(sig.inflight_by_replica.values()) if sig.inflight_by_replica else None
    if inflight is not None and sig.queued is not None:
        inflight += sig.queued
    return Observation(t_s=tick.t_s, spec_replicas=state.spec_replicas,
                       ready_replicas=state.ready_replicas, pods=pods, total_qps=sig.total_qps,
                       total_inflight=inflight, queued=sig.queued, fine=rebase(sig.fine, tick),
                       asleep_replicas=len(state.asleep), wake_s_seen=state.wake_s_seen)
