"""Prometheus as a live :class:`~ebb.sources.live.SignalSource`: HTTP API client and PromQL.

:class:`PrometheusClient` is a blocking client (stdlib ``urllib``, one connection per call, no
thread or event loop of its own) over ``/api/v1/query`` and ``/api/v1/query_range``; each call
waits at most ``timeout_s`` (default 2 s). Errors: connection refused, timeout, reset or HTTP 5xx
(503 included) → :class:`~ebb.errors.SourceUnavailable` naming the URL; HTTP 4xx (bad PromQL:
400 ``bad_data``, 422 ``execution``) or a body that is not Prometheus' JSON →
:class:`~ebb.errors.InputError` quoting Prometheus' ``error``. Values are parsed with ``float``
("NaN", "+Inf", "-Inf" included) and handed over unfiltered; the source filters.

:class:`PrometheusSource` answers ``read(since_s)`` with one range query per signal over the last
``lookback_s`` (default 30 s) ending at now rounded down to ``step_s`` (default 1 s), so the grid
of ``t_s`` is the same from read to read; it returns the steps ``> since_s`` (pass the last
``fine.t_s`` back as the cursor). "Now" lags the clock by ``settle_s`` (default 1.25 × the scrape
interval): Prometheus stamps a scrape with its start and commits it up to ``scrape_timeout`` (≤ the
interval) later, so a step closer to now could still change after it was read and past the cursor
— histogram counts would be lost. Seven queries per read (``W`` = ``rate_window_s``)::

    {__name__=~"ebb_worker_running|ebb_worker_waiting|ebb_worker_max_batch"}   per-worker gauges
    timestamp(ebb_worker_running)               when each worker's value was really scraped
    rate(ebb_worker_prefill_busy_seconds_total[W])   per-worker prefill busy share
    ebb_router_queued   and   timestamp(ebb_router_queued)
    {__name__=~"ebb_router_ttft_seconds_bucket|ebb_router_e2e_seconds_bucket"} raw cumulative
    sum(rate(ebb_router_requests_total[W]))     instant, newest good step: ``total_qps``
                                                (answered requests/s, the arrival rate when steady)

Sums are taken here, not in PromQL, so every worker's value can be checked before it counts.

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

Fail static, never a guess — a step is dropped (reasons counted over the steps asked for and
logged once per read on this module's logger: WARNING, or DEBUG for plain absence) when: no fresh router ``queued``; no worker at all (every worker gone reads as "no data",
not as "no demand"); any worker stale; a NaN, infinite or negative value; ``max_batch`` ≤ 0;
``running`` > 10 × ``max_batch``; a prefill share > 2 per worker.

Latency completions come from the histograms' raw cumulative buckets: the increase of each bucket
counter between two consecutive steps (a drop is a counter reset: the new value is the increase)
is summed over routers per ``le``; differences of neighbouring ``le`` give each bucket's count.
One row per non-empty bucket and step: ``done_t_s`` = the step, the latency = the bucket's upper
bound in ms (never understates a P99; the ``+Inf`` bucket reads as ``inf``), weight = count; TTFT
rows carry NaN end-to-end latency and vice versa. Counts are exact: no ``increase()``
extrapolation, and a stale counter adds nothing.
"""

from __future__ import annotations

import json
import logging
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.client import HTTPException
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from ebb.errors import InputError, SourceUnavailable
from ebb.model import live as names
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals

__all__ = ["PrometheusClient", "PrometheusSource", "PromSeries"]

log = logging.getLogger(__name__)
FloatArray = npt.NDArray[np.float64]

MAX_RUNNING_PER_SLOT = 10.0
"""``running`` above this many times ``max_batch`` is absurd (a unit or label mix-up)."""
MAX_PREFILL_SHARE = 2.0
"""A worker's prefill busy seconds per second above this is absurd (1.0 = always prefilling;
``rate`` extrapolation may overshoot 1 slightly)."""
MAX_POINTS = 11_000
"""Prometheus refuses range queries of more points than this per series."""

