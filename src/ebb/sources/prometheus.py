"""Prometheus as a live :class:`~ebb.sources.live.SignalSource`: :class:`PrometheusSource`.

The HTTP API client (:class:`PrometheusClient`, :class:`PromSeries`: bounds on time, bytes and
series, and which failure is which error) is :mod:`ebb.sources.prometheus_api`; the selector and
the queries (:class:`Selector`, :class:`LabelMatcher`, :class:`PromQueries`,
:data:`DEFAULT_SELECTOR`) are :mod:`ebb.sources.promql`. Both are re-exported here.

:class:`PrometheusSource` answers ``read(since_s)`` with one range query per signal over the last
``lookback_s`` (default 30 s) ending at now rounded down to ``step_s`` (default 1 s), so the grid
of ``t_s`` is the same from read to read; it returns the steps ``> since_s`` (pass the last
``fine.t_s`` back as the cursor). "Now" lags the clock by ``settle_s`` (default 1.25 × the scrape
interval): Prometheus stamps a scrape with its start and commits it up to ``scrape_timeout`` (≤ the
interval) later, so a step closer to now could still change after it was read and past the cursor
— histogram counts would be lost. All queries of one read together end within ``read_timeout_s``
(default 4 s; each one also within the client's ``timeout_s``), else SourceUnavailable.

Scope (``selector``): every series selector of every query carries the label matchers of
``selector`` (default :data:`DEFAULT_SELECTOR`, ``job=~"ebb|ebb-.+"``), parsed and re-rendered,
never pasted, so a target outside it cannot add a worker, a queue or latency rows. An empty
selector means unscoped: allowed only when asked for explicitly, and logged as a WARNING. The
syntax and the seven queries of a read are in :mod:`ebb.sources.promql`. Sums are taken here, not
in PromQL, so every worker's value can be checked before it counts.

Replica identity (``replica_label``, default ``worker``): the label that names a replica in
``inflight_by_replica`` and in ``replicas_seen``. Ebb's workers export ``worker`` themselves, so
within the selector a target can still claim any name and report any value for it; in Kubernetes
point it at a label the scrape config writes from the pod's metadata (``pod``, relabelled from
``__meta_kubernetes_pod_name``), which a pod cannot set (Prometheus renames a clashing exported
label to ``exported_pod`` unless ``honor_labels`` is on). Two series with the same name at one step
(two targets claiming one replica, or one target scraped by two jobs) drop the step: summing both
would double a replica's demand.

Why ``W`` = 4 × ``scrape_interval_s`` by default: ``rate`` needs two samples inside its window;
four intervals survive one missed or late scrape without the series vanishing. A worker with no
rate yet (its first scrapes) contributes 0 prefill; its slot share still counts.

Staleness, measured: range queries fill a gap with the last value for up to 5 minutes (the
lookback delta), so a target that died without staleness markers (Prometheus crashed or was
restarted meanwhile) looks fresh. ``timestamp(x)`` returns the time the value used at each step
was scraped; a step is kept only when every worker's and the router's value at it was scraped at
most ``max_sample_age_s`` (default 3 × the scrape interval) before the step. ``newest_sample_s``
is the oldest scrape time behind the newest step that passed every check (None when none did):
once any input stops being scraped it freezes, at most ``max_sample_age_s`` later, whatever
Prometheus fills in. (A target that goes down while Prometheus runs gets staleness markers and
simply vanishes from the queries; the timestamp check is for the cases without markers.)

Fleet completeness (``replicas_seen``). A worker target that vanishes (removed from discovery,
or down: Prometheus writes staleness markers either way) leaves steps that look complete with one
worker fewer — indistinguishable, in Prometheus, from a replica Ebb itself removed. So the source
does not drop a step because the number of workers changed within the window (that would blind
the controller for ``lookback_s`` after every scale-down, when a burst must still be seen);
instead it counts, per kept step, the distinct replicas whose values were fresh and sane at it,
and returns ``replicas_seen`` = the minimum over the returned steps (None when none is returned).
The controller compares it with the actuator's ready count, the only party that knows which
replicas should exist: fewer seen than ready is no data, so no scale-down.

Fail static, never a guess — a step is dropped (reasons counted over the steps asked for and
logged once per read on this module's logger: WARNING, or DEBUG for plain absence) when: no fresh
router ``queued``; no worker at all (every worker gone reads as "no data", not as "no demand");
any worker stale; a scrape time after its step (more than 1 ms: real Prometheus never uses a later
sample, and a future time would keep ``newest_sample_s`` fresh forever) or NaN; a worker series
without ``replica_label``; two series naming one replica; a NaN, infinite or negative value;
``max_batch`` ≤ 0; ``running`` > 10 × ``max_batch``; a prefill share > 2 per worker. A point at a
NaN or infinite time is ignored.

Engine mode (``engine=`` an :class:`~ebb.sources.engines.profiles.EngineProfile`, optionally
``max_concurrency=``): the same read over an inference engine's own series (vLLM's
``vllm:num_requests_running`` ...) for teams whose Prometheus already scrapes their engine pods —
queries, replica rules and the differences (no router: ``queued`` = the engines' waiting requests;
replica label ``pod`` by default; a selector is required) are in :mod:`ebb.sources.prometheus_engine`.

Latency completions come from the histograms' raw cumulative buckets: the increase of each bucket
counter between two consecutive steps (a drop is a counter reset: the new value is the increase)
is summed over routers per ``le``; differences of neighbouring ``le`` give each bucket's count.
One row per non-empty bucket and step: ``done_t_s`` = the step, the latency = the bucket's upper
bound in ms (never understates a P99), weight = count; TTFT rows carry NaN end-to-end latency and
vice versa. The ``+Inf`` bucket (any spelling ``float`` reads as +inf) always reads as ``inf`` ms,
never NaN: a window whose observations all exceed the largest finite bound has P99 = inf, i.e.
past any SLO. A series whose ``le`` is not a number ≥ 0 or +Inf (``NaN``, ``-1``, ``x``) is
dropped with a logged reason, so the latency column of a row is NaN only where the row describes
the other latency. Counts are exact: no ``increase()`` extrapolation, and a stale counter adds
nothing.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from ebb.errors import ConfigError, SourceUnavailable
from ebb.model import live as names
from ebb.model.live import LiveSignals
from ebb.sources.prometheus_api import MAX_BYTES, MAX_SERIES, MAX_WARNINGS_LOGGED, PrometheusClient, PromSeries
from ebb.sources.engines.profiles import EngineProfile
from ebb.sources.prometheus_engine import ENGINE_ABSENT, EngineMode, engine_signals
from ebb.sources.prometheus_grid import Grid as _Grid, Key, age_problem as _age_problem, lay
from ebb.sources.prometheus_grid import bucket_bound as _bucket_bound
from ebb.sources.prometheus_grid import Fleet, per_bucket, signals, step_increase
from ebb.sources.promql import (DEFAULT_SELECTOR, LABEL_NAME, MAX_SELECTOR_CHARS, LabelMatcher, MatchOp,
                                PromQueries, Selector, as_selector, duration)

__all__ = ["DEFAULT_SELECTOR", "MAX_BYTES", "MAX_SELECTOR_CHARS", "MAX_SERIES", "MAX_WARNINGS_LOGGED",
           "LabelMatcher", "MatchOp", "PrometheusClient", "PrometheusSource", "PromQueries", "PromSeries",
           "Selector"]

log = logging.getLogger(__name__)
T = TypeVar("T")
FloatArray = npt.NDArray[np.float64]

MAX_RUNNING_PER_SLOT = 10.0
"""``running`` above this many times ``max_batch`` is absurd (a unit or label mix-up)."""
MAX_PREFILL_SHARE = 2.0
"""A worker's prefill busy seconds per second above this is absurd (1.0 = always prefilling;
``rate`` extrapolation may overshoot 1 slightly)."""
MAX_POINTS = 11_000
"""Prometheus refuses range queries of more points than this per series."""


class PrometheusSource:
    """A :class:`~ebb.sources.live.SignalSource` over a Prometheus server; see the module docstring."""

    def __init__(self, client: PrometheusClient, *, selector: str | Selector | None = None,
                 replica_label: str | None = None, step_s: float = 1.0, lookback_s: float = 30.0,
                 scrape_interval_s: float = 1.0, rate_window_s: float | None = None,
                 max_sample_age_s: float | None = None, settle_s: float | None = None,
                 read_timeout_s: float = 4.0, clock: Callable[[], float] = time.time,
                 engine: EngineProfile | None = None, max_concurrency: int | None = None) -> None:
        """``selector`` None: :data:`DEFAULT_SELECTOR` in Ebb mode; engine mode (``engine`` given) needs
        one (ConfigError). ``replica_label`` None: ``worker`` in Ebb mode, ``pod`` in engine mode."""
        if engine is None and max_concurrency is not None:
            raise ConfigError("max concurrency applies to engine mode only (fix: also pass the engine)")
        if selector is None:
            if engine is not None:
                raise ConfigError(
                    f"engine mode ({engine.name}) needs a Prometheus selector naming the engine pods' scrape "
                    "targets (Ebb's default selects Ebb's own jobs, and a cluster often runs several "
                    f"{engine.title} fleets) (fix: e.g. --prometheus-selector 'namespace=\"serving\","
                    "job=\"vllm\"'; '' for unscoped)")
            selector = DEFAULT_SELECTOR
        if replica_label is None:
            replica_label = "worker" if engine is None else "pod"
        if step_s <= 0 or lookback_s < step_s or scrape_interval_s <= 0:
            raise ValueError(f"need step_s > 0, lookback_s >= step_s, scrape_interval_s > 0; got "
                             f"{step_s!r}, {lookback_s!r}, {scrape_interval_s!r}")
        if lookback_s / step_s + 2 > MAX_POINTS:
            raise ValueError(f"lookback_s/step_s = {lookback_s / step_s:g} exceeds Prometheus' {MAX_POINTS} points")
        if not (LABEL_NAME.fullmatch(replica_label) and not replica_label.startswith("__")):
            raise ConfigError(f"replica label {replica_label[:80]!r} is not a Prometheus label name "
                              "(fix: e.g. worker, or pod when the scrape config sets it)")
        if read_timeout_s <= 0:
            raise ValueError(f"read_timeout_s must be > 0, got {read_timeout_s!r}")
        self.client = client
        self.selector = as_selector(selector)
        self.replica_label = replica_label
        self.step_s = step_s
        self.lookback_s = lookback_s
        self.rate_window_s = rate_window_s if rate_window_s is not None else 4.0 * scrape_interval_s
        self.max_sample_age_s = max_sample_age_s if max_sample_age_s is not None else 3.0 * scrape_interval_s
        if self.rate_window_s < 2 * scrape_interval_s or self.max_sample_age_s <= 0:
            raise ValueError(f"rate_window_s must cover two scrapes ({2 * scrape_interval_s:g} s) and "
                             f"max_sample_age_s be > 0; got {self.rate_window_s!r}, {self.max_sample_age_s!r}")
        self.settle_s = settle_s if settle_s is not None else 1.25 * scrape_interval_s
        if self.settle_s < 0:
            raise ValueError(f"settle_s must be >= 0, got {self.settle_s!r}")
        self.read_timeout_s = read_timeout_s
        self.queries = PromQueries.build(self.selector, duration(self.rate_window_s))
        self.engine = None if engine is None else EngineMode.build(
            engine, self.selector, duration(self.rate_window_s), self.rate_window_s, replica_label=replica_label,
            max_concurrency=max_concurrency)
        self._clock = clock
        if not self.selector.matchers:
            log.warning("Prometheus at %s: queries are unscoped (empty selector): any target Prometheus scrapes "
                        "can add workers, queue or latency rows; pass a selector such as %s",
                        client.base_url, DEFAULT_SELECTOR)

    def read(self, since_s: float) -> LiveSignals:
        step = self.step_s
        q = self.queries
        end = math.floor((self._clock() - self.settle_s) / step) * step
        start = end - math.floor(self.lookback_s / step) * step
        grid = np.round(np.arange(start, end + step / 2, step), 6)
        n = len(grid)
        deadline = time.monotonic() + self.read_timeout_s

        def over() -> SourceUnavailable:
            return SourceUnavailable(f"Prometheus at {self.client.base_url}: one read's queries did not finish "
                                     f"within {self.read_timeout_s:g} s (read_timeout_s); retrying next cycle")

        def timed(call: Callable[[float], T]) -> T:
            """``call(budget)`` with what is left of this read's budget as the query's deadline."""
            budget = deadline - time.monotonic()
            if budget <= 0:
                raise over()
            try:
                return call(budget)
            except SourceUnavailable as exc:
                if time.monotonic() >= deadline:  # cut by this read's budget, not by the query's own
                    raise over() from exc
                raise

        def fetch(query: str, first: float = start, points: int = n) -> dict[str, _Grid]:
            return self._lay(timed(lambda budget: self.client.range(query, first, end, step, timeout_s=budget)),
                             first, points)

        if self.engine is not None:
            up = self.engine.queries.up
            sig, engine_drops = engine_signals(
                self.engine, grid, step, fetch,
                lambda: timed(lambda budget: self.client.instant(up, end, timeout_s=budget)),
                since_s, self.max_sample_age_s, self.client.base_url)
            self._log_drops(engine_drops)
            return sig
        gauges = fetch(q.worker_gauges)
        inputs = _Inputs(
            running=gauges.get(names.WORKER_RUNNING, _Grid()),
            waiting=gauges.get(names.WORKER_WAITING, _Grid()),
            max_batch=gauges.get(names.WORKER_MAX_BATCH, _Grid()),
            scraped=fetch(q.worker_scraped).get("", _Grid()),
            prefill=fetch(q.prefill).get("", _Grid()),
            queued=fetch(q.router_queued).get(names.ROUTER_QUEUED, _Grid()),
            router_scraped=fetch(q.router_scraped).get("", _Grid()))
        # One step before the grid: the baseline of the first step's bucket increase.
        hist = fetch(q.latency, start - step, n + 1)

        drops: Counter[str] = Counter()
        fleet = _fleet_steps(grid, inputs, self.max_sample_age_s, drops, since_s, self.replica_label)
        rows = _latency_rows(grid, hist, drops, since_s)
        self._log_drops(drops)
        return signals(grid, fleet, rows, since_s,
                       lambda k: timed(lambda budget: self._qps(float(grid[k]), budget)))

    def _log_drops(self, drops: Counter[str]) -> None:
        # Absent data is the normal state of a fleet starting or gone: not worth a warning.
        for level, part in ((logging.DEBUG, {w: c for w, c in drops.items() if w in _ABSENT}),
                            (logging.WARNING, {w: c for w, c in drops.items() if w not in _ABSENT})):
            if part:
                log.log(level, "Prometheus at %s: dropped %s", self.client.base_url,
                        "; ".join(f"{c} × {why}" for why, c in sorted(part.items())))

    def _lay(self, series: tuple[PromSeries, ...], start: float, n: int) -> dict[str, _Grid]:
        return lay(series, start, n, self.step_s)

    def _qps(self, at_s: float, timeout_s: float) -> float | None:
        res = self.client.instant(self.queries.qps, at_s, timeout_s=timeout_s)
        if not res or len(res[0].value) == 0:
            return None
        v = float(res[0].value[0])
        if not math.isfinite(v) or v < 0:
            log.warning("Prometheus at %s: dropped total_qps %r (not a finite rate >= 0)", self.client.base_url, v)
            return None
        return v


@dataclass(frozen=True)
class _Inputs:
    running: _Grid
    waiting: _Grid
    max_batch: _Grid
    scraped: _Grid
    prefill: _Grid
    queued: _Grid
    router_scraped: _Grid




_NO_ROUTER, _NO_WORKER = "step without a router queue sample", "step without any worker sample"
_ABSENT = frozenset({_NO_ROUTER, _NO_WORKER}) | ENGINE_ABSENT


def _fleet_steps(grid: FloatArray, x: _Inputs, max_age_s: float, drops: Counter[str],
                 since_s: float, label: str = "worker") -> Fleet:
    """Per step: whether every input is fresh and sane, the fleet sums, the oldest scrape behind it,
    the replicas counted. Reasons for dropping are counted for the steps after ``since_s`` (the
    ones a caller asked for)."""
    n = len(grid)
    f = Fleet.empty(n)
    for k in range(n):
        t = float(grid[k])
        problems: list[str] = []
        routers = x.router_scraped.keys_at(k)
        if not routers:
            problems.append(_NO_ROUTER)
        for key in routers:
            q, ts = x.queued.at(key, k), float(x.router_scraped.values[key][k])
            why = _age_problem(t, ts, max_age_s, "router queue")
            if why is not None:
                problems.append(why)
            elif q is None or not (math.isfinite(q) and q >= 0):
                problems.append("step with a router queue that is not a finite count >= 0")
            else:
                f.queued[k] += q
                f.oldest_scrape_s[k] = min(f.oldest_scrape_s[k], ts)
        workers = set(x.running.keys_at(k)) | set(x.max_batch.keys_at(k)) | set(x.scraped.keys_at(k))
        if not workers:
            problems.append(_NO_WORKER)
        for key in sorted(workers, key=sorted):
            why = _worker_problem(t, key, k, x, max_age_s, label)
            if why is not None:
                problems.append(why)
                continue
            name = dict(key)[label]
            if name in f.inflight[k]:
                problems.append(f"step with two series naming one replica ({label}={name!r})")
                continue
            r, m = x.running.at(key, k), x.max_batch.at(key, k)
            assert r is not None and m is not None
            f.prefill[k] += x.prefill.at(key, k) or 0.0
            f.slot[k] += r / m
            f.oldest_scrape_s[k] = min(f.oldest_scrape_s[k], float(x.scraped.values[key][k]))
            f.inflight[k][name] = r + (x.waiting.at(key, k) or 0.0)
            f.seen[k] += 1
        if problems:
            f.ok[k] = False
            if t > since_s:
                drops[problems[0]] += 1
    return f


def _worker_problem(t: float, key: Key, k: int, x: _Inputs, max_age_s: float, label: str = "worker") -> str | None:
    """Why worker ``key``'s values at step ``k`` cannot count, or None when they can."""
    if label not in dict(key):
        return f"step with a worker series without a {label!r} label"
    ts = x.scraped.at(key, k)
    if ts is None:
        return "step with a worker without a scrape timestamp"
    why = _age_problem(t, ts, max_age_s, "worker")
    if why is not None:
        return why
    r, m, w, p = x.running.at(key, k), x.max_batch.at(key, k), x.waiting.at(key, k), x.prefill.at(key, k)
    if r is None or m is None:
        return "step with a worker missing running or max_batch"
    if not (math.isfinite(r) and r >= 0):
        return "step with a worker running count that is not finite and >= 0"
    if not (math.isfinite(m) and m > 0):
        return "step with a worker max_batch that is not finite and > 0"
    if r > MAX_RUNNING_PER_SLOT * m:
        return f"step with a worker running > {MAX_RUNNING_PER_SLOT:g} x max_batch"
    if w is not None and not (math.isfinite(w) and w >= 0):
        return "step with a worker waiting count that is not finite and >= 0"
    if p is not None and not (math.isfinite(p) and 0 <= p <= MAX_PREFILL_SHARE):
        return f"step with a worker prefill share outside [0, {MAX_PREFILL_SHARE:g}]"
    return None


