"""Pure aggregation of ``/stats`` polls (and optional GPU/host samples) into 100 ms buckets.

The caller (:mod:`ebb.agent.server`) polls every endpoint once per bucket, feeds each answer to
:meth:`BucketAggregator.poll_ok` (or records :meth:`~BucketAggregator.poll_failed`), then calls
:meth:`~BucketAggregator.close` with the bucket's end. No I/O, no clock: times come from the polls.

Guarantees:

* **Never a fabricated value.** An endpoint without an answer since the previous close has no gauges
  in the bucket and is listed in ``Bucket.missing``; a prefill share needs two answers of the same
  process (None after a restart). Shares are clamped to [0, 1] replica units.
* **Busy share from counters.** ``prefill_busy_ratio = Δprefill_busy_s_total / Δnow_s`` between the
  worker's previous answer and its latest, both on the worker's own clock; after a missed bucket the
  share covers both intervals (an average, not a guess).
* **Completions land by their own time.** A completion with ``t_s`` in ``(E − bucket, E]`` goes to the
  bucket ending at ``E``; one fetched after its bucket was closed (endpoint slow or down) goes to the
  next bucket closed and is counted in ``late``. Each completion ``seq`` is taken once; a ``seq``
  going backwards means the process restarted and its cursor restarts.
* **Implausible times are dropped, not kept.** Relative to the agent's clock (``now_ns`` given to
  :meth:`~BucketAggregator.poll_ok`; else the last closed bucket end), a completion more than
  :data:`FUTURE_BUCKETS` buckets (0.5 s) ahead, or older than the kept window (``keep`` buckets,
  60 s), is dropped and counted in ``implausible["future"]`` / ``implausible["too_old"]``; past
  :data:`MAX_PENDING_ROWS` completions waiting for their bucket, new ones are dropped and counted in
  ``implausible["pending_cap"]``.
* **Endpoints are keyed by URL.** The reported name is a label: two endpoints reporting the same
  name (two pods started with one ``--name``, or a rogue one) are both kept, each under
  ``NAME@URL``, and listed in :attr:`~BucketAggregator.collisions` — one never hides the other.
  Names are 1-253 characters without ``@`` or control characters, so a label cannot be forged.
* **Client view first.** When any polled endpoint is a router, latency sketches hold the router's
  completions only (queue time included); otherwise the workers'.
* **Engine endpoints** (:meth:`~BucketAggregator.engine_ok`, fed by :mod:`ebb.agent.engine_poll`)
  are workers whose gauges come ready-made in an :class:`EnginePoll` and whose latencies are
  weighted rows (one per histogram bucket, at its upper bound); they land in the bucket the caller
  names (the one being closed), follow the same missing, naming and collision rules, and count
  against :data:`MAX_PENDING_ROWS` one row per bucket row.
* Memory is bounded: the last ``keep`` buckets (default 600 = 60 s at 100 ms), at most
  :data:`MAX_PENDING_ROWS` (100,000) completions waiting for their bucket, and
  :data:`MAX_COMPLETIONS_PER_ANSWER` rows taken from one answer.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

from ebb.sources.agent_wire import Bucket, RouterGauges, Sketch, WorkerGauges, brief
from ebb.errors import InputError
from ebb.model.live import STATS_VERSION
from ebb.model.samples import SampleBatch
from ebb.untrusted import INT64_MAX, loads_json_input

__all__ = ["FUTURE_BUCKETS", "MAX_COMPLETIONS_PER_ANSWER", "MAX_PENDING_ROWS", "MAX_NAME_CHARS", "MAX_STATS_BYTES",
           "BucketAggregator", "EnginePoll", "StatsPoll", "decode_stats", "parse_stats"]

_FIX = "run the worker/router from the same Ebb release as the agent"

MAX_STATS_BYTES: Final = 4 * 1024 * 1024
"""Largest ``/stats`` answer read (4 MiB): a full 10,000-row completion ring is about 0.7 MiB."""
MAX_COMPLETIONS_PER_ANSWER: Final = 10_000
"""Completion rows taken from one answer: the size of a worker's ring (``ebb.demo.stats.RING_SIZE``),
so an honest answer is never cut; the rest of a longer one count as ``bad_rows``."""
MAX_NAME_CHARS: Final = 253
"""Longest endpoint name accepted (a DNS name / pod name is at most 253 characters)."""
MAX_UNIX_S: Final = 9.2e9
"""Latest completion time representable in int64 Unix ns (year 2261); later rows are malformed."""
FUTURE_BUCKETS: Final = 5
"""A completion more than this many buckets (0.5 s at 100 ms) after the agent's clock is dropped:
an honest worker reports a completion after it happened, and hosts under NTP agree within
milliseconds; a larger lead is a wrong clock or a hostile answer."""
MAX_PENDING_ROWS: Final = 100_000
"""Completions waiting for their bucket to close, all endpoints together (about 10 MB). Honest rows
wait at most 0.6 s, so this is 160,000 completions/s of headroom."""


@dataclass(frozen=True)
class StatsPoll:
    """One validated ``/stats`` answer. Worker fields are None on a router and vice versa."""

    kind: str
    """"worker" or "router"."""
    name: str
    now_s: float
    seq: int
    ready: bool
    completed_total: float
    completions: tuple[tuple[int, float, float, float], ...] = ()
    """(seq, t_s, ttft_ms, e2e_ms), valid rows only (bad rows are counted in ``bad_rows``)."""
    dropped: int = 0
    bad_rows: int = 0
    max_batch: int | None = None
    running: float | None = None
    waiting: float | None = None
    prefill_busy_s_total: float | None = None
    queued: float | None = None
    inflight: float | None = None


@dataclass(frozen=True)
class EnginePoll:
    """One engine scrape turned into a worker's bucket entry (see :mod:`ebb.agent.engine_poll`)."""

    name: str
    """The worker's name: the endpoint's ``host:port`` (1-253 characters, no ``@``)."""
    gauges: WorkerGauges
    ttft_ms: tuple[tuple[float, int], ...] = ()
    """(value ms, observations) rows since the previous scrape: bucket upper bounds."""
    e2e_ms: tuple[tuple[float, int], ...] = ()
    kind: str = "worker"

    def __post_init__(self) -> None:
        if not _good_name(self.name):
            raise ValueError(f"engine worker name must be 1-{MAX_NAME_CHARS} printable characters without '@', "
                             f"got {brief(self.name)}")


