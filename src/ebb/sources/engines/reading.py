"""What one engine scrape says (:func:`read_engine`), and what two scrapes say about the interval between them (:func:`interval`).

Per scrape, with an :class:`~ebb.sources.engines.profiles.EngineProfile`:

* ``running`` / ``waiting``: the first listed name with any sample wins; its samples (every engine
  and model of the pod; only those matching the name's label matchers) are **summed**. A scrape
  without either is an :class:`~ebb.errors.InputError` naming the names tried, the engine and the
  profile's ``enable_hint``.
* ``kv_usage_ratio``: the **max** over series (the fullest pool bounds the pod); a value outside
  [0, 1] is dropped with a reason, never clamped.
* ``max_concurrency``: summed, rounded to an integer; ``busy_s_total``: summed × ``busy_unit_s``.
* Histograms, per family: ``_bucket`` samples grouped by their labels without ``le``; bounds are
  ``le`` parsed as numbers and sorted numerically; each group must have a ``+Inf`` bucket, no
  repeated bound and cumulative counts that never decrease; groups (several engines or models in
  one pod) with the same bound set are summed bound by bound; different bound sets, or any group
  failing a check, drop the whole histogram with the reason (never a partial sum). Bounds are
  converted to seconds with the spec's ``unit_s``. ``count`` is the ``+Inf`` bucket; ``sum_s`` the
  summed ``_sum`` (NaN when a group has none).

**Every value is checked where it is read, one series at a time** (:data:`VALUE_RANGES`): a gauge or
counter sample outside its signal's range (negative, or past what any engine can report — a million
requests in one pod) is dropped alone with a reason naming the series and the range, and the signal
is read from the series left (a required signal with none left is absent: that pod is missing for
the scrape, never the agent's page). A histogram count past :data:`MAX_COUNT` (2⁵³, where float
counts stop being exact; 285 years at a million observations a second) drops the histogram, a
``_sum`` past :data:`MAX_SUM_S` leaves ``sum_s`` NaN: no sum can overflow.

A series repeated with the same labels (Prometheus itself refuses such a scrape) counts once: the
first is read, the others dropped with a reason, so a duplicated line never doubles a gauge or a sum.

**Sleep state** (:attr:`EngineReading.asleep`, a profile with ``sleep_state``; vLLM's
``vllm:engine_sleep_state{sleep_state="awake"|"weights_offloaded"|"discard_all"}``, 1 on the active
state, one set per engine of the pod): the series are grouped by their labels without
``sleep_state``; a sample that is not exactly 0 or 1, or a repeated series, is dropped alone with a
reason. The pod is **awake** only when every group has ``awake`` = 1 and no other state at 1; any
group asleep, half awake (``awake`` = 0, a partial ``/wake_up?tags=weights``) or whose ``awake``
series was dropped or is absent reads **asleep** — the state that counts no capacity, the safe
direction. A page without the family (an engine without sleep mode, vLLM before PR #24176) reads
``None``: nothing known, the pod is served as today.

**Models** (a profile with ``model_labels``: vLLM and SGLang ``model_name``, Triton ``model``):
:func:`~ebb.sources.engines.models.page_models` lists the models the page's running series carry. A pod serving several models is
several workloads, so :func:`read_engine` never sums them: given ``model``, it reads only the series of
that model (and those that carry no model label: the process's own); without one, a page with several
models is an :class:`~ebb.errors.InputError` naming them and the fix (``--model NAME``); a page with one
model, or an engine that labels none, reads as before. A ``model`` the page does not carry is an
InputError naming the models it does; ``model`` for a profile without model labels is a
:class:`~ebb.errors.ConfigError` (:mod:`ebb.sources.engines.models`).

**A wrong engine**: when a required gauge is absent and the page's metric names are another built-in
engine's (:func:`~ebb.sources.engines.detect.looks_like`), the error says which one ("looks like vLLM")
and its fix names ``--engine`` for it.

Restarts: :attr:`EngineReading.started_s` is ``process_start_time_seconds`` (the Python client's
process collector: vLLM, SGLang), and :attr:`EngineReading.created` the ``*_created`` timestamps of
the series each counter signal was read from (``X_created`` for a histogram family ``X`` or a
counter ``X_sum``/``X_total``/``X_count``, per label set; prometheus_client exports them).

Per interval (:func:`interval`): per-bucket deltas of the cumulative counts. A counter signal is
**reset** — dropped for the interval and named in ``resets`` — when any of its cumulative values
decreased, its bound set changed, the process start time changed (every counter signal), or a
``_created`` timestamp of one of its label sets changed or that label set vanished. The busy ratio is
Δbusy_s / dt clamped to [0, 1], None after a reset. **Undetectable**: a counter that resets and
climbs past its old value between two scrapes on a page with neither ``process_start_time_seconds``
nor ``_created`` series (TGI, llama.cpp, Triton: not Python clients) reads as a plain increase, so
that interval undercounts (it misses the observations up to the old value); scraping at least
once per restart time bounds it to one interval.
:meth:`LatencyDelta.quantile_ms` returns the **upper bound** of the bucket holding the rank, so a
P99 read from it is never below the true P99 (inf when the rank falls in the ``+Inf`` bucket).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

import numpy as np
import numpy.typing as npt

from ebb.errors import InputError
from ebb.sources.engines.detect import detect_engine, looks_like
from ebb.sources.engines.exposition import Exposition, Sample, parse_exposition
from ebb.sources.engines.models import one_model
from ebb.sources.engines.profiles import (HISTOGRAM_SIGNALS, EngineProfile, HistogramSpec, MetricSelector,
                                          parse_selector)

__all__ = [
    "MAX_COUNT", "MAX_SUM_S", "VALUE_RANGES", "CumulativeHistogram", "EngineInterval", "EngineReading",
    "FloatArray", "LatencyDelta", "SLEEP_LABEL", "interval", "parse_engine_text", "read_engine", "read_engine_text",
    "read_sleep_state",
]

FloatArray = npt.NDArray[np.float64]
_OPTIONAL: Final = ("kv_usage", "max_concurrency", "busy_seconds", *HISTOGRAM_SIGNALS)

VALUE_RANGES: Final[Mapping[str, tuple[float, float]]] = MappingProxyType({
    "running": (0.0, 1e6), "waiting": (0.0, 1e6), "kv_usage": (0.0, 1.0), "max_concurrency": (0.0, 1e6),
    "busy_seconds": (0.0, 1e12)})
"""The range of one series' sample per signal, in the engine's own unit (requests, a ratio, busy
seconds — 10¹² s is 31,700 years of one GPU); a sample outside it drops that series."""
MAX_COUNT: Final = float(2**53)
"""Largest histogram bucket count read (exact as a float); a larger one drops the histogram."""
MAX_SUM_S: Final = 1e15
"""Largest ``_sum`` (in the histogram's unit) read; a larger one, or a non-finite one, leaves ``sum_s`` NaN."""


def _frozen(a: FloatArray) -> FloatArray:
    a = np.array(a, dtype=np.float64)
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class CumulativeHistogram:
    """A cumulative histogram as the engine exported it, bounds in seconds."""

    upper_s: FloatArray
    """Bucket upper bounds (s), strictly ascending, the last = +inf."""
    cumulative: FloatArray
    """Cumulative count at each bound (non-decreasing; validated)."""
    count: float
    """Observations in all (the +Inf bucket)."""
    sum_s: float
    """Sum of observations (s); NaN when a series had no ``_sum``."""
    series: int = 1
    """How many label sets (engines, models) were summed."""


@dataclass(frozen=True)
class EngineReading:
    """The signals of one scrape of one engine endpoint."""

    engine: str
    running: float
    """Requests being processed (summed over series)."""
    waiting: float
    """Requests queued (summed over series)."""
    kv_usage_ratio: float | None
    max_concurrency: int | None
    busy_s_total: float | None
    """Cumulative busy seconds (prefill/compute; see the profile's notes for what it overstates)."""
    histograms: Mapping[str, CumulativeHistogram]
    """Keys among ``ttft``, ``itl``, ``e2e``, ``queue``."""
    read_from: Mapping[str, str]
    """Signal -> the metric name (with matchers) it came from."""
    missing: tuple[str, ...]
    """Optional signals the profile defines but this scrape lacks (or had dropped)."""
    dropped: tuple[str, ...]
    """Every reason something was left out: parse and validation."""
    source: str = ""
    started_s: float | None = None
    """``process_start_time_seconds`` (the largest when several), None when the page has none."""
    created: Mapping[str, Mapping[tuple[tuple[str, str], ...], float]] = field(
        default_factory=lambda: MappingProxyType({}))
    """Per counter signal read (``busy_seconds`` and the histograms): its ``_created`` timestamp per label
    set (without ``le``); a signal whose series carry none is absent."""
    asleep: bool | None = None
    """True: the engine says it sleeps, or wakes only in part (module docstring); False: every engine of
    the pod is awake; None: the page has no sleep-state gauge."""
    model: str | None = None
    """The model whose series were read (``model`` of :func:`read_engine`); None: the page as a whole."""


SLEEP_LABEL: Final = "sleep_state"
"""The label of vLLM's ``vllm:engine_sleep_state`` that names the state (loggers.py, PR #24176)."""


def read_sleep_state(expo: Exposition, names: tuple[str, ...], dropped: list[str]) -> bool | None:
    """Whether the page says the pod sleeps (module docstring); reasons for dropped series go to ``dropped``."""
    hit = _first(expo, names, dropped)
    if hit is None:
        return None
    name, got = hit
    groups: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
    for s in got:
        if s.value not in (0.0, 1.0):
            dropped.append(f"{s.render()}: sleep state {s.value:g} is neither 0 nor 1; series dropped")
            continue
        key = tuple(p for p in s.labels if p[0] != SLEEP_LABEL)
        groups.setdefault(key, {})[s.label(SLEEP_LABEL) or ""] = s.value
    if not groups:
        dropped.append(f"{name}: no usable sleep-state series; the pod reads asleep (counts no capacity)")
        return True
    return any(g.get("awake") != 1.0 or any(v == 1.0 for k, v in g.items() if k != "awake") for g in groups.values())


def _selected(expo: Exposition, text: str, suffix: str = "", dropped: list[str] | None = None, *,
              unique: bool = True) -> tuple[Sample, ...]:
    """The samples of ``text`` + ``suffix`` matching its label matchers; with ``unique`` each label set
    once (the first; a repeat is named in ``dropped`` when given)."""
    sel = parse_selector(text)
    got = expo.series(sel.name + suffix)
    if sel.matchers:
        got = tuple(s for s in got if sel.matches(s.labels))
    if not unique:
        return got
    seen: dict[tuple[tuple[str, str], ...], None] = {}
    kept: list[Sample] = []
    for s in got:
        if s.labels in seen:
            if dropped is not None:
                dropped.append(f"{s.render()}: the same series appears twice; the first is read")
            continue
        seen[s.labels] = None
        kept.append(s)
    return got if len(kept) == len(got) else tuple(kept)


_CREATED_FROM: Final = ("_sum", "_total", "_count")


def _created(expo: Exposition, text: str, histogram: bool) -> dict[tuple[tuple[str, str], ...], float]:
    """The ``_created`` timestamps of counter ``text`` (a histogram family when ``histogram``), per label set."""
    sel = parse_selector(text)
    base = sel.name
    if not histogram:
        base = next((base.removesuffix(x) for x in _CREATED_FROM if base.endswith(x)), base)
    found = _selected(expo, str(MetricSelector(base, sel.matchers)), "_created")
    return {s.labels: s.value for s in found}


def _first(expo: Exposition, names: tuple[str, ...], dropped: list[str]) -> tuple[str, tuple[Sample, ...]] | None:
    for n in names:
        got = _selected(expo, n, dropped=dropped)
        if got:
            return n, got
    return None


def _float_bound(le: str) -> float | None:
    try:
        return float(le)
    except ValueError:
        return None


def assemble_histogram(expo: Exposition, name: str, unit_s: float) -> tuple[CumulativeHistogram | None, str | None]:
    """The histogram family ``name`` (may carry label matchers) summed over its label sets, or (None, reason).

    (None, None) when the family has no ``_bucket`` sample at all.
    """
    buckets = _selected(expo, name, "_bucket", unique=False)  # a repeated bound drops the histogram below
    if not buckets:
        return None, None
    groups: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    for s in buckets:
        le = s.label("le")
        bound = None if le is None else _float_bound(le)
        if bound is None or math.isnan(bound):
            return None, f"histogram {name}: bucket {s.render()} has no numeric le label; histogram dropped"
        if bound != math.inf and not abs(bound) <= MAX_SUM_S:
            return None, f"histogram {name}: bucket {s.render()} bound is outside ±1e15; histogram dropped"
        if not 0.0 <= s.value <= MAX_COUNT:
            return None, (f"histogram {name}: bucket {s.render()} count {s.value:g} is outside [0, 2^53]; "
                          f"histogram dropped")
        key = tuple(p for p in s.labels if p[0] != "le")
        groups.setdefault(key, []).append((bound, s.value))
    bounds: FloatArray | None = None
    total: FloatArray | None = None
    for key, pairs in groups.items():
        pairs.sort(key=lambda p: p[0])
        b = np.array([p[0] for p in pairs], dtype=np.float64)
        c = np.array([p[1] for p in pairs], dtype=np.float64)
        where = "{" + ",".join(f'{k}="{v}"' for k, v in key) + "}" if key else ""
        if b[-1] != math.inf:
            return None, f"histogram {name}{where}: no le=\"+Inf\" bucket; histogram dropped"
        if not bool(np.all(b[1:] > b[:-1])):  # comparisons, not differences: inf - inf is NaN
            return None, f"histogram {name}{where}: a bucket bound appears twice; histogram dropped"
        if not bool(np.all(c[1:] >= c[:-1])):
            k = int(np.flatnonzero(c[1:] < c[:-1])[0])
            return None, (f"histogram {name}{where}: cumulative counts decrease (le={b[k]:g}: {c[k]:g} > "
                          f"le={b[k + 1]:g}: {c[k + 1]:g}); histogram dropped")
        if bounds is None:
            bounds, total = b, c
        elif not np.array_equal(bounds, b):
            return None, (f"histogram {name}: label sets have different bucket bounds ({len(bounds)} vs "
                          f"{len(b)} bounds); cannot be summed, histogram dropped")
        else:
            assert total is not None
            total = total + c
    assert bounds is not None and total is not None
    sums: dict[tuple[tuple[str, str], ...], float] = {}
    for s in _selected(expo, name, "_sum"):  # one per label set
        # each term bounded: the sum below cannot overflow
        sums[s.labels] = math.nan if abs(s.value) > MAX_SUM_S else s.value
    sum_s = math.fsum(sums[k] for k in groups) * unit_s if all(k in sums for k in groups) else math.nan
    return CumulativeHistogram(upper_s=_frozen(bounds * unit_s), cumulative=_frozen(total), count=float(total[-1]),
                               sum_s=sum_s, series=len(groups)), None


def read_engine(expo: Exposition, profile: EngineProfile, *, source: str, model: str | None = None) -> EngineReading:
    """The signals of scrape ``expo`` read with ``profile`` (see the module docstring), of ``model`` alone
    when given.

    InputError (``path=source``) when a required signal (always ``running`` and ``waiting``) is
    absent: the message names the metric names tried and the engine (and the engine the page looks
    like, when another), the fix quotes ``enable_hint``; also for several models without ``model``, or
    a ``model`` the page does not serve (module docstring).
    """
    expo = one_model(expo, profile, model, source)
    dropped: list[str] = list(expo.dropped)
    read_from: dict[str, str] = {}
    missing: list[str] = []
    values: dict[str, float] = {}
    histograms: dict[str, CumulativeHistogram] = {}
    created: dict[str, Mapping[tuple[tuple[str, str], ...], float]] = {}
    starts = expo.series("process_start_time_seconds")

    def absent(signal: str, why: str = "") -> None:
        if signal in profile.required:
            names = ", ".join(profile.names_of(signal))
            other = looks_like(expo, profile)
            found = detect_engine(expo) if other else None
            fix = (f"use --engine {found} (or check that this is a {profile.title} metrics endpoint)" if found
                   else profile.enable_hint or f"check that this is a {profile.title} metrics endpoint")
            raise InputError(f"{profile.title} ({profile.name}) scrape has no {signal} metric: tried {names}"
                             + (f"; {why}" if why else "") + other, path=source, fix=fix)
        missing.append(signal)

    for signal in ("running", "waiting", "kv_usage", "max_concurrency", "busy_seconds"):
        names = profile.names_of(signal)
        if not names:
            continue
        hit = _first(expo, names, dropped)
        if hit is None:
            absent(signal)
            continue
        name, got = hit
        lo, hi = VALUE_RANGES[signal]
        kept = tuple(s for s in got if lo <= s.value <= hi)
        if len(kept) < len(got):
            bad = [s for s in got if not lo <= s.value <= hi]
            dropped.extend(f"{s.render()}: {s.value:g} is outside [{lo:g}, {hi:g}]; series dropped" for s in bad)
            if not kept:
                absent(signal, dropped[-1])
                continue
        read_from[signal] = name
        if signal == "busy_seconds":
            if stamps := _created(expo, name, histogram=False):
                created[signal] = MappingProxyType(stamps)
        # Every term is within its range: the sum cannot overflow.
        values[signal] = max(s.value for s in kept) if signal == "kv_usage" else math.fsum(s.value for s in kept)
    for signal in HISTOGRAM_SIGNALS:
        spec: HistogramSpec | None = getattr(profile, signal)
        if spec is None:
            continue
        found = False
        for family in spec.names:
            hist, why = assemble_histogram(expo, family, spec.unit_s)
            if hist is None and why is None:
                continue
            found = True
            if hist is None:
                assert why is not None
                dropped.append(why)
                absent(signal, why)
            else:
                histograms[signal] = hist
                read_from[signal] = family
                if stamps := _created(expo, family, histogram=True):
                    created[signal] = MappingProxyType(stamps)
            break
        if not found:
            absent(signal)
    mc = values.get("max_concurrency")
    max_conc: int | None = None
    if mc is not None:
        if mc >= 1:
            max_conc = int(round(mc))
        else:
            dropped.append(f"{read_from['max_concurrency']}: max concurrency {mc:g} < 1; not used")
            missing.append("max_concurrency")
    busy = values.get("busy_seconds")
    asleep = read_sleep_state(expo, profile.sleep_state, dropped) if profile.sleep_state else None
    return EngineReading(
        engine=profile.name, running=values["running"], waiting=values["waiting"],
        kv_usage_ratio=values.get("kv_usage"), max_concurrency=max_conc,
        busy_s_total=None if busy is None else busy * profile.busy_unit_s,
        histograms=MappingProxyType(histograms), read_from=MappingProxyType(read_from),
        missing=tuple(dict.fromkeys(missing)), dropped=tuple(dict.fromkeys(dropped)), source=source,
        started_s=max(s.value for s in starts) if starts else None, created=MappingProxyType(created),
        asleep=asleep, model=model)


def parse_engine_text(text: str | bytes, profile: EngineProfile | None, *, source: str) -> Exposition:
    """:func:`parse_exposition`; a text that is not exposition at all is an InputError whose fix also
    quotes the profile's ``enable_hint`` (when a profile is known)."""
    try:
        return parse_exposition(text, source=source)
    except InputError as exc:
        if profile is None or not profile.enable_hint or exc.fix is None:
            raise
        what = str(exc).removesuffix(f" (fix: {exc.fix})").removeprefix(f"{exc.path}: ")
        raise InputError(what, path=source, fix=f"{exc.fix}; for {profile.title}: {profile.enable_hint}") from None


def read_engine_text(text: str | bytes, profile: EngineProfile, *, source: str, model: str | None = None) -> EngineReading:
    """:func:`parse_engine_text` then :func:`read_engine` (of ``model`` alone when given)."""
    return read_engine(parse_engine_text(text, profile, source=source), profile, source=source, model=model)


@dataclass(frozen=True, eq=False)
class LatencyDelta:
    """Observations of one latency histogram during one interval."""

    upper_ms: FloatArray
    """Bucket upper bounds (ms), ascending, the last = inf."""
    counts: FloatArray
    """Observations per bucket in the interval (not cumulative; all >= 0)."""
    count: float

    def quantile_ms(self, q: float) -> float:
        """The upper bound (ms) of the bucket holding rank ``q·count``: never below the true quantile.

        inf when that bucket is ``+Inf``; NaN when the interval has no observation. q=0 gives the
        bucket of the smallest observation. ValueError for q outside [0, 1].
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q!r}")
        if not self.count > 0:
            return math.nan
        cum = np.cumsum(self.counts)
        rank = q * self.count
        if rank <= 0:
            idx = int(np.flatnonzero(self.counts > 0)[0])
        else:
            idx = min(int(np.searchsorted(cum, rank, side="left")), len(cum) - 1)
        return float(self.upper_ms[idx])


@dataclass(frozen=True)
class EngineInterval:
    """What changed between two scrapes of one endpoint."""

    dt_s: float
    busy_ratio: float | None
    """Δbusy_s / dt_s clamped to [0, 1]; None without the counter in both or after a reset."""
    latency: Mapping[str, LatencyDelta]
    """Per histogram signal present in both scrapes and not reset."""
    resets: tuple[str, ...]
    """Counter signals reset in the interval (see the module docstring): dropped."""


def interval(prev: EngineReading, cur: EngineReading, dt_s: float) -> EngineInterval:
    """The interval from ``prev`` to ``cur`` (``dt_s`` seconds apart; ValueError unless > 0 and finite,
    or if the readings are of different engines)."""
    if not (isinstance(dt_s, (int, float)) and math.isfinite(dt_s) and dt_s > 0):
        raise ValueError(f"dt_s must be a finite number > 0, got {dt_s!r}")
    if prev.engine != cur.engine or prev.model != cur.model:
        raise ValueError(f"readings of different engines or models: {prev.engine!r}/{prev.model!r} then "
                         f"{cur.engine!r}/{cur.model!r}")
    resets: list[str] = []
    restarted = prev.started_s is not None and cur.started_s is not None and prev.started_s != cur.started_s

    def recreated(signal: str) -> bool:
        """The process restarted, or a label set's ``_created`` stamp changed or vanished."""
        if restarted:
            return True
        p, c = prev.created.get(signal), cur.created.get(signal)
        return p is not None and c is not None and any(c.get(k) != v for k, v in p.items())

    busy: float | None = None
    if prev.busy_s_total is not None and cur.busy_s_total is not None:
        d = cur.busy_s_total - prev.busy_s_total
        if d < 0 or recreated("busy_seconds"):
            resets.append("busy_seconds")
        else:
            busy = min(1.0, max(0.0, d / dt_s))
    latency: dict[str, LatencyDelta] = {}
    for key, c in cur.histograms.items():
        p = prev.histograms.get(key)
        if p is None:
            continue
        if not np.array_equal(p.upper_s, c.upper_s) or recreated(key):
            resets.append(key)
            continue
        dc = c.cumulative - p.cumulative
        per = np.diff(dc, prepend=0.0)
        if bool(np.any(dc < 0)) or bool(np.any(per < 0)):
            resets.append(key)
            continue
        latency[key] = LatencyDelta(upper_ms=_frozen(c.upper_s * 1e3), counts=_frozen(per), count=float(dc[-1]))
    return EngineInterval(dt_s=float(dt_s), busy_ratio=busy, latency=MappingProxyType(latency), resets=tuple(resets))