def _latency_rows(grid: FloatArray, hist: Mapping[str, _Grid], drops: Counter[str],
                  since_s: float) -> dict[str, FloatArray]:
    """Weighted completion rows from the raw cumulative histogram buckets (see module docstring)."""
    n = len(grid)
    cols: dict[str, list[float]] = {"t": [], "ttft": [], "e2e": [], "w": []}
    for metric, col, other in ((names.ROUTER_TTFT, "ttft", "e2e"), (names.ROUTER_E2E, "e2e", "ttft")):
        g = hist.get(metric + "_bucket", _Grid())
        inc: dict[float, FloatArray] = {}
        for key, vals in g.values.items():
            le = _bucket_bound(key)
            if le is None:
                drops["histogram series whose 'le' is not a number >= 0 or +Inf"] += 1
                continue
            d, bad = step_increase(vals, g.present[key])
            if (bad & (grid > since_s)).any():
                drops["histogram bucket step with a NaN, infinite or negative count"] += int((bad & (grid > since_s)).sum())
            inc.setdefault(le, np.zeros(n))[:] += d
        for le, count in per_bucket(inc, n):
            for k in np.flatnonzero(count > 0):
                cols["t"].append(float(grid[k]))
                cols["w"].append(float(count[k]))
                cols[col].append(math.inf if math.isinf(le) else le * 1000.0)
                cols[other].append(math.nan)
    order = np.argsort(np.array(cols["t"]), kind="stable")
    return {c: np.array(v, dtype=np.float64)[order] for c, v in cols.items()}


