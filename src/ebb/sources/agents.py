"""``AgentSource``: the controller's :class:`~ebb.sources.live.SignalSource` over node agents.

Each ``read(since_s)`` asks every agent for ``GET /v1/buckets?since_ns=…`` (one bounded GET,
:func:`ebb.sources.http_get.get`: blocking, no event loop to own or close, and the controller calls
it once per second from one thread; several agents are asked in parallel threads; ``timeout_s``
bounds the *whole* exchange, and at most ``max_bytes`` (16 MiB) are read; pages nested deeper than
64 levels are refused; a bearer ``token`` and TLS files are sent when given),
then merges the pages by bucket time into :class:`~ebb.model.live.LiveSignals`:

* **Fine arrays** (``t_s`` = bucket end, Unix s): ``prefill_replicas`` and ``slot_replicas`` are sums
  of the per-worker shares (replica units), ``queued`` the sum over routers. Workers and routers are
  keyed by name, so one polled by two agents counts once. A bucket time is emitted only when it is
  *complete*: every answering agent has a bucket there and every worker has a busy share (not its
  first answer). An endpoint an agent lists as missing (it did not answer, or a value it sent was
  out of range and the decoder dropped it) is simply not in the sum: ``replicas_seen`` counts the
  workers behind each sample, and the controller treats fewer than the ready replicas as an
  incomplete fleet — no scale-down, the demand extrapolated for scale-ups
  (:meth:`ebb.live.sensed.Sensor.sense`) — so one bad pod never blinds the fleet.
  Only times up to the oldest agent's newest bucket are returned; the rest come next read.
* **Completions** (all returned times, complete or not: a missed poll delays completions, never
  loses them): one weighted row per non-empty sketch bin, ``done_t_s`` = bucket end; TTFT rows
  carry NaN end-to-end latency and end-to-end rows NaN TTFT (the policy skips NaN per column).
  Router (client-view) sketches are used when any agent reports one for that time, otherwise the
  workers'; a sketch from the same endpoint names as one already taken is skipped.
* ``inflight_by_replica``: running + waiting per worker at its newest returned bucket;
  ``queued``: the routers' sum at the newest complete time; ``total_qps``: completions per second
  over the returned span (``len × bucket``); ``newest_sample_s``: the newest returned bucket end;
  ``replicas_seen``: the fewest workers behind any emitted fine sample (the controller compares it
  with the ready replicas: fewer is no data for scale-down).
* **Sleepers** (a worker whose engine says it sleeps or wakes only in part, ``asleep`` on the wire):
  never in ``replicas_seen``, ``prefill_replicas`` or ``slot_replicas`` — a sleeping pod's zero load is
  no idle capacity — and counted in ``asleep_replicas`` at the newest returned bucket time (its
  running + waiting still go to ``inflight_by_replica``).

Clocks: each agent's offset from the controller's clock is measured from the ``now_ns`` its pages
carry, and an agent off by more than half a bucket has its bucket times corrected before the merge
(:mod:`ebb.sources.agent_clock`; :meth:`AgentSource.clock_offsets_s` for the controller's
``ebb_agent_clock_offset_seconds``).

Failures: an agent that does not answer, answers 5xx, truncates its answer or overruns the
deadline raises
:class:`~ebb.errors.SourceUnavailable` naming its URL — by default even when others answered,
because partial sums understate demand (the controller then fails static). With
``allow_partial=True`` the answering agents are merged and the silent ones are logged and listed
in :attr:`AgentSource.last_failed` (for fleets whose agents come and go); all silent still raises.
A wrong version or malformed page raises :class:`~ebb.errors.InputError` naming the URL and field;
an entry with a value out of range is dropped alone (:attr:`BucketPage.dropped`), counted in
:attr:`AgentSource.dropped_total` and logged once per agent per 10 s.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from ebb.sources.agent_clock import AgentClocks
from ebb.sources.agent_wire import Bucket, BucketPage, Sketch, decode_page_json
from ebb.errors import InputError, SourceUnavailable
from ebb.log_limit import LogLimiter, held_note
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals
from ebb.sources.http_get import HttpLimits, TlsOptions, check_url, get

__all__ = ["AgentSource"]

log = logging.getLogger(__name__)
_SLACK_NS = 1_000_000  # ask 1 ms early, then filter with the caller's own float comparison
AGENT_FRESH_S = 2.0
"""Age (s) past which agent data backs no scale-down: twenty 100 ms buckets."""


@dataclass
class _Time:
    """Everything known about one bucket end across agents."""

    buckets: list[Bucket] = field(default_factory=list)
    complete: bool = True


class AgentSource:
    """Reads and merges node agents' buckets; see the module docstring for the rules."""

    def __init__(self, urls: Sequence[str], timeout_s: float = 0.5, *, allow_partial: bool = False,
                 token: str | None = None, tls: TlsOptions | None = None,
                 max_bytes: int = 16 * 1024 * 1024) -> None:
        if not urls:
            raise ValueError("AgentSource needs at least one agent URL")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.urls = tuple(check_url(u).rstrip("/") for u in urls)
        self.timeout_s = timeout_s
        self._limits = HttpLimits(deadline_s=timeout_s, max_bytes=max_bytes, token=token, tls=tls)
        self.allow_partial = allow_partial
        self.last_failed: tuple[str, ...] = ()
        """Agents that did not answer the last read (only non-empty with ``allow_partial``)."""
        self.dropped_total = 0
        """Entries (workers, routers, series) dropped for a value out of range, since the start."""
        self._drop_log = LogLimiter()
        self.clocks = AgentClocks()
        """Each agent's measured clock offset and the correction its bucket times get (:mod:`ebb.sources.agent_clock`)."""

    @property
    def down_fresh_s(self) -> float:
        """2 s (twenty 100 ms buckets): agent data older than that means an agent is behind, so it
        backs scale-ups only (:class:`~ebb.sources.live.FreshSource`)."""
        return AGENT_FRESH_S

    def clock_offsets_s(self) -> dict[str, float]:
        """Agent URL → its clock's offset from this controller's (s, + ahead), for agents that stamp pages."""
        return self.clocks.offsets_s()

    # -- fetching ----------------------------------------------------------------------------
    def _fetch(self, url: str, since_ns: int) -> BucketPage:
        shift = self.clocks.shift_ns(url)
        target = f"{url}/v1/buckets?since_ns={max(0, since_ns + shift)}"
        try:
            sent_s = time.time()
            reply = get(target, self._limits)
            received_s = time.time()
        except SourceUnavailable as exc:
            raise SourceUnavailable(f"agent {url}: {exc} (fix: check that `ebb agent` runs there and the URL "
                                    "is right)") from exc
        if reply.status >= 500:
            raise SourceUnavailable(f"agent {url} answered HTTP {reply.status}; retrying next cycle")
        if reply.status in (401, 403):
            raise InputError(f"agent refused the request: HTTP {reply.status} {reply.reason}", path=target,
                             fix="give the agent's bearer token (--agent-token-file, the agent's --token-file)")
        if reply.status != 200:
            raise InputError(f"agent answered HTTP {reply.status} {reply.reason}", path=target,
                             fix="check that the URL points at an `ebb agent`")
        page = decode_page_json(reply.body, target)
        if page.dropped:
            self._note_dropped(url, page.dropped)
        self.clocks.observe(url, page.now_ns, sent_s, received_s, page.bucket_ms)
        return shifted(page, shift)

    def _note_dropped(self, url: str, dropped: tuple[str, ...]) -> None:
        """Count the entries a page dropped; log the first, at most one line per agent per 10 s
        (:class:`~ebb.log_limit.LogLimiter`): a bad pod costs a line per 10 s, not one per bucket."""
        self.dropped_total += len(dropped)
        if (held := self._drop_log.allow(url)) is not None:
            more = f" ({len(dropped) - 1} more on this page)" if len(dropped) > 1 else ""
            log.warning("agent %s: %s%s%s", url, dropped[0], more, held_note(held))

    def _fetch_all(self, since_ns: int) -> dict[str, BucketPage | SourceUnavailable]:
        if len(self.urls) == 1:
            pairs = [(self.urls[0], self._try(self.urls[0], since_ns))]
        else:
            with ThreadPoolExecutor(max_workers=min(16, len(self.urls))) as pool:
                pairs = list(zip(self.urls, pool.map(lambda u: self._try(u, since_ns), self.urls), strict=True))
        return dict(pairs)

    def _try(self, url: str, since_ns: int) -> BucketPage | SourceUnavailable:
        try:
            return self._fetch(url, since_ns)
        except SourceUnavailable as exc:  # InputError propagates: a wrong page is not an outage
            return exc

    # -- reading -----------------------------------------------------------------------------
    def read(self, since_s: float) -> LiveSignals:
        if math.isnan(since_s):
            raise ValueError("since_s must be a number (Unix s), got NaN")
        if math.isfinite(since_s):
            since_ns = max(0, math.floor(since_s * 1e9) - _SLACK_NS)
        else:
            since_ns = 0 if since_s < 0 else 2**62
        got = self._fetch_all(since_ns)
        pages = [p for p in got.values() if isinstance(p, BucketPage)]
        failed = {u: e for u, e in got.items() if isinstance(e, SourceUnavailable)}
        if failed and (not pages or not self.allow_partial):
            first = next(iter(failed.values()))
            raise SourceUnavailable(
                f"{len(failed)} of {len(self.urls)} agent(s) did not answer: {', '.join(failed)}; "
                f"first error: {first}", retry_after_s=first.retry_after_s) from first
        for u, e in failed.items():
            log.warning("agent %s skipped this cycle: %s", u, e)
        self.last_failed = tuple(failed)
        return _merge(pages, since_s)


