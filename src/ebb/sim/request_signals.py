"""The per-second signals a request-level run's metric pipelines read, stored as change-points.

A pipeline reads the fleet at whole seconds: per replica its cumulative busy time, completions,
in-flight requests and KV tokens; fleet-wide the arrivals so far, the requests in flight and queued,
the ready count and (for policies that read them) the cumulative serving counters. The value at
second ``s`` is the state after every event at or before ``s`` (finishes, arrivals, cold-start ends,
fine samples; a reconcile at ``s`` comes after it).

Between two events nothing of that state changes but the busy time, which grows by one second per
second while the replica serves. So :class:`SignalRows` keeps one row per second *at which something
changed* (a fleet row, and a row per replica whose counters moved), and reads second ``s`` from the
newest row at or before it: the busy time as ``busy_cum + (s − busy_since)`` while serving, the same
expression, on the same floats, as a row written every second. Memory and time are then proportional
to events, not to the trace's span: two requests 28 h apart write a handful of rows, not 100,800 × the
fleet. ``every_second=True`` writes every live replica's row every second instead (the reference the
change-point rows are tested against, and the dense figure ``bench/sim_throughput.py`` compares with).
"""

from __future__ import annotations

from bisect import bisect_right

from ebb.model.ids import ReplicaId
from ebb.model.observation import PodView, ServingCounters
from ebb.sim.fleet import zone_of
from ebb.sim.lifecycle import DRAINING, STARTING, STOPPED, Lifecycles

__all__ = ["SignalRows"]

_ReplicaRow = tuple[float, float, int, float, float]
"""(busy seconds before the current busy stretch, its start, requests in flight, completions, KV tokens)."""


class SignalRows:
    """Fleet rows and per-replica rows, each at the second a change was first seen (module docstring)."""

    __slots__ = ("every_second", "secs", "arrivals", "inflight", "queued", "ready_n", "serving", "r_secs", "r_rows",
                 "dirty", "names")

    def __init__(self, *, every_second: bool = False) -> None:
        self.every_second = every_second
        self.secs: list[int] = []
        """Seconds of the fleet rows, increasing; the first is 0."""
        self.arrivals: list[float] = []
        self.inflight: list[float] = []
        self.queued: list[float] = []
        self.ready_n: list[int] = []
        self.serving: list[ServingCounters] = []
        """Empty unless the policy reads serving counters."""
        self.r_secs: dict[int, list[int]] = {}
        """Per replica, the seconds of its rows; the first is the first second it was live at."""
        self.r_rows: dict[int, list[_ReplicaRow]] = {}
        self.dirty: set[int] = set()
        """Replicas whose counters changed since their last row (the engine adds them)."""
        self.names: list[tuple[ReplicaId, str]] = []
        """Per replica id, its name and zone (fixed for life), built once."""

    def record(self, sec: int, fleet: Lifecycles, arrivals: int, queued: int, active: list[int],
               busy_cum: list[float], busy_since: list[float], done_cum: list[float], kv_held: list[float],
               serving: ServingCounters | None) -> None:
        """Second ``sec``: a fleet row, and a row for each live replica whose counters changed (each one
        when :attr:`every_second`)."""
        inflight_total = queued
        for r in fleet.live:
            inflight_total += active[r]
        self.secs.append(sec)
        self.arrivals.append(float(arrivals))
        self.inflight.append(float(inflight_total))
        self.queued.append(float(queued))
        self.ready_n.append(len(fleet.ready))
        if serving is not None:
            self.serving.append(serving)
        dirty, r_secs, r_rows, phase = self.dirty, self.r_secs, self.r_rows, fleet.phase
        for r in (fleet.live if self.every_second else dirty):
            if phase[r] == STOPPED:  # stopped since it changed: never read again
                continue
            row = (busy_cum[r], busy_since[r], active[r], done_cum[r], kv_held[r])
            secs = r_secs.get(r)
            if secs is None:
                r_secs[r] = [sec]
                r_rows[r] = [row]
            else:
                secs.append(sec)
                r_rows[r].append(row)
        dirty.clear()

    # -- reads -----------------------------------------------------------------------------------

    def row(self, s: int) -> int:
        """Index of the fleet row that holds second ``s`` (≥ 0, at or before the newest row's second
        or after it: the state has not changed since)."""
        return bisect_right(self.secs, s) - 1

    def serving_at(self, s: int) -> ServingCounters:
        """The cumulative serving counters at second ``s``."""
        return self.serving[self.row(s)]

    def first_sec(self, r: int) -> int | None:
        """The first second replica ``r`` was live at; None before its first row."""
        secs = self.r_secs.get(r)
        return secs[0] if secs is not None else None

    def pods(self, s: int, win: int, fleet: Lifecycles, kv_cap: float) -> list[PodView]:
        """Every live replica but the draining ones, oldest first, read at sample second ``s`` over the
        window ``[s − win, s]`` (from its first second on); one not live at ``s`` yet reads None."""
        phase, ready_s, requested_s = fleet.phase, fleet.ready_s, fleet.requested_s
        # The router queue, spread over the replicas ready at s (an engine-side queue's view).
        share = 0.0
        if s >= 0:
            k = self.row(s)
            if self.ready_n[k] > 0:
                share = self.queued[k] / self.ready_n[k]
        r_secs, r_rows, names, sharing = self.r_secs, self.r_rows, self.names, PodView.sharing
        pods: list[PodView] = []
        append = pods.append
        for r in fleet.live:
            st = phase[r]
            if st == DRAINING:
                continue
            while len(names) <= r:
                names.append((ReplicaId(len(names)), zone_of(len(names))))
            name, zone = names[r]
            secs = r_secs.get(r)
            if secs is None or s < secs[0]:
                append(PodView(name, requested_s[r], None if st == STARTING else ready_s[r], None, None, None, zone))
                continue
            rows = r_rows[r]
            # Most reads are of the newest row (the state has not changed since).
            j = len(secs) - 1 if secs[-1] <= s else bisect_right(secs, s) - 1
            bc, bs, a, done, kv_tok = rows[j]
            lo = max(s - win, secs[0])
            span = s - lo
            if span > 0:
                j0 = j if secs[j] <= lo else bisect_right(secs, lo, 0, j) - 1
                bc0, bs0, a0, done0, _ = rows[j0]
                busy = bc + (s - bs if a > 0 else 0.0)
                busy0 = bc0 + (lo - bs0 if a0 > 0 else 0.0)
                util = min(1.0, max(0.0, (busy - busy0) / span))
                qps = (done - done0) / span
            else:
                util, qps = 0.0, 0.0
            inflight = float(a)
            values = {"util_ratio": util, "inflight": inflight, "qps": qps, "running": inflight,
                      "waiting": share if st != STARTING and ready_s[r] <= s else 0.0,
                      "kv_usage_ratio": min(1.0, kv_tok / kv_cap)}
            append(sharing(values, name, requested_s[r], None if st == STARTING else ready_s[r], zone))
        return pods