_FIX = "check that Prometheus runs and that the URL given to ebb (--prometheus-url) points at it"


@dataclass(frozen=True)
class PromSeries:
    """One series of a query result: its labels (``__name__`` included when Prometheus keeps it)
    and its points, Unix seconds and values (NaN/±inf as Prometheus sent them)."""

    labels: Mapping[str, str]
    ts_s: FloatArray
    value: FloatArray

    @property
    def key(self) -> frozenset[tuple[str, str]]:
        """The series' identity without its metric name (what ``timestamp``/``rate`` keep)."""
        return frozenset((k, v) for k, v in self.labels.items() if k != "__name__")


class PrometheusClient:
    """Blocking client of Prometheus' HTTP query API at ``base_url`` (``http://host:9090``)."""

    def __init__(self, base_url: str, timeout_s: float = 2.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"Prometheus URL must start with http:// or https://, got {base_url!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def instant(self, query: str, at_s: float | None = None) -> tuple[PromSeries, ...]:
        """Evaluate ``query`` at ``at_s`` (Unix s; Prometheus' now when None)."""
        params = {"query": query}
        if at_s is not None:
            params["time"] = _fmt_time(at_s)
        return self._query("/api/v1/query", params)

    def range(self, query: str, start_s: float, end_s: float, step_s: float) -> tuple[PromSeries, ...]:
        """Evaluate ``query`` at ``start_s, start_s + step_s, ... <= end_s`` (Unix s)."""
        if step_s <= 0 or end_s < start_s:
            raise ValueError(f"range needs step_s > 0 and end_s >= start_s, got {start_s}, {end_s}, {step_s}")
        return self._query("/api/v1/query_range", {"query": query, "start": _fmt_time(start_s),
                                                   "end": _fmt_time(end_s), "step": f"{step_s:g}"})

    def _query(self, path: str, params: dict[str, str]) -> tuple[PromSeries, ...]:
        url = f"{self.base_url}{path}"
        body = self._get(url, params)
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise InputError(f"answer is not JSON: {body[:200]!r}", path=url,
                             fix="point ebb at a Prometheus server, not another HTTP service") from exc
        return _parse(doc, url, params["query"])

    def _get(self, url: str, params: dict[str, str]) -> bytes:
        full = f"{url}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(full, timeout=self.timeout_s) as resp:
                data: bytes = resp.read()
                return data
        except urllib.error.HTTPError as exc:
            with exc:
                detail = _error_text(exc.read())
            if exc.code >= 500:
                raise SourceUnavailable(f"Prometheus at {url} answered HTTP {exc.code}: {detail} "
                                        f"(query {params['query']!r}); retrying next cycle") from exc
            raise InputError(f"Prometheus rejected query {params['query']!r} with HTTP {exc.code}: {detail}",
                             path=url, fix="correct the PromQL or the metric names") from exc
        except (urllib.error.URLError, TimeoutError, HTTPException, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise SourceUnavailable(f"Prometheus at {url} did not answer within {self.timeout_s:g} s: "
                                    f"{reason} (fix: {_FIX})") from exc


def _fmt_time(t_s: float) -> str:
    return f"{t_s:.3f}"


def _error_text(body: bytes) -> str:
    """Prometheus' ``error`` field (with ``errorType``) from an error body, else the raw text."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body[:200].decode(errors="replace").strip() or "(empty body)"
    if isinstance(doc, dict) and "error" in doc:
        return f"{doc.get('errorType', 'error')}: {doc['error']}"
    return body[:200].decode(errors="replace")


def _parse(doc: Any, url: str, query: str) -> tuple[PromSeries, ...]:
    """The series of a ``status: success`` answer; InputError naming URL and field otherwise."""
    def bad(what: str) -> InputError:
        return InputError(f"malformed answer to {query!r}: {what}", path=url,
                          fix="check the URL points at Prometheus' HTTP API (v1)")

    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error", "no error given") if isinstance(doc, dict) else "not an object"
        raise bad(f"status is not 'success' ({err})")
    data = doc.get("data")
    if not isinstance(data, dict) or "result" not in data:
        raise bad("no data.result")
    kind, result = data.get("resultType"), data["result"]
    for w in doc.get("warnings", []) or []:
        log.warning("Prometheus at %s warns about %r: %s", url, query, w)
    try:
        if kind == "scalar":
            return (_series({}, [result]),)
        if kind == "vector":
            return tuple(_series(r["metric"], [r["value"]]) for r in result)
        if kind == "matrix":
            return tuple(_series(r["metric"], r["values"]) for r in result)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise bad(f"unreadable {kind} ({exc})") from exc
    raise bad(f"resultType {kind!r} is not scalar, vector or matrix")


def _series(metric: Mapping[str, str], pairs: list[list[Any]]) -> PromSeries:
    ts = np.array([float(p[0]) for p in pairs], dtype=np.float64)
    vals = np.array([float(p[1]) for p in pairs], dtype=np.float64)
    return PromSeries(MappingProxyType({str(k): str(v) for k, v in metric.items()}), ts, vals)


def _duration(seconds: float) -> str:
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


Q_WORKER_GAUGES = (f'{{__name__=~"{names.WORKER_RUNNING}|{names.WORKER_WAITING}|'
                   f'{names.WORKER_MAX_BATCH}"}}')
Q_WORKER_SCRAPED = f"timestamp({names.WORKER_RUNNING})"
Q_PREFILL = "rate(" + names.WORKER_PREFILL_BUSY + "[{window}])"
Q_ROUTER_QUEUED = names.ROUTER_QUEUED
Q_ROUTER_SCRAPED = f"timestamp({names.ROUTER_QUEUED})"
Q_LATENCY = f'{{__name__=~"{names.ROUTER_TTFT}_bucket|{names.ROUTER_E2E}_bucket"}}'
Q_QPS = "sum(rate(" + names.ROUTER_REQUESTS + "[{window}]))"


Key = frozenset[tuple[str, str]]
"""A series' labels without ``__name__``: the same worker in every query."""


@dataclass
class _Grid:
    """The series of one metric name laid on the step grid: value and presence per step."""

    values: dict[Key, FloatArray] = field(default_factory=dict)
    present: dict[Key, npt.NDArray[np.bool_]] = field(default_factory=dict)

    def at(self, key: Key, k: int) -> float | None:
        """The value at step ``k`` (NaN stays NaN), None when the series has no point there."""
        pres = self.present.get(key)
        return float(self.values[key][k]) if pres is not None and pres[k] else None

    def keys_at(self, k: int) -> list[Key]:
        return [key for key, pres in self.present.items() if pres[k]]


class PrometheusSource:
    """A :class:`~ebb.sources.live.SignalSource` over a Prometheus server; see the module docstring."""

    def __init__(self, client: PrometheusClient, *, step_s: float = 1.0, lookback_s: float = 30.0,
                 scrape_interval_s: float = 1.0, rate_window_s: float | None = None,
                 max_sample_age_s: float | None = None, settle_s: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if step_s <= 0 or lookback_s < step_s or scrape_interval_s <= 0:
            raise ValueError(f"need step_s > 0, lookback_s >= step_s, scrape_interval_s > 0; got "
                             f"{step_s!r}, {lookback_s!r}, {scrape_interval_s!r}")
        if lookback_s / step_s + 2 > MAX_POINTS:
            raise ValueError(f"lookback_s/step_s = {lookback_s / step_s:g} exceeds Prometheus' {MAX_POINTS} points")
        self.client = client
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
        self._clock = clock

    def read(self, since_s: float) -> LiveSignals:
        step = self.step_s
        end = math.floor((self._clock() - self.settle_s) / step) * step
        start = end - math.floor(self.lookback_s / step) * step
        grid = np.round(np.arange(start, end + step / 2, step), 6)
        n = len(grid)
        window = _duration(self.rate_window_s)

        def fetch(query: str, first: float = start, points: int = n) -> dict[str, _Grid]:
            return self._lay(self.client.range(query, first, end, step), first, points)

        gauges = fetch(Q_WORKER_GAUGES)
        inputs = _Inputs(
            running=gauges.get(names.WORKER_RUNNING, _Grid()),
            waiting=gauges.get(names.WORKER_WAITING, _Grid()),
            max_batch=gauges.get(names.WORKER_MAX_BATCH, _Grid()),
            scraped=fetch(Q_WORKER_SCRAPED).get("", _Grid()),
            prefill=fetch(Q_PREFILL.format(window=window)).get("", _Grid()),
            queued=fetch(Q_ROUTER_QUEUED).get(names.ROUTER_QUEUED, _Grid()),
            router_scraped=fetch(Q_ROUTER_SCRAPED).get("", _Grid()))
        # One step before the grid: the baseline of the first step's bucket increase.
        hist = fetch(Q_LATENCY, start - step, n + 1)

        drops: Counter[str] = Counter()
        fleet = _fleet_steps(grid, inputs, self.max_sample_age_s, drops, since_s)
        rows = _latency_rows(grid, hist, drops, since_s)
        self._log_drops(drops)
        keep = fleet.ok & (grid > since_s)
        fine = FineSignals(t_s=grid[keep], prefill_replicas=fleet.prefill[keep], slot_replicas=fleet.slot[keep],
                           queued=fleet.queued[keep], **_rows_after(rows, since_s))
        good = np.flatnonzero(fleet.ok)
        if len(good) == 0:
            return LiveSignals(fine=fine)
        k = int(good[-1])
        return LiveSignals(fine=fine, inflight_by_replica=fleet.inflight[k], total_qps=self._qps(window, float(grid[k])),
                           queued=float(fleet.queued[k]), newest_sample_s=float(fleet.oldest_scrape_s[k]))

    def _log_drops(self, drops: Counter[str]) -> None:
        # Absent data is the normal state of a fleet starting or gone: not worth a warning.
        for level, part in ((logging.DEBUG, {w: c for w, c in drops.items() if w in _ABSENT}),
                            (logging.WARNING, {w: c for w, c in drops.items() if w not in _ABSENT})):
            if part:
                log.log(level, "Prometheus at %s: dropped %s", self.client.base_url,
                        "; ".join(f"{c} × {why}" for why, c in sorted(part.items())))

    def _lay(self, series: tuple[PromSeries, ...], start: float, n: int) -> dict[str, _Grid]:
        out: dict[str, _Grid] = {}
        for s in series:
            idx = np.round((s.ts_s - start) / self.step_s).astype(np.int64)
            inside = (idx >= 0) & (idx < n)
            vals = np.full(n, np.nan)
            pres = np.zeros(n, dtype=np.bool_)
            vals[idx[inside]] = s.value[inside]
            pres[idx[inside]] = True
            g = out.setdefault(s.labels.get("__name__", ""), _Grid())
            g.values[s.key], g.present[s.key] = vals, pres
        return out

    def _qps(self, window: str, at_s: float) -> float | None:
        res = self.client.instant(Q_QPS.format(window=window), at_s)
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


@dataclass(frozen=True)
class _Fleet:
    ok: npt.NDArray[np.bool_]
    prefill: FloatArray
    slot: FloatArray
    queued: FloatArray
    oldest_scrape_s: FloatArray
    inflight: list[dict[str, float]]


_NO_ROUTER, _NO_WORKER = "step without a router queue sample", "step without any worker sample"
_ABSENT = frozenset({_NO_ROUTER, _NO_WORKER})


def _fleet_steps(grid: FloatArray, x: _Inputs, max_age_s: float, drops: Counter[str],
                 since_s: float) -> _Fleet:
    """Per step: whether every input is fresh and sane, the fleet sums, the oldest scrape behind it.
    Reasons for dropping are counted for the steps after ``since_s`` (the ones a caller asked for)."""
    n = len(grid)
    f = _Fleet(np.ones(n, dtype=np.bool_), np.zeros(n), np.zeros(n), np.zeros(n), np.full(n, np.inf),
               [{} for _ in range(n)])
    for k in range(n):
        t = float(grid[k])
        problems: list[str] = []
        routers = x.router_scraped.keys_at(k)
        if not routers:
            problems.append(_NO_ROUTER)
        for key in routers:
            q, ts = x.queued.at(key, k), float(x.router_scraped.values[key][k])
            if t - ts > max_age_s:
                problems.append("step with a stale router queue sample")
            elif q is None or not (math.isfinite(q) and q >= 0):
                problems.append("step with a router queue that is not a finite count >= 0")
            else:
                f.queued[k] += q
                f.oldest_scrape_s[k] = min(f.oldest_scrape_s[k], ts)
        workers = set(x.running.keys_at(k)) | set(x.max_batch.keys_at(k)) | set(x.scraped.keys_at(k))
        if not workers:
            problems.append(_NO_WORKER)
        for key in sorted(workers, key=sorted):
            why = _worker_problem(t, key, k, x, max_age_s)
            if why is not None:
                problems.append(why)
                continue
            r, m = x.running.at(key, k), x.max_batch.at(key, k)
            assert r is not None and m is not None
            f.prefill[k] += x.prefill.at(key, k) or 0.0
            f.slot[k] += r / m
            f.oldest_scrape_s[k] = min(f.oldest_scrape_s[k], float(x.scraped.values[key][k]))
            f.inflight[k][dict(key)["worker"]] = r + (x.waiting.at(key, k) or 0.0)
        if problems:
            f.ok[k] = False
            if t > since_s:
                drops[problems[0]] += 1
    return f


def _worker_problem(t: float, key: Key, k: int, x: _Inputs, max_age_s: float) -> str | None:
    """Why worker ``key``'s values at step ``k`` cannot count, or None when they can."""
    if "worker" not in dict(key):
        return "step with a worker series without a 'worker' label"
    ts = x.scraped.at(key, k)
    if ts is None:
        return "step with a worker without a scrape timestamp"
    if t - ts > max_age_s:
        return "step with a stale worker sample"
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
            try:
                le = float(dict(key).get("le", ""))
            except ValueError:
                drops["histogram series without a numeric 'le'"] += 1
                continue
            pres = g.present[key]
            prev, cur = vals[:-1], vals[1:]
            both = pres[:-1] & pres[1:]
            bad = both & ~(np.isfinite(prev) & np.isfinite(cur) & (prev >= 0) & (cur >= 0))
            if (bad & (grid > since_s)).any():
                drops["histogram bucket step with a NaN, infinite or negative count"] += int((bad & (grid > since_s)).sum())
            # A drop is a counter reset: the new value is all that was counted since.
            d = np.where(cur >= prev, cur - prev, cur)
            inc.setdefault(le, np.zeros(n))[:] += np.where(both & ~bad, d, 0.0)
        below = np.zeros(n)
        for le in sorted(inc):
            count = inc[le] - below
            below = np.maximum(below, inc[le])
            for k in np.flatnonzero(count > 0):
                cols["t"].append(float(grid[k]))
                cols["w"].append(float(count[k]))
                cols[col].append(le * 1000.0)
                cols[other].append(math.nan)
    order = np.argsort(np.array(cols["t"]), kind="stable")
    return {c: np.array(v, dtype=np.float64)[order] for c, v in cols.items()}


def _rows_after(rows: Mapping[str, FloatArray], since_s: float) -> dict[str, FloatArray]:
    keep = rows["t"] > since_s
    return {"done_t_s": rows["t"][keep], "done_ttft_ms": rows["ttft"][keep],
            "done_e2e_ms": rows["e2e"][keep], "done_weight": rows["w"][keep]}