def shifted(page: BucketPage, shift_ns: int) -> BucketPage:
    """``page`` with its bucket times (and newest time) moved ``shift_ns`` earlier (the clock correction)."""
    if not shift_ns:
        return page
    return replace(page, newest_ns=None if page.newest_ns is None else page.newest_ns - shift_ns,
                   buckets=tuple(replace(b, ts_ns=b.ts_ns - shift_ns) for b in page.buckets))


def _merge(pages: list[BucketPage], since_s: float) -> LiveSignals:
    newest = [p.newest_ns for p in pages]
    if not pages or any(n is None for n in newest):
        return LiveSignals(fine=FineSignals())  # an agent with no bucket yet: the fleet is not known
    horizon = min(n for n in newest if n is not None)
    times: dict[int, _Time] = {}
    for p in pages:
        for b in p.buckets:
            if b.ts_ns <= horizon and b.ts_ns / 1e9 > since_s:
                slot = times.setdefault(b.ts_ns, _Time())
                slot.buckets.append(b)
    for slot in times.values():
        slot.complete &= len(slot.buckets) == len(pages)
    if not times:
        return LiveSignals(fine=FineSignals())
    order = sorted(times)
    t_s, prefill, slots, queued = [], [], [], []
    done: list[tuple[float, float, float, float]] = []
    inflight: dict[str, float] = {}
    last_queued: float | None = None
    seen: int | None = None
    asleep = 0
    for ts in order:
        slot, t = times[ts], ts / 1e9
        everyone = {n: w for b in slot.buckets for n, w in b.workers.items()}
        routers = {n: r for b in slot.buckets for n, r in b.routers.items()}
        for n, w in everyone.items():
            inflight[n] = w.running + w.waiting
        workers = {n: w for n, w in everyone.items() if not w.asleep}
        asleep = len(everyone) - len(workers)
        # a worker's first answer has no busy share yet: summing it as 0 would understate demand; a
        # time where every endpoint an agent polls is missing says nothing of demand
        silent = not workers and any(b.missing for b in slot.buckets)
        if slot.complete and not silent and all(w.prefill_busy_ratio is not None for w in workers.values()):
            t_s.append(t)
            prefill.append(sum(w.prefill_busy_ratio or 0.0 for w in workers.values()))
            slots.append(sum(w.slot_ratio for w in workers.values()))
            queued.append(sum(r.queued for r in routers.values()))
            seen = len(workers) if seen is None else min(seen, len(workers))
            if routers:
                last_queued = queued[-1]
        ttft, e2e = _latency(slot.buckets)
        for sk, is_ttft in ((ttft, True), (e2e, False)):
            vals, wts = sk.rows()
            for v, w in zip(vals.tolist(), wts.tolist(), strict=True):
                done.append((t, v, math.nan, w) if is_ttft else (t, math.nan, v, w))
    span_s = len(order) * pages[0].bucket_ms / 1000
    rows = np.asarray(done, dtype=np.float64).reshape(-1, 4)
    completions = float(rows[~np.isnan(rows[:, 1]), 3].sum())
    fine = FineSignals(
        t_s=np.asarray(t_s, dtype=np.float64), prefill_replicas=np.asarray(prefill, dtype=np.float64),
        slot_replicas=np.asarray(slots, dtype=np.float64), queued=np.asarray(queued, dtype=np.float64),
        done_t_s=rows[:, 0].copy(), done_ttft_ms=rows[:, 1].copy(), done_e2e_ms=rows[:, 2].copy(),
        done_weight=rows[:, 3].copy())
    return LiveSignals(fine=fine, inflight_by_replica=inflight, total_qps=completions / span_s,
                       queued=last_queued, newest_sample_s=order[-1] / 1e9, replicas_seen=seen,
                       asleep_replicas=asleep)


def _latency(buckets: list[Bucket]) -> tuple[Sketch, Sketch]:
    """Merged (TTFT, e2e) sketches of one bucket time: router view if any, duplicates dropped."""
    kind = "router" if any(b.latency_from == "router" for b in buckets) else "workers"
    ttft, e2e = Sketch(), Sketch()
    taken: set[str] = set()
    for b in buckets:
        if b.latency_from != kind or taken & set(b.latency_names):
            continue
        taken |= set(b.latency_names)
        ttft, e2e = ttft.merge(b.ttft_ms), e2e.merge(b.e2e_ms)
    return ttft, e2e
