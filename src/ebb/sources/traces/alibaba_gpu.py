"""Reader for Alibaba's GPU-sharing cluster trace 2023 (``alibaba/clusterdata`` ``cluster-trace-gpu-v2023``).

Two files, both headed CSV (ATC '23 "Beware of Fragmentation"; research-or-study use):

* ``openb_pod_list_default.csv``, one pod per row::

      name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time

  ``num_gpu`` GPUs of which each is requested at ``gpu_milli`` thousandths (upstream: ``gpu_milli`` is the
  share of one GPU for GPU-sharing pods, ``num_gpu == 1``; whole-GPU pods give 1000). A pod therefore
  requests ``gpus = num_gpu × gpu_milli / 1000`` GPUs — the Kubernetes scheduler simulator the trace was
  published for asks for ``gpu_milli`` on each of ``num_gpu`` GPUs. Times are seconds from the trace start.
* ``openb_node_list_all_node.csv``: ``sn,cpu_milli,memory_mib,gpu,model``; :func:`gpus_per_model` sums
  ``gpu`` per ``model`` (for sizing a pool).

Guarantees:

* :func:`load_alibaba_gpu_pods` returns the file's rows in file order as read-only numpy columns
  (:class:`AlibabaPods`). An empty ``deletion_time`` (pod never deleted: alive at the end of the
  trace) and an empty ``scheduled_time`` (pod never scheduled, e.g. ``Pending``) are kept as NaN.
* Strict on what would mislead: a malformed row raises :class:`~ebb.errors.TraceFormatError` naming the
  file, the 1-based line and the fix — a missing column, a non-number, a negative, non-finite or huge
  (> :data:`MAX_TIME_S`) time, ``num_gpu`` past :data:`MAX_GPUS_PER_POD`, ``gpu_milli`` past 1000, an
  empty ``qos``, a text field past :data:`MAX_TEXT` characters, and times out of order: ``deletion_time
  < creation_time``, ``scheduled_time < creation_time`` or ``scheduled_time > deletion_time`` (the
  published file has none; such a row is refused rather than guessed at). Unreadable files raise
  :class:`~ebb.errors.InputError`; gzip is read transparently.
* No randomness: the same file and arguments always give the same arrays.

Series on a compressed clock (``time_scale``, "replay this many times faster", as ``ebb demo --live``):
every trace time ``t`` becomes ``t / time_scale`` and every duration ``d`` becomes ``d / time_scale``
(``time_scale=149`` puts the 149 days into one day, and a pod that lived 10 days lives 10/149 days).
GPU sizes are unchanged, so the number of GPUs in use at each (compressed) instant is the trace's; only
GPU-seconds shrink by ``time_scale``. ``start_s``/``end_s``/``bin_s`` are on the compressed clock, and
``end_s=None`` means the last time in the file (compressed).

* :func:`gpu_demand_series`: GPUs requested by live pods of the chosen QoS classes, per bin. A pod is
  live on ``[creation_time, deletion_time)`` (``live_from="creation"``, the default: requested GPUs, served
  or not — demand) or on ``[scheduled_time, deletion_time)`` (``live_from="scheduled"``: GPUs granted;
  never-scheduled pods count nothing). A pod without a deletion time is live to the end of the span; a
  pod deleted when created counts nothing. Each bin holds the time-average over the bin (GPU-seconds
  ÷ bin width; the last bin, cut by ``end_s``, over its own width): with integer times, ``bin_s=1`` and
  ``time_scale=1`` it is exactly the GPUs live during that second. Computed in integer milli-GPUs for
  whole bins, so no rounding drift accumulates.
* :func:`job_arrivals`: pods of the chosen classes as batch jobs — submitted at ``creation_time``,
  running ``deletion_time - scheduled_time`` (the time they held their GPUs) — with their GPU sizes and
  submissions per bin. Pods without GPUs and pods never scheduled (no run time to replay) are left out,
  counted in ``notes``; a pod without a deletion time runs to the last time in the file and is marked
  ``censored``.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from ebb.errors import InputError, TraceFormatError
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries
from ebb.sources.traces._common import FloatArray, IntArray, int_column, read_csv_table, trace_name

__all__ = ["AlibabaPods", "GpuDemand", "JobArrivals", "gpu_demand_series", "gpus_per_model", "job_arrivals",
           "load_alibaba_gpu_pods"]

StrArray = npt.NDArray[np.str_]
BoolArray = npt.NDArray[np.bool_]

POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
               "creation_time", "deletion_time", "scheduled_time")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
MAX_TIME_S = 10.0**10
"""Largest time accepted (317 years of seconds; the published trace spans 149 days): beyond it float
seconds lose their sub-millisecond resolution and a typo would stretch every series."""
MAX_GPUS_PER_POD = 1024
"""Largest ``num_gpu`` (upstream: 0 to 8) or node ``gpu`` accepted."""
MAX_TEXT = 256
"""Longest text field (name, qos, phase, GPU spec, model) accepted, in characters."""
MAX_BINS = 50_000_000
"""Most bins one series may have (400 MB of float64): the whole 149-day trace at 1 s is 12.9 M."""
LiveFrom = Literal["creation", "scheduled"]

_POD_FIX = ("an Alibaba GPU 2023 pod list needs the header "
            "'name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
            "scheduled_time' (openb_pod_list_default.csv)")
_NODE_FIX = "an Alibaba GPU 2023 node list needs the header 'sn,cpu_milli,memory_mib,gpu,model'"
_TIME_FIX = (f"times are seconds from the trace start, from 0 to {MAX_TIME_S:.0e}; "
             "leave deletion/scheduled empty if unknown")


@dataclass(frozen=True)
class AlibabaPods:
    """The pod list as columns, one index per pod, in file order (see the module for each column's rule)."""

    name: StrArray
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    gpus: FloatArray
    """GPUs requested: ``num_gpu × gpu_milli / 1000`` (0.46 for a pod sharing 46 % of one GPU)."""
    gpu_spec: StrArray
    qos: StrArray
    phase: StrArray
    creation_s: FloatArray
    deletion_s: FloatArray
    """NaN when the file gives none (the pod was alive at the end of the trace)."""
    scheduled_s: FloatArray
    """NaN when the file gives none (the pod was never scheduled)."""
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        cols = (self.name, self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.gpus, self.gpu_spec,
                self.qos, self.phase, self.creation_s, self.deletion_s, self.scheduled_s)
        if len({len(c) for c in cols}) != 1:
            raise ValueError(f"AlibabaPods columns differ in length: {[len(c) for c in cols]}")
        for c in cols:
            c.flags.writeable = False

    @property
    def pods(self) -> int:
        return int(len(self.creation_s))

    @property
    def last_time_s(self) -> float:
        """The last time in the file (creation, scheduled or deletion), in trace seconds."""
        times = np.concatenate([self.creation_s, self.deletion_s, self.scheduled_s])
        finite = times[np.isfinite(times)]
        return float(finite.max()) if len(finite) else 0.0


@dataclass(frozen=True)
class GpuDemand:
    """GPUs requested by live pods, time-averaged per bin; bin ``j`` is ``[start_s + j × bin_s, ...)`` on the
    compressed clock (see the module). ``gpus`` is read-only float64."""

    gpus: FloatArray
    bin_s: float
    start_s: float
    time_scale: float
    qos: tuple[str, ...]
    live_from: LiveFrom
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        self.gpus.flags.writeable = False

    @property
    def duration_s(self) -> float:
        return float(len(self.gpus) * self.bin_s)


@dataclass(frozen=True)
class JobArrivals:
    """Batch jobs sorted by submission: ``arrival_s`` is seconds after ``start_s`` on the compressed clock,
    ``duration_s`` the compressed run time, ``gpus`` the size; ``counts[j]`` jobs were submitted in bin ``j``."""

    arrival_s: FloatArray
    gpus: FloatArray
    duration_s: FloatArray
    censored: BoolArray
    """True where the pod had no deletion time: its run time is cut at the last time in the file."""
    phase: StrArray
    counts: IntArray
    bin_s: float
    start_s: float
    time_scale: float
    qos: tuple[str, ...]
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not (len(self.gpus) == len(self.duration_s) == len(self.censored) == len(self.phase) == n):
            raise ValueError("JobArrivals columns differ in length")
        for a in (self.arrival_s, self.gpus, self.duration_s, self.censored, self.phase, self.counts):
            a.flags.writeable = False

    @property
    def jobs(self) -> int:
        return int(len(self.arrival_s))

    def count_series(self) -> CountSeries:
        """Submissions per bin as a :class:`~ebb.model.trace.CountSeries`."""
        return CountSeries(TraceName(f"{trace_name(Path(self.source)) if self.source else 'alibaba-gpu'}-jobs"),
                           self.counts, self.bin_s, source=self.source, notes=self.notes)


def _text(values: list[str], *, what: str, path: Path, lines: list[int], required: bool = False) -> StrArray:
    """Stripped text column, each value at most :data:`MAX_TEXT` characters (and non-empty if ``required``)."""
    out = [v.strip() for v in values]
    for i, v in enumerate(out):
        if len(v) > MAX_TEXT or (required and not v):
            why = "is empty" if not v else f"is longer than {MAX_TEXT} characters"
            raise TraceFormatError(f"{what} {why}", path=str(path), line=lines[i],
                                   fix=f"give {what} as a short text (e.g. LS or BE for qos)")
    return np.array(out, dtype=np.str_) if out else np.array([], dtype="<U1")


def _times(values: list[str], *, what: str, path: Path, lines: list[int], required: bool) -> FloatArray:
    """Seconds in ``[0, MAX_TIME_S]``; an empty value is NaN unless ``required``."""
    text = [v.strip() for v in values]
    try:
        arr = np.array([t if t else "nan" for t in text], dtype=np.str_).astype(np.float64)
    except (ValueError, OverflowError):
        arr = None
    if arr is None:  # numpy refused one: find it (Python's float() is the documented rule)
        parsed: list[float] = []
        for i, t in enumerate(text):
            if not t:
                parsed.append(math.nan)
                continue
            try:
                parsed.append(float(t))
            except (ValueError, OverflowError):
                raise TraceFormatError(f"{what} {t[:40]!r} is not a number", path=str(path), line=lines[i],
                                       fix=_TIME_FIX) from None
        arr = np.array(parsed, dtype=np.float64)
    empty = np.array([not t for t in text], dtype=bool)
    bad = (~empty & ~((arr >= 0) & (arr <= MAX_TIME_S))) | (empty & required)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        why = "is empty" if empty[i] else f"{text[i][:40]!r} is not a time from 0 to {MAX_TIME_S:.0e} s"
        raise TraceFormatError(f"{what} {why}", path=str(path), line=lines[i], fix=_TIME_FIX)
    return arr


def _first(mask: BoolArray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) else None


def load_alibaba_gpu_pods(path: str | Path) -> AlibabaPods:
    """Read ``openb_pod_list_*.csv`` (plain or gzip) into :class:`AlibabaPods`."""
    p = Path(path)
    table = read_csv_table(p, expected=POD_COLUMNS, fix=_POD_FIX)
    col, lines = table.columns, table.lines

    def ints(name: str, hi: int) -> IntArray:
        return int_column(col[name], what=name, path=p, lines=lines, hi=hi,
                          fix=f"{name} must be an integer from 0 to {hi:,}")

    num_gpu, gpu_milli = ints("num_gpu", MAX_GPUS_PER_POD), ints("gpu_milli", 1000)
    created = _times(col["creation_time"], what="creation_time", path=p, lines=lines, required=True)
    deleted = _times(col["deletion_time"], what="deletion_time", path=p, lines=lines, required=False)
    scheduled = _times(col["scheduled_time"], what="scheduled_time", path=p, lines=lines, required=False)
    with np.errstate(invalid="ignore"):  # NaN compares False: a missing time is never out of order
        checks = ((deleted < created, "deletion_time is before creation_time"),
                  (scheduled < created, "scheduled_time is before creation_time"),
                  (scheduled > deleted, "scheduled_time is after deletion_time"))
    for mask, what in checks:
        i = _first(mask)
        if i is not None:
            raise TraceFormatError(f"{what} (created {created[i]:g}, scheduled {scheduled[i]:g}, "
                                   f"deleted {deleted[i]:g})", path=str(p), line=lines[i],
                                   fix="times must satisfy creation <= scheduled <= deletion; correct or drop this row")
    notes: list[str] = []
    for arr, what in ((deleted, "no deletion_time (alive at the end of the trace)"),
                      (scheduled, "no scheduled_time (never scheduled)")):
        missing = int(np.isnan(arr).sum())
        if missing:
            notes.append(f"{missing} pod(s) with {what}")
    return AlibabaPods(
        name=_text(col["name"], what="name", path=p, lines=lines),
        cpu_milli=ints("cpu_milli", 2**31 - 1), memory_mib=ints("memory_mib", 2**31 - 1),
        num_gpu=num_gpu, gpu_milli=gpu_milli, gpus=(num_gpu * gpu_milli).astype(np.float64) / 1000.0,
        gpu_spec=_text(col["gpu_spec"], what="gpu_spec", path=p, lines=lines),
        qos=_text(col["qos"], what="qos", path=p, lines=lines, required=True),
        phase=_text(col["pod_phase"], what="pod_phase", path=p, lines=lines),
        creation_s=created, deletion_s=deleted, scheduled_s=scheduled, source=str(p), notes=tuple(notes))


def gpus_per_model(path: str | Path) -> dict[str, int]:
    """Total GPUs per GPU model in ``openb_node_list_*.csv``, by model name; nodes without GPUs are left out.

    A node with GPUs but no model raises :class:`~ebb.errors.TraceFormatError` (its GPUs could not be pooled).
    """
    p = Path(path)
    table = read_csv_table(p, expected=NODE_COLUMNS, fix=_NODE_FIX)
    gpus = int_column(table.columns["gpu"], what="gpu", path=p, lines=table.lines, hi=MAX_GPUS_PER_POD,
                      fix=f"gpu must be an integer from 0 to {MAX_GPUS_PER_POD}")
    model = _text(table.columns["model"], what="model", path=p, lines=table.lines)
    totals: dict[str, int] = {}
    for i, (n, m) in enumerate(zip(gpus.tolist(), model.tolist())):
        if n == 0:
            continue
        if not m:
            raise TraceFormatError(f"a node with {n} GPU(s) has no model", path=str(p), line=table.lines[i],
                                   fix="give the node's GPU model (e.g. T4, V100M32)")
        totals[m] = totals.get(m, 0) + n
    return dict(sorted(totals.items()))


def _span(pods: AlibabaPods, qos: Collection[str] | None, start_s: float, end_s: float | None, bin_s: float,
          time_scale: float) -> tuple[BoolArray, tuple[str, ...], float, int]:
    """Validate the arguments: (pods of the classes, the classes, end on the compressed clock, bins)."""
    if not (math.isfinite(time_scale) and time_scale > 0) or not (math.isfinite(bin_s) and bin_s > 0) \
            or not (math.isfinite(start_s) and start_s >= 0):
        raise InputError(f"bad arguments: start_s={start_s!r}, bin_s={bin_s!r}, time_scale={time_scale!r}",
                         path=pods.source, fix="use start_s >= 0, bin_s > 0 and time_scale > 0")
    end = pods.last_time_s / time_scale if end_s is None else float(end_s)
    if not (math.isfinite(end) and end > start_s):
        raise InputError(f"empty span: start_s={start_s!r}, end_s={end!r} (compressed clock)", path=pods.source,
                         fix="use start_s < end_s (the trace ends at "
                             f"{pods.last_time_s / time_scale:g} s at time_scale {time_scale:g})")
    exact = (end - start_s) / bin_s
    if not exact <= MAX_BINS:  # also inf (a tiny bin_s), which math.ceil would refuse with OverflowError
        raise InputError(f"{exact:,.0f} bins of {bin_s:g} s asked for; at most {MAX_BINS:,}", path=pods.source,
                         fix="use a larger bin_s, a shorter span or a larger time_scale")
    bins = math.ceil(exact)
    present = set(pods.qos.tolist())
    if qos is None:
        return np.ones(pods.pods, dtype=bool), tuple(sorted(present)), end, bins
    if isinstance(qos, str):  # "BE" would otherwise mean {"B", "E"}
        qos = (qos,)
    classes = tuple(qos)
    unknown = [q for q in classes if q not in present]
    if unknown or not classes:
        raise InputError(f"QoS class(es) {unknown!r} not in this trace (found {', '.join(sorted(present))})",
                         path=pods.source, fix="pass qos as classes from the file, e.g. ('BE',), or None for all")
    return np.isin(pods.qos, np.array(classes, dtype=np.str_)), classes, end, bins


def gpu_demand_series(pods: AlibabaPods, *, qos: Collection[str] | None = ("BE",), start_s: float = 0.0,
                      end_s: float | None = None, bin_s: float = 1.0, time_scale: float = 1.0,
                      live_from: LiveFrom = "creation") -> GpuDemand:
    """GPUs requested by live pods of the ``qos`` classes (None: all), time-averaged per bin (see the module)."""
    if live_from not in ("creation", "scheduled"):
        raise InputError(f"live_from must be 'creation' or 'scheduled', got {live_from!r}", path=pods.source,
                         fix="pass live_from='creation' (requested) or 'scheduled' (granted)")
    chosen, classes, end, bins = _span(pods, qos, start_s, end_s, bin_s, time_scale)
    span_u = (end - start_s) / bin_s  # the span in bins (the last bin may be partial)
    begin = pods.creation_s if live_from == "creation" else pods.scheduled_s
    milli = pods.num_gpu * pods.gpu_milli
    keep = chosen & (milli > 0) & ~np.isnan(begin)
    a = (begin[keep] / time_scale - start_s) / bin_s
    b = (np.where(np.isnan(pods.deletion_s[keep]), np.inf, pods.deletion_s[keep]) / time_scale - start_s) / bin_s
    g = milli[keep]
    a, b = np.clip(a, 0.0, span_u), np.clip(b, 0.0, span_u)
    live = b > a
    a, b, g = a[live], b[live], g[live]
    whole = np.zeros(bins + 1, dtype=np.int64)  # integer milli-GPUs for whole bins, as a difference array
    part = np.zeros(bins + 1, dtype=np.float64)  # milli-GPU-bins of the partly covered bins
    i0 = np.floor(a).astype(np.int64)
    i1 = np.floor(b).astype(np.int64)
    same = i0 == i1
    np.add.at(part, i0[same], g[same] * (b[same] - a[same]))
    split = ~same
    np.add.at(part, i0[split], g[split] * (i0[split] + 1 - a[split]))
    np.add.at(part, i1[split], g[split] * (b[split] - i1[split]))
    np.add.at(whole, i0[split] + 1, g[split])
    np.subtract.at(whole, i1[split], g[split])
    level = np.cumsum(whole)[:bins].astype(np.float64) + part[:bins]
    widths = np.ones(bins, dtype=np.float64)
    if bins:
        widths[-1] = span_u - (bins - 1)  # the last bin, cut by end_s
    gpus = np.maximum(level / widths / 1000.0, 0.0)
    notes = [f"GPUs requested by live {'/'.join(classes)} pods, live from {live_from}_time to deletion_time, "
             f"time-averaged per {bin_s:g} s bin; trace time / {time_scale:g}"]
    open_ended = int((chosen & np.isnan(pods.deletion_s) & (milli > 0)).sum())
    if open_ended:
        notes.append(f"{open_ended} pod(s) without deletion_time are live to the end of the span")
    return GpuDemand(gpus, float(bin_s), float(start_s), float(time_scale), classes, live_from, source=pods.source,
                     notes=tuple(notes))


def job_arrivals(pods: AlibabaPods, *, qos: Collection[str] | None = ("BE",), start_s: float = 0.0,
                 end_s: float | None = None, bin_s: float = 1.0, time_scale: float = 1.0) -> JobArrivals:
    """GPU pods of the ``qos`` classes (None: all) submitted in ``[start_s, end_s)``, as batch jobs (see the module)."""
    chosen, classes, end, bins = _span(pods, qos, start_s, end_s, bin_s, time_scale)
    gpu = chosen & (pods.gpus > 0)
    never = gpu & np.isnan(pods.scheduled_s)
    created = pods.creation_s / time_scale
    keep = gpu & ~never & (created >= start_s) & (created < end)
    censored = np.isnan(pods.deletion_s[keep])
    stop = np.where(censored, pods.last_time_s, pods.deletion_s[keep])
    arrival = created[keep] - start_s
    order = np.argsort(arrival, kind="stable")
    arrival = arrival[order]
    counts = np.bincount(np.minimum((arrival / bin_s).astype(np.int64), max(bins - 1, 0)),
                         minlength=bins).astype(np.int64)
    notes = [f"{'/'.join(classes)} GPU pods as jobs: submitted at creation_time, running deletion_time - "
             f"scheduled_time; trace time / {time_scale:g}"]
    skipped = int((never & (created >= start_s) & (created < end)).sum())
    if skipped:
        notes.append(f"{skipped} pod(s) never scheduled left out (no run time to replay)")
    if censored.any():
        notes.append(f"{int(censored.sum())} job(s) without deletion_time run to the end of the trace (censored)")
    return JobArrivals(
        arrival_s=arrival, gpus=pods.gpus[keep][order],
        duration_s=((stop - pods.scheduled_s[keep]) / time_scale)[order], censored=censored[order],
        phase=pods.phase[keep][order], counts=counts, bin_s=float(bin_s), start_s=float(start_s),
        time_scale=float(time_scale), qos=classes, source=pods.source, notes=tuple(notes))
