"""Engine mode of :class:`~ebb.sources.prometheus.PrometheusSource`: an inference engine's own series.

For teams whose Prometheus already scrapes their engine pods (vLLM, SGLang, TGI, Triton, llama.cpp or
an engine of an engines file): the source reads the series an
:class:`~ebb.sources.engines.profiles.EngineProfile` names instead of Ebb's ``ebb_worker_*`` /
``ebb_router_*`` ones, and returns the same :class:`~ebb.model.live.LiveSignals`, so the controller
runs unchanged. The queries are :class:`~ebb.sources.promql.EngineQueries`; the step grid, the
cursor, ``settle_s``, the 4 s read deadline, the 50,000-series cap and the selector parsing are
the source's own, as in Ebb mode.

Per replica (a target: the replica label, default ``pod``, with ``job`` and ``instance``), at each
step of the grid:

* ``running`` / ``waiting``: the profile's gauges summed over the target's series (an engine's
  ``engine="0"``/``"1"`` data-parallel ranks) — of **one model**: a pod serving several models is
  several workloads. A matcher on the profile's model label in the selector (vLLM
  ``--prometheus-selector 'namespace="serving",model_name="llama-8b"'``, per workload in a fleet file)
  reads that model's series alone (``up`` is asked without it: it carries no model label). A target
  whose running series carry several models at a step (no such matcher, or a regex matching several;
  the profile's ``model_labels``, one ``count by (G) (group by (G, M) (...))`` query per running
  name) is left out of that step with the reason "serves several models", never summed: the
  controller then sees fewer replicas than are ready and blocks a scale-down on them. **Several names per
  signal** (a V1 name, then the V0 / renamed one): all are queried at once with
  ``__name__=~"a|b"`` and, per target and step, the first name of the profile's order that has a
  value wins — never both, so an engine exporting a deprecated name beside the new one (vLLM 0.11)
  is not counted twice, and a fleet half-way through an upgrade reads each pod by its own names.
* slot share ``= min(1, max(running / max_concurrency, kv_usage))``: ``max_concurrency`` is the
  constructor's value, else the profile's gauge (summed over the target's series); ``kv_usage``
  the maximum over the target's series (the fullest pool bounds the pod). Either alone suffices.
* prefill share ``= min(1, rate(busy-seconds counter[W]) × busy_unit_s)`` (0 before ``rate`` has two
  samples; a profile without a counter is refused at construction): clamped to 1 as the agent's is, because an engine's busy counter
  may add the batch's time once per request in it (vLLM's ``request_prefill_time_seconds_sum``),
  which is no sign of a bad series.
* **No router in engine mode**: requests wait in the engines' own queues, so the fleet backlog is
  theirs — ``fine.queued`` and ``queued`` = Σ ``waiting``, and ``inflight_by_replica`` = a pod's
  ``running`` only, so the controller's ``total_inflight`` (Σ in-flight + queued) counts each
  request once and the policy's backlog ``ready × queued / running`` is the engines' queue in
  replica units.
* ``total_qps`` = completions per second over the last ``W`` seconds before the newest good step,
  from the end-to-end histogram's rows (TTFT's when the profile has no end-to-end one; None with
  neither, or when no histogram series was scraped).

Latency rows: ``sum by (G, le, __name__)`` of the raw cumulative buckets, per target, so the
increase is taken per target and bucket (a target appearing with old counts adds nothing; a drop
is a counter reset and the new value is the increase); a target's buckets are made
non-cumulative with its own bounds (pods of two engine versions may have different ones), then
rows are summed per step and bound: ``done_t_s`` = the step, latency = the bucket's upper bound
× ``unit_s`` in ms (never understates a P99; ``+Inf`` → inf), weight = count, the other latency
column NaN. Counts are exact (no ``increase()`` extrapolation). TTFT and end-to-end rows come
from ``profile.ttft`` and ``profile.e2e``.

**Values, checked one series at a time with the agent's rule** (:data:`~ebb.sources.engines.reading.VALUE_RANGES`,
imported, the one implementation): a target's ``running``, ``waiting``, max-concurrency gauge or
KV usage at a step outside its signal's range (negative, NaN, past a million requests, a KV usage
outside [0, 1]) is dropped alone: the signal is read from what is left at that step (a KV usage
dropped leaves the max concurrency, and the other way round), and a target without running,
waiting or any capacity signal left is left out of that step — the other targets still count, and
``replicas_seen`` falls by one, so the controller blocks a scale-down on it but still sees a
burst. Each drop is counted in :attr:`EngineMode.series_dropped` (per ``pod/metric``) and logged
as a WARNING naming the replica, the metric, the value and the range, at most once per ``pod/metric``
per 10 s (:class:`~ebb.log_limit.LogLimiter`). A step where no target is left is dropped (no data,
never "no demand"). Prometheus sums a target's series (``engine="0"``/``"1"``) before Ebb sees
them, so "a series" here is a target's sum per metric: a bad rank inside a sane sum cannot be told apart.

Staleness, kept: ``min by (G) (timestamp(...))`` of the running and waiting series is each
target's scrape time; a step is kept only when every target's was at most ``max_sample_age_s``
before it and not after it, and ``newest_sample_s`` is the oldest scrape behind the newest kept
step. A step is also dropped (reason counted and logged once per read) for: no engine target at
all, or none left after the value checks; a target without the replica label; two targets naming
one replica; a target missing running or waiting. A target (not the step) is left out, counted
under its reason, for: running above 10 × its max concurrency; a NaN, infinite or negative prefill
share; no usable max concurrency or KV usage; several models (above).
``replicas_seen`` is the fewest replicas behind any returned step, as in Ebb mode.

Missing series (checked on every read, before any step): no running series in the whole window —
Prometheus' ``up{S}`` then tells which case it is: no ``up`` series at all, or every target down,
is :class:`~ebb.errors.SourceUnavailable` (not scraped yet, pods starting, or a selector matching
nothing: retried next cycle); targets up but none exporting any running name is
:class:`~ebb.errors.InputError` naming the metric names, the engine and how to enable them (the
engine does not export it: retrying cannot help). Running present but no waiting name at all, or
neither a max-concurrency nor a KV-usage series when no ``max_concurrency`` was given, is an
InputError naming those metrics. The controller treats either as no data (fail static).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from ebb.errors import ConfigError, InputError, SourceUnavailable
from ebb.model.live import LiveSignals
from ebb.log_limit import LogLimiter, held_note
from ebb.sources.engines.profiles import EngineProfile, HistogramSpec, MetricSelector, parse_selector
from ebb.sources.engines.reading import VALUE_RANGES
from ebb.sources.prometheus_api import PromSeries
from ebb.sources.prometheus_grid import (Fleet, Grid, Key, age_problem, bucket_bound, per_bucket, signals,
                                         step_increase)
from ebb.sources.promql import EngineQueries, Selector

__all__ = ["ENGINE_ABSENT", "SEVERAL_MODELS", "EngineMode", "engine_signals"]

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
Fetch = Callable[[str, float, int], dict[str, Grid]]
"""``fetch(query, first_step_s, points)``: a range query laid on the grid."""

MAX_RUNNING_PER_SLOT: Final = 10.0
"""``running`` above this many times the max concurrency is absurd (a flag or unit mix-up)."""
NO_ENGINE: Final = "step without any engine target sample"
NONE_LEFT: Final = "step without any engine target left after the value checks"
ENGINE_ABSENT: Final = frozenset({NO_ENGINE})
"""Drop reasons that are plain absence (logged at DEBUG, not WARNING)."""


@dataclass(frozen=True)
class EngineMode:
    """An engine profile made into queries for one selector, replica label and ``rate`` window."""

    profile: EngineProfile
    replica_label: str
    max_concurrency: int | None
    busy_unit_s: float
    queries: EngineQueries
    window_s: float
    series_dropped: Counter[str] = field(default_factory=Counter, compare=False)
    """Series dropped by the value checks since construction, per ``pod/metric`` (steps asked for only)."""
    limiter: LogLimiter = field(default_factory=LogLimiter, compare=False)
    """One WARNING per ``pod/metric`` per 10 s for those drops."""

    @classmethod
    def build(cls, profile: EngineProfile, selector: Selector, window: str, window_s: float, *,
              replica_label: str, max_concurrency: int | None) -> EngineMode:
        """ConfigError for a metric name that is not one, a bad ``max_concurrency``, or a profile
        without running/waiting names or without any way to a slot share."""
        if max_concurrency is not None and not (isinstance(max_concurrency, int) and not isinstance(max_concurrency, bool)
                                                and 0 < max_concurrency <= 1_000_000):
            raise ConfigError(f"max concurrency must be a whole number in 1..1000000, got {max_concurrency!r} "
                              "(fix: the engine's max concurrent sequences, e.g. vLLM's --max-num-seqs)")
        if not profile.running or not profile.waiting:
            raise ConfigError(f"engine profile {profile.name!r} names no running or no waiting gauge "
                              "(fix: list both in the engines file)")
        if max_concurrency is None and not profile.max_concurrency and not profile.kv_usage:
            raise ConfigError(f"engine {profile.name!r} exports neither a max-concurrency nor a KV-usage gauge: "
                              "Ebb cannot tell how full a pod is (fix: pass --max-concurrency, e.g. vLLM's "
                              "--max-num-seqs)")
        if not profile.busy_seconds:
            raise ConfigError(f"engine {profile.name!r} names no busy-seconds counter: its prefill share would "
                              "read as 0 and understate demand (fix: add busy_seconds to its entry in the engines "
                              "file, e.g. the TTFT histogram's _sum)")

        def names(texts: tuple[str, ...]) -> tuple[MetricSelector, ...]:
            return tuple(parse_selector(t) for t in texts)

        queries = EngineQueries.build(
            selector, window, replica_label=replica_label, running=names(profile.running),
            waiting=names(profile.waiting), max_concurrency=names(profile.max_concurrency),
            kv=names(profile.kv_usage), busy=names(profile.busy_seconds),
            ttft=names(profile.ttft.names) if profile.ttft is not None else (),
            e2e=names(profile.e2e.names) if profile.e2e is not None else (), model_labels=profile.model_labels)
        return cls(profile, replica_label, max_concurrency, profile.busy_unit_s, queries, window_s)


def _first(grids: Sequence[Grid], key: Key, k: int) -> float | None:
    """The value of the first grid (the profile's preference order) with a point for ``key`` at step ``k``."""
    return next((v for g in grids if (v := g.at(key, k)) is not None), None)


def _named(grids: Sequence[Grid], names: Sequence[str], key: Key, k: int) -> tuple[float, str] | None:
    """:func:`_first` with the profile's metric name the value came from."""
    return next(((v, n) for g, n in zip(grids, names) if (v := g.at(key, k)) is not None), None)


def _answered(grids: Sequence[Grid]) -> bool:
    return any(g.values for g in grids)


@dataclass(frozen=True)
class _Read:
    """One read's gauge answers, one grid per profile name (preference order) per signal."""

    running: list[Grid]
    scraped: list[Grid]
    waiting: list[Grid]
    max_concurrency: list[Grid]
    kv: list[Grid]
    busy: list[Grid]
    models: list[Grid]
    """Models per target, one grid per running name (none for a profile without model labels)."""


SEVERAL_MODELS: Final = ("engine target left out of a step: it serves several models (add the model label, e.g. "
                         'model_name="NAME", to the workload\'s Prometheus selector)')


def engine_signals(mode: EngineMode, grid: FloatArray, step_s: float, fetch: Fetch,
                   probe_up: Callable[[], tuple[PromSeries, ...]], since_s: float, max_age_s: float,
                   where: str) -> tuple[LiveSignals, Counter[str]]:
    """One read in engine mode over ``grid`` (see the module docstring) and the drop reasons."""
    q, p = mode.queries, mode.profile
    n, start = len(grid), float(grid[0])

    def each(queries: tuple[str, ...], first: float = start, points: int = n) -> list[Grid]:
        return [fetch(query, first, points).get("", Grid()) for query in queries]

    x = _Read(running=each(q.running), scraped=each(q.scraped), waiting=each(q.waiting),
              max_concurrency=each(q.max_concurrency), kv=each(q.kv), busy=each(q.busy), models=each(q.models))
    ttft, e2e = each(q.ttft, start - step_s, n + 1), each(q.e2e, start - step_s, n + 1)
    _require(mode, x, probe_up, where)
    drops: Counter[str] = Counter()
    bad: dict[tuple[str, str], tuple[float, int]] = {}
    f = _fleet(mode, grid, x, max_age_s, drops, since_s, bad)
    _log_series(mode, bad, where)
    rows = _rows(grid, [("ttft", p.ttft, ttft), ("e2e", p.e2e, e2e)], drops, since_s)
    return signals(grid, f, rows, since_s,
                   lambda k: _qps(mode.window_s, float(grid[k]), rows, [("e2e", e2e), ("ttft", ttft)])), drops


def _require(mode: EngineMode, x: _Read, probe_up: Callable[[], tuple[PromSeries, ...]], where: str) -> None:
    """Raise when a required series is missing from the whole window (see the module docstring)."""
    p = mode.profile
    sel = mode.queries.up.removeprefix("up") or "(unscoped)"
    enable = p.enable_hint or f"check that the pods run {p.title} and that Prometheus scrapes their {p.metrics_path}"
    if not _answered(x.running):
        ups = probe_up()
        if not ups:
            raise SourceUnavailable(f"Prometheus at {where}: no target matches selector {sel} (up is empty): not "
                                    f"scraped yet, or the selector matches nothing; retrying next cycle (fix: point "
                                    f"--prometheus-selector at the {p.title} pods' scrape job)")
        if not any(len(s.value) and s.value[-1] == 1.0 for s in ups):
            raise SourceUnavailable(f"Prometheus at {where}: all {len(ups)} targets within {sel} are down "
                                    "(up == 0); retrying next cycle")
        raise InputError(f"engine {p.name}: none of the {len(ups)} targets within {sel} exports "
                         f"{' or '.join(p.running)} (running requests)", path=where, fix=enable)
    if not _answered(x.waiting):
        raise InputError(f"engine {p.name}: the targets within {sel} export a running gauge but not "
                         f"{' or '.join(p.waiting)} (waiting requests)", path=where, fix=enable)
    if mode.max_concurrency is None and not _answered(x.max_concurrency) and not _answered(x.kv):
        names = " / ".join((*p.max_concurrency, *p.kv_usage)) or "(none in the profile)"
        raise InputError(f"engine {p.name}: the targets within {sel} export neither a max concurrency nor a KV "
                         f"usage gauge ({names})", path=where, fix="pass --max-concurrency (e.g. vLLM's --max-num-seqs)")


def _checked(mode: EngineMode, signal: str, grids: Sequence[Grid], names: Sequence[str], key: Key, k: int,
             asked: bool, bad: dict[tuple[str, str], tuple[float, int]]) -> float | None:
    """The target's value of ``signal`` at step ``k``, or None when absent or outside
    ``VALUE_RANGES[signal]`` (then noted in ``bad`` per ``(pod, metric)``: a value and the steps, when ``asked``)."""
    hit = _named(grids, names, key, k)
    if hit is None:
        return None
    v, name = hit
    lo, hi = VALUE_RANGES[signal]
    if lo <= v <= hi:  # NaN fails
        return v
    if asked:
        where = (dict(key).get(mode.replica_label, "?"), name)
        bad[where] = (v, bad.get(where, (v, 0))[1] + 1)
    return None


def _log_series(mode: EngineMode, bad: Mapping[tuple[str, str], tuple[float, int]], where: str) -> None:
    """Count each dropped series and log it, at most once per ``pod/metric`` per 10 s."""
    for (pod, metric), (v, steps) in sorted(bad.items()):
        subject = f"{pod}/{metric}"
        mode.series_dropped[subject] += steps
        held = mode.limiter.allow(subject)
        if held is not None:
            signal = next(s for s in VALUE_RANGES if metric in mode.profile.names_of(s))
            lo, hi = VALUE_RANGES[signal]
            log.warning("Prometheus at %s: %s=%s: %s = %r is outside [%g, %g]; that series dropped at %d step(s) "
                        "of this read, the other series still count%s", where, mode.replica_label, pod[:80],
                        metric, v, lo, hi, steps, held_note(held))


def _fleet(mode: EngineMode, grid: FloatArray, x: _Read, max_age_s: float, drops: Counter[str],
           since_s: float, bad: dict[tuple[str, str], tuple[float, int]]) -> Fleet:
    label = mode.replica_label
    p = mode.profile
    n = len(grid)
    f = Fleet.empty(n)
    for k in range(n):
        t = float(grid[k])
        asked = t > since_s
        problems: list[str] = []
        skipped: list[str] = []
        targets = set().union(*(g.keys_at(k) for g in (*x.running, *x.scraped)))
        if not targets:
            problems.append(NO_ENGINE)
        for key in sorted(targets, key=sorted):
            labels = dict(key)
            if label not in labels:
                problems.append(f"step with an engine series without a {label!r} label")
                continue
            ts = _first(x.scraped, key, k)
            why = "step with an engine target without a scrape timestamp" if ts is None else \
                age_problem(t, ts, max_age_s, "engine")
            if why is not None:
                problems.append(why)
                continue
            if _first(x.running, key, k) is None or _first(x.waiting, key, k) is None:
                problems.append("step with an engine target missing running or waiting")
                continue
            r = _checked(mode, "running", x.running, p.running, key, k, asked, bad)
            w = _checked(mode, "waiting", x.waiting, p.waiting, key, k, asked, bad)
            mc = float(mode.max_concurrency) if mode.max_concurrency is not None else \
                _checked(mode, "max_concurrency", x.max_concurrency, p.max_concurrency, key, k, asked, bad)
            u = _checked(mode, "kv_usage", x.kv, p.kv_usage, key, k, asked, bad)
            b = _first(x.busy, key, k)
            share = None if b is None else b * mode.busy_unit_s
            if r is None or w is None:
                continue  # its running or waiting series was dropped: this target sits the step out
            if max((v for g in x.models if (v := g.at(key, k)) is not None), default=1.0) > 1.0:
                skipped.append(SEVERAL_MODELS)  # two workloads' figures are never summed into one pod
                continue
            why = _value_problem(r, mc or None, u, share)
            if why is not None:
                skipped.append(why)
                continue
            name = labels[label]
            if name in f.inflight[k]:
                problems.append(f"step with two targets naming one replica ({label}={name!r})")
                continue
            assert ts is not None  # checked above
            f.slot[k] += min(1.0, max(r / mc if mc else 0.0, u or 0.0))
            f.prefill[k] += min(1.0, share or 0.0)
            f.queued[k] += w
            f.oldest_scrape_s[k] = min(f.oldest_scrape_s[k], ts)
            f.inflight[k][name] = r
            f.seen[k] += 1
        if targets and not problems and not f.seen[k]:
            problems.append(NONE_LEFT)  # every target sat out: no data, never "no demand"
        if asked:
            drops.update(skipped)
        if problems:
            f.ok[k] = False
            if asked:
                drops[problems[0]] += 1
    return f


def _value_problem(r: float, mc: float | None, u: float | None, share: float | None) -> str | None:
    """Why one target, its values already in range, cannot count at one step, or None
    (``mc`` None: no usable max concurrency)."""
    if mc is not None and r > MAX_RUNNING_PER_SLOT * mc:
        return f"engine target left out of a step: running > {MAX_RUNNING_PER_SLOT:g} x max concurrency"
    if mc is None and u is None:
        return "engine target left out of a step: no usable max concurrency or KV usage"
    if share is not None and not (math.isfinite(share) and share >= 0.0):
        return "engine target left out of a step: a prefill share that is not finite and >= 0"
    return None


def _rows(grid: FloatArray, specs: Sequence[tuple[str, HistogramSpec | None, Sequence[Grid]]],
          drops: Counter[str], since_s: float) -> dict[str, FloatArray]:
    """Weighted completion rows from per-target raw cumulative buckets (see the module docstring)."""
    n = len(grid)
    acc: dict[tuple[str, int, float], float] = {}
    for col, spec, grids in specs:
        if spec is None:
            continue
        chosen: dict[Key, Grid] = {}  # per target, the first of the profile's names it exports
        for g in grids:
            for key in g.values:
                chosen.setdefault(_target(key), g)
        per: dict[Key, dict[float, FloatArray]] = {}
        for target, g in chosen.items():
            for key, vals in g.values.items():
                if _target(key) != target:
                    continue
                le = bucket_bound(key)
                if le is None:
                    drops["histogram series whose 'le' is not a number >= 0 or +Inf"] += 1
                    continue
                d, bad = step_increase(vals, g.present[key])
                if (bad & (grid > since_s)).any():
                    drops["histogram bucket step with a NaN, infinite or negative count"] += int(
                        (bad & (grid > since_s)).sum())
                ms = math.inf if math.isinf(le) else le * spec.unit_s * 1000.0
                per.setdefault(target, {}).setdefault(ms, np.zeros(n))[:] += d
        for buckets in per.values():  # each target with its own bounds
            for ms, count in per_bucket(buckets, n):
                for k in np.flatnonzero(count > 0):
                    acc[(col, int(k), ms)] = acc.get((col, int(k), ms), 0.0) + float(count[k])
    cols: dict[str, list[float]] = {"t": [], "ttft": [], "e2e": [], "w": []}
    for (col, step, ms), w in sorted(acc.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        cols["t"].append(float(grid[step]))
        cols["w"].append(w)
        cols[col].append(ms)
        cols["e2e" if col == "ttft" else "ttft"].append(math.nan)
    return {c: np.array(v, dtype=np.float64) for c, v in cols.items()}


def _target(key: Key) -> Key:
    return frozenset(kv for kv in key if kv[0] != "le")


def _qps(window_s: float, at_s: float, rows: Mapping[str, FloatArray],
         hists: Sequence[tuple[str, Sequence[Grid]]]) -> float | None:
    """Completions per second over the ``W`` seconds up to ``at_s`` (module docstring); None without data."""
    for col, grids in hists:
        if _answered(grids):
            sel = ~np.isnan(rows[col]) & (rows["t"] > at_s - window_s) & (rows["t"] <= at_s)
            return float(rows["w"][sel].sum()) / window_s
    return None