def _num(d: dict[str, Any], key: str, url: str) -> float:
    v = d.get(key)
    x = _finite(v)
    if x is None or x < 0:
        raise InputError(f"/stats field {key!r}: expected a finite number >= 0, got {brief(v)}", path=url,
                         fix=_FIX)
    return x


def _finite(v: object) -> float | None:
    """``v`` as a finite float, None when it is not a number or not finite (incl. ints past 1.8e308)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _good_name(name: str) -> bool:
    # '@' is reserved for the NAME@URL labels of colliding names (see the module docstring)
    return 0 < len(name) <= MAX_NAME_CHARS and name.isprintable() and "@" not in name


def _row(row: object) -> tuple[int, float, float, float] | None:
    if not isinstance(row, list) or len(row) != 4:
        return None
    seq = row[0]
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= INT64_MAX:
        return None
    t_s, ttft, e2e = (_finite(x) for x in row[1:])
    if t_s is None or ttft is None or e2e is None or min(t_s, ttft, e2e) < 0 or t_s > MAX_UNIX_S:
        return None
    return seq, t_s, ttft, e2e


def parse_stats(obj: object, url: str) -> StatsPoll:
    """Validate a parsed ``/stats`` JSON value; InputError names ``url`` and the field.

    A single malformed completion row is dropped (counted in ``bad_rows``), not fatal; so are the
    rows past the first :data:`MAX_COMPLETIONS_PER_ANSWER`. Every quoted value is cut short, so a
    hostile answer cannot make the message itself fail or grow."""
    if not isinstance(obj, dict):
        raise InputError(f"/stats answer is a {type(obj).__name__}, expected an object", path=url, fix=_FIX)
    version = obj.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version != STATS_VERSION:
        raise InputError(f"/stats field 'version': {brief(version)} is not the supported "
                         f"{STATS_VERSION}", path=url, fix=_FIX)
    kind, name = obj.get("kind"), obj.get("name")
    if kind not in ("worker", "router") or not isinstance(name, str) or not _good_name(name):
        raise InputError(f"/stats fields 'kind'/'name': got {brief(kind)}/{brief(name)}, expected "
                         f"'worker'|'router' and a name of 1-{MAX_NAME_CHARS} printable characters "
                         "without '@'", path=url, fix=_FIX)
    seq, ready = obj.get("seq"), obj.get("ready")
    if (isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= INT64_MAX
            or not isinstance(ready, bool)):
        raise InputError(f"/stats fields 'seq'/'ready': got {brief(seq)}/{brief(ready)}, expected an "
                         "integer in [0, 2^63-1] and true/false", path=url, fix=_FIX)
    rows = obj.get("completions", [])
    if not isinstance(rows, list):
        raise InputError("/stats field 'completions' is not a list", path=url, fix=_FIX)
    good = [r for r in map(_row, rows[:MAX_COMPLETIONS_PER_ANSWER]) if r is not None]
    dropped = obj.get("dropped", 0)
    dropped_n = dropped if isinstance(dropped, int) and not isinstance(dropped, bool) and 0 < dropped <= INT64_MAX else 0
    common: dict[str, Any] = dict(
        kind=kind, name=name, now_s=_num(obj, "now_s", url), seq=seq, ready=ready,
        completed_total=_num(obj, "completed_total", url), completions=tuple(good),
        dropped=dropped_n, bad_rows=len(rows) - len(good))
    if kind == "router":
        return StatsPoll(**common, queued=_num(obj, "queued", url), inflight=_num(obj, "inflight", url))
    mb = obj.get("max_batch")
    if isinstance(mb, bool) or not isinstance(mb, int) or not 1 <= mb <= INT64_MAX:
        raise InputError(f"/stats field 'max_batch': expected an integer >= 1, got {brief(mb)}", path=url,
                         fix=_FIX)
    return StatsPoll(**common, max_batch=mb, running=_num(obj, "running", url),
                     waiting=_num(obj, "waiting", url),
                     prefill_busy_s_total=_num(obj, "prefill_busy_s_total", url))


def decode_stats(raw: bytes | str, url: str) -> StatsPoll:
    """:func:`parse_stats` of ``/stats`` text: parsed with :func:`ebb.untrusted.loads_json` (64 levels
    of nesting, :data:`MAX_STATS_BYTES` of text at most); InputError naming ``url`` for every bad
    text — nothing else escapes."""
    obj = loads_json_input(raw, what="/stats answer", path=url, fix=_FIX, max_bytes=MAX_STATS_BYTES)
    return parse_stats(obj, url)


def _clamp01(x: float) -> float:
    return min(1.0, max(0.0, x))


def _sketch(rows: list[tuple[float, int]]) -> Sketch:
    return Sketch.of_counts([v for v, _ in rows], [w for _, w in rows])


@dataclass
class _Endpoint:
    kind: str | None = None
    cursor: int = 0
    prev: StatsPoll | EnginePoll | None = None
    """The last answer before the open bucket (the base of the prefill Δ)."""
    current: StatsPoll | EnginePoll | None = None
    """The latest answer in the open bucket."""


class BucketAggregator:
    """Builds :class:`~ebb.sources.agent_wire.Bucket` records from polls; see the module guarantees."""

    def __init__(self, *, bucket_ms: int = 100, keep: int = 600) -> None:
        if bucket_ms < 1 or keep < 1:
            raise ValueError(f"bucket_ms and keep must be >= 1, got {bucket_ms!r}, {keep!r}")
        self.bucket_ns = bucket_ms * 1_000_000
        self._eps: dict[str, _Endpoint] = {}
        # (ttft ms, e2e ms, weight); NaN where an engine row carries one of the two
        self._pending: dict[str, dict[int, list[tuple[float, float, int]]]] = {"worker": {}, "router": {}}
        self._samples: dict[str, dict[str, tuple[int, float]]] = {"gpu": {}, "host": {}}
        self._buckets: deque[Bucket] = deque(maxlen=keep)
        self._keep_ns = keep * self.bucket_ns
        self._n_pending = 0
        self._closed_ns: int | None = None
        self.late = 0
        """Completions fetched after their bucket was closed (placed in the next one)."""
        self.dropped = 0
        """Completions the endpoints reported as dropped from their own buffers."""
        self.bad_rows = 0
        """Completion rows refused by :func:`parse_stats` (malformed, or past the per-answer cap)."""
        self.implausible: dict[str, int] = {"future": 0, "too_old": 0, "pending_cap": 0}
        """Completions dropped for their time (see the module docstring), by reason."""
        self.collisions: tuple[str, ...] = ()
        """Names reported by more than one endpoint at the last close (each kept as NAME@URL)."""

    def cursor(self, endpoint: str) -> int:
        """The ``since`` seq to ask ``endpoint`` for."""
        ep = self._eps.get(endpoint)
        return 0 if ep is None else ep.cursor

    def add(self, endpoint: str) -> None:
        """Start expecting ``endpoint`` (it is ``missing`` until it answers)."""
        self._eps.setdefault(endpoint, _Endpoint())

    def forget(self, endpoint: str) -> None:
        """Stop expecting ``endpoint`` (a worker removed from the fleet); its completions already
        fetched still land in their buckets."""
        self._eps.pop(endpoint, None)

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(self._eps)

    def poll_ok(self, endpoint: str, poll: StatsPoll, now_ns: int | None = None) -> None:
        """Record one answer of ``endpoint``; ``now_ns`` is the agent's clock (Unix ns) when it came."""
        ep = self._eps.setdefault(endpoint, _Endpoint())
        last = ep.current or ep.prev
        # a new process behind the URL: its counters and seqs start again, nothing to difference
        if isinstance(last, EnginePoll) or (last is not None and (
                poll.seq < ep.cursor or poll.name != last.name
                or (poll.prefill_busy_s_total or 0.0) < (last.prefill_busy_s_total or 0.0))):
            ep.cursor, ep.prev, ep.current = 0, None, None
        ep.kind = poll.kind
        if ep.current is not None and ep.prev is None:
            ep.prev = ep.current
        ep.current = poll
        self.dropped += poll.dropped
        self.bad_rows += poll.bad_rows
        pend = self._pending[poll.kind]
        ref = now_ns if now_ns is not None else self._closed_ns
        for seq, t_s, ttft, e2e in poll.completions:
            if seq <= ep.cursor:
                continue
            # whole microseconds first: t_s * 1e9 in float would put edge times on either side
            t_ns = round(t_s * 1e6) * 1000
            if ref is not None and t_ns > ref + FUTURE_BUCKETS * self.bucket_ns:
                self.implausible["future"] += 1
                continue
            if ref is not None and t_ns <= ref - self._keep_ns:
                self.implausible["too_old"] += 1
                continue
            if self._n_pending >= MAX_PENDING_ROWS:
                self.implausible["pending_cap"] += 1
                continue
            end = -(-t_ns // self.bucket_ns) * self.bucket_ns
            self._n_pending += 1
            if self._closed_ns is not None and end <= self._closed_ns:
                self.late += 1
                end = self._closed_ns + self.bucket_ns
            pend.setdefault(end, []).append((ttft, e2e, 1))
        ep.cursor = max(ep.cursor, poll.seq)

    def engine_ok(self, endpoint: str, poll: EnginePoll, end_ns: int) -> None:
        """Record one engine scrape of ``endpoint``: its gauges for the open bucket and its latency
        rows in the bucket ending at ``end_ns`` (the one the caller closes next; a time already
        closed moves to the next bucket and counts in ``late``)."""
        ep = self._eps.setdefault(endpoint, _Endpoint())
        if isinstance(ep.current or ep.prev, StatsPoll):
            ep.prev, ep.current = None, None
        ep.kind = poll.kind
        if ep.current is not None and ep.prev is None:
            ep.prev = ep.current
        ep.current = poll
        if self._closed_ns is not None and end_ns <= self._closed_ns:
            end_ns = self._closed_ns + self.bucket_ns
            self.late += 1
        rows = [(v, math.nan, w) for v, w in poll.ttft_ms if w > 0] + [(math.nan, v, w) for v, w in poll.e2e_ms if w > 0]
        room = MAX_PENDING_ROWS - self._n_pending
        if len(rows) > room:
            self.implausible["pending_cap"] += len(rows) - max(room, 0)
            rows = rows[:max(room, 0)]
        if rows:
            self._pending[poll.kind].setdefault(end_ns, []).extend(rows)
            self._n_pending += len(rows)

    def poll_failed(self, endpoint: str) -> None:
        """``endpoint`` did not answer: nothing is recorded for it (it shows as missing)."""
        self._eps.setdefault(endpoint, _Endpoint())

    def sampled(self, group: str, batch: SampleBatch) -> None:
        """Keep the newest value per series of a ``gpu`` or ``host`` sampler reading."""
        store = self._samples[group]
        for k, v, t in zip(batch.series_idx.tolist(), batch.value.tolist(), batch.ts_ns.tolist(), strict=True):
            name = batch.series[k]
            if math.isfinite(v) and v >= 0 and (name not in store or store[name][0] <= t):
                store[name] = (t, float(v))

    def close(self, end_ns: int) -> Bucket:
        """Close the bucket ending at ``end_ns`` (Unix ns, after the previous end) and keep it."""
        if self._closed_ns is not None and end_ns <= self._closed_ns:
            raise ValueError(f"bucket end {end_ns} is not after the last closed end {self._closed_ns}")
        workers: dict[str, WorkerGauges] = {}
        routers: dict[str, RouterGauges] = {}
        missing: list[str] = []
        label = self._labels()
        for url, ep in self._eps.items():
            p = ep.current
            if p is None:
                missing.append(url)
                continue
            if isinstance(p, EnginePoll):
                workers[label[url]] = p.gauges
            elif p.kind == "router":
                routers[label[url]] = RouterGauges(p.queued or 0.0, p.inflight or 0.0)
            else:
                workers[label[url]] = self._worker(ep, p)
            ep.prev, ep.current = p, None
        use = "router" if any(ep.kind == "router" for ep in self._eps.values()) else "worker"
        names = sorted({label[url] for url, ep in self._eps.items() if ep.kind == use and ep.prev is not None})
        taken: list[tuple[float, float, int]] = []
        for kind, pend in self._pending.items():
            for end in [e for e in pend if e <= end_ns]:
                rows = pend.pop(end)
                self._n_pending -= len(rows)
                if kind == use:
                    taken += rows
        ttft = [(r[0], r[2]) for r in taken if not math.isnan(r[0])]
        e2e = [(r[1], r[2]) for r in taken if not math.isnan(r[1])]
        any_known = bool(self._eps)
        bucket = Bucket(
            ts_ns=end_ns, workers=workers, routers=routers,
            latency_from=("router" if use == "router" else "workers") if any_known else "",
            latency_names=tuple(names), ttft_ms=_sketch(ttft), e2e_ms=_sketch(e2e),
            missing=tuple(missing), gpu=self._take("gpu"), host=self._take("host"))
        self._closed_ns = end_ns
        self._buckets.append(bucket)
        return bucket

    def _labels(self) -> dict[str, str]:
        """Wire key of every endpoint with an answer: its name, or NAME@URL when names collide."""
        claims: dict[tuple[str, str], list[str]] = {}
        for url, ep in self._eps.items():
            p = ep.current or ep.prev
            if p is not None:
                claims.setdefault((p.kind, p.name), []).append(url)
        out: dict[str, str] = {}
        shared: set[str] = set()
        for (_, name), urls in claims.items():
            if len(urls) > 1:
                shared.add(name)
            for u in urls:
                out[u] = name if len(urls) == 1 else f"{name}@{u}"
        self.collisions = tuple(sorted(shared))
        return out

    def _worker(self, ep: _Endpoint, p: StatsPoll) -> WorkerGauges:
        share = None
        base = ep.prev
        if isinstance(base, StatsPoll) and p.now_s > base.now_s:
            busy = (p.prefill_busy_s_total or 0.0) - (base.prefill_busy_s_total or 0.0)
            share = _clamp01(busy / (p.now_s - base.now_s))
        mb = p.max_batch or 1
        return WorkerGauges(p.running or 0.0, p.waiting or 0.0, mb, p.ready,
                            _clamp01((p.running or 0.0) / mb), share)

    def _take(self, group: str) -> dict[str, float]:
        store = self._samples[group]
        out = {name: v for name, (_, v) in sorted(store.items())}
        store.clear()
        return out

    @property
    def newest_ns(self) -> int | None:
        return self._buckets[-1].ts_ns if self._buckets else None

    def since(self, ts_ns: int) -> tuple[Bucket, ...]:
        """Kept buckets ending after ``ts_ns``, oldest first."""
        items = list(self._buckets)
        i = bisect.bisect_right([b.ts_ns for b in items], ts_ns)
        return tuple(items[i:])
