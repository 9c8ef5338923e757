"""L2 for a whole fleet at once: weights, vetoes, headroom and rank order as numpy over N workloads.

The scalar rules live in :mod:`ebb.decide.semantics` (:func:`~ebb.decide.semantics.recalibrate_weight`,
:func:`~ebb.decide.semantics.veto`, :func:`~ebb.decide.semantics.headroom`,
:func:`~ebb.decide.semantics.rank_candidates`); :func:`rank_fleet` applies the same formulas to
arrays of length N, with no Python loop per workload (issue #17 item 4). As in the scalar module,
recalibrating a weight (:func:`recalibrate_fleet`, each workload's L1 does it once per decision) and
ranking at the current weights (:func:`rank_fleet`, the fleet step does it,
:mod:`ebb.decide.fleet_step`) are separate: the weight is recalibrated in exactly one place.

Guarantees (property-tested against the scalar functions, element by element):

* ``recalibrate_fleet(...)[i] == recalibrate_weight(cls_i, prev_weight[i], latency_ms[i],
  latency_slo_ms[i])`` bit for bit: the same float64 operations in the same order, the latency
  capped at :data:`~ebb.decide.semantics.BREACH_CAP_RATIO` × SLO, NaN latency keeping ``prev_weight``.
* ``veto_code[i]`` (:func:`veto_fleet`) has exactly the bits (:data:`VETO_BITS`) of the reasons ``veto`` returns, in
  the same checks; ``vetoed = veto_code != 0``. :func:`veto_reasons` turns a code back into words.
* ``headroom[i] == headroom(cls_i, signals_i)`` (NaN where unknown).
* ``order`` is :func:`rank_candidates`' order at the given weights: lowest weight, then most
  headroom (NaN last, as is ``-inf``), then name — or index when no names are given (give names
  ``w00000, w00001, …`` and the two agree).

Class parameters travel as per-workload columns (:class:`FleetClasses`; build them from
:class:`~ebb.config.workloads.WorkloadClass` objects with :meth:`FleetClasses.of`); an absent SLO
or floor is NaN. Bad arguments raise :class:`ValueError` naming the column and the first bad
workload index, where the scalar functions would raise too. Cost: O(N log N) for the sort, the
rest O(N); about 1 ms for N = 10,000 on one core.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.config.workloads import WorkloadClass
from ebb.decide.columns import column
from ebb.decide.semantics import BREACH_CAP_RATIO, BREACH_SLOPE, DEFAULT_MAX_STALENESS_S

__all__ = ["FleetClasses", "FleetRank", "VETO_BITS", "VETO_BURST", "VETO_MIN_REPLICAS",
           "VETO_P95_HIGH", "VETO_P95_UNKNOWN", "VETO_P99_HIGH", "VETO_P99_UNKNOWN", "VETO_STALE",
           "VETO_SUCCESS_LOW", "VETO_SUCCESS_UNKNOWN", "rank_fleet", "recalibrate_fleet", "veto_fleet",
           "veto_reasons"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

VETO_STALE = 1
"""Staleness unknown or above ``max_staleness_s``."""
VETO_P99_UNKNOWN = 2
"""The class has a P99 SLO and P99 is NaN."""
VETO_P99_HIGH = 4
"""P99 ≥ ``veto_margin`` × P99 SLO."""
VETO_P95_UNKNOWN = 8
"""The class has a P95 SLO and P95 is NaN."""
VETO_P95_HIGH = 16
"""P95 ≥ ``veto_margin`` × P95 SLO."""
VETO_SUCCESS_UNKNOWN = 32
"""The class has a success floor and the success ratio is NaN."""
VETO_SUCCESS_LOW = 64
"""Success ratio below the class's floor."""
VETO_BURST = 128
"""L1 declared a burst."""
VETO_MIN_REPLICAS = 256
"""Replicas at or below ``min_replicas``."""

#: Each veto bit with its words, in the order :func:`~ebb.decide.semantics.veto` checks them.
VETO_BITS: tuple[tuple[int, str], ...] = (
    (VETO_STALE, "stale data"),
    (VETO_P99_UNKNOWN, "p99 latency unknown (fail safe)"),
    (VETO_P99_HIGH, "p99 latency >= veto margin of SLO"),
    (VETO_P95_UNKNOWN, "p95 latency unknown (fail safe)"),
    (VETO_P95_HIGH, "p95 latency >= veto margin of SLO"),
    (VETO_SUCCESS_UNKNOWN, "success rate unknown (fail safe)"),
    (VETO_SUCCESS_LOW, "success rate below floor"),
    (VETO_BURST, "burst active (L1)"),
    (VETO_MIN_REPLICAS, "replicas <= min_replicas"),
)


def veto_reasons(code: int) -> tuple[str, ...]:
    """The words for every bit set in ``code``, in the scalar check order; () for 0."""
    return tuple(words for bit, words in VETO_BITS if int(code) & bit)


def _floats(v: npt.ArrayLike, n: int, name: str) -> FloatArray:
    return column(v, n, name, np.float64)


def _ints(v: npt.ArrayLike, n: int, name: str) -> IntArray:
    return column(v, n, name, np.int64)


def _bools(v: npt.ArrayLike, n: int, name: str) -> BoolArray:
    return column(v, n, name, np.bool_)


def _fail(name: str, bad: BoolArray, values: npt.NDArray[np.generic], need: str) -> None:
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be {need}; workload {i} has {values[i]!r}")


@dataclass(frozen=True)
class FleetClasses:
    """Each workload's class parameters as columns of length N (see
    :class:`~ebb.config.workloads.WorkloadClass` for units and meaning)."""

    base_weight: FloatArray
    """Weight at rest (> 0)."""
    alpha: FloatArray
    """Elasticity α (≥ 0)."""
    p99_slo_ms: FloatArray
    """P99 latency SLO (ms); NaN = the class has none."""
    p95_slo_ms: FloatArray
    """P95 latency SLO (ms); NaN = the class has none."""
    success_rate_min: FloatArray
    """Success-ratio floor (fraction); NaN = the class has none."""
    veto_margin: FloatArray
    """Fraction of each latency SLO at which scale-down is vetoed."""
    min_replicas: IntArray
    """Never scale below this many replicas."""

    def __len__(self) -> int:
        return int(self.base_weight.shape[0])

    @classmethod
    def of(cls, classes: Sequence[WorkloadClass], index: npt.ArrayLike) -> FleetClasses:
        """Columns for workloads whose class is ``classes[index[i]]``."""
        idx = np.asarray(index, dtype=np.int64)
        if idx.ndim != 1:
            raise ValueError(f"index must be 1-D, got shape {idx.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= len(classes)):
            raise ValueError(f"index must lie in [0, {len(classes)}), got {idx.min()}..{idx.max()}")

        def table(values: list[float | None]) -> FloatArray:
            return np.array([np.nan if v is None else v for v in values], dtype=np.float64)[idx]

        return cls(base_weight=table([c.base_weight for c in classes]),
                   alpha=table([c.alpha for c in classes]),
                   p99_slo_ms=table([c.p99_latency_ms for c in classes]),
                   p95_slo_ms=table([c.p95_latency_ms for c in classes]),
                   success_rate_min=table([c.success_rate_min for c in classes]),
                   veto_margin=table([c.veto_margin for c in classes]),
                   min_replicas=np.array([c.min_replicas for c in classes], dtype=np.int64)[idx])

    @classmethod
    def guarding(cls, *, base_weight: npt.ArrayLike, alpha: npt.ArrayLike, veto_margin: npt.ArrayLike,
                 slo_ms: npt.ArrayLike, min_replicas: npt.ArrayLike) -> FleetClasses:
        """Columns of serving workloads as a fleet step ranks them, live and simulated alike: each
        one's class weight, α and veto margin, its own latency SLO (``slo_ms``: the TTFT SLO its
        policy guards) as the P99 bound, no P95 bound and no success floor (neither loop measures a
        success ratio per cycle), its replica floor. Scalars broadcast to the longest column."""
        cols = np.broadcast_arrays(np.asarray(base_weight, dtype=np.float64), np.asarray(alpha, dtype=np.float64),
                                   np.asarray(veto_margin, dtype=np.float64), np.asarray(slo_ms, dtype=np.float64),
                                   np.asarray(min_replicas, dtype=np.int64))
        b, a, m, slo, mn = (np.array(c) for c in cols)
        none = np.full(b.shape, np.nan)
        return cls(base_weight=b, alpha=a, p99_slo_ms=slo, p95_slo_ms=none, success_rate_min=none.copy(),
                   veto_margin=m, min_replicas=mn.astype(np.int64))

    def workload_class(self, i: int, name: str = "c") -> WorkloadClass:
        """Workload ``i``'s columns as a scalar :class:`~ebb.config.workloads.WorkloadClass` (for the
        words of :func:`~ebb.decide.semantics.veto`)."""
        def opt(v: float) -> float | None:
            return None if np.isnan(v) else float(v)
        return WorkloadClass(name=name, base_weight=float(self.base_weight[i]), alpha=float(self.alpha[i]),
                             p99_latency_ms=opt(self.p99_slo_ms[i]), p95_latency_ms=opt(self.p95_slo_ms[i]),
                             success_rate_min=opt(self.success_rate_min[i]), veto_margin=float(self.veto_margin[i]),
                             min_replicas=int(self.min_replicas[i]))


@dataclass(frozen=True)
class FleetRank:
    """One L2 cycle over N workloads (arrays of length N, indexed by workload)."""

    weight: FloatArray
    """Recalibrated weight (lower = scaled down first)."""
    headroom: FloatArray
    """``1 − latency/SLO`` on the governing SLO, else ``1 − utilisation``; NaN = unknown."""
    veto_code: IntArray
    """Bitwise OR of the :data:`VETO_BITS` that apply; 0 = eligible."""
    vetoed: BoolArray
    """``veto_code != 0``: L3 must grant these nothing."""
    order: IntArray
    """Workload indices in rank order (a permutation of ``range(N)``): the first is shrunk first."""

    def reasons(self, i: int) -> tuple[str, ...]:
        """Veto reasons of workload ``i`` in words; () when eligible."""
        return veto_reasons(int(self.veto_code[i]))


def recalibrate_fleet(classes: FleetClasses, *, prev_weight: npt.ArrayLike, latency_ms: npt.ArrayLike,
                      latency_slo_ms: npt.ArrayLike) -> FloatArray:
    """One damped weight step for N workloads: :func:`~ebb.decide.semantics.recalibrate_weight`
    element by element, bit for bit (module docstring). Scalars broadcast to N."""
    n = len(classes)
    prev = _floats(prev_weight, n, "prev_weight")
    lat = _floats(latency_ms, n, "latency_ms")
    slo = _floats(latency_slo_ms, n, "latency_slo_ms")
    c = classes
    _check_columns(c, n)
    _fail("prev_weight", ~(np.isfinite(prev) & (prev >= 0)), prev, "finite and >= 0")
    _fail("alpha", ~(c.alpha >= 0), c.alpha, ">= 0")
    known = ~np.isnan(lat)
    _fail("latency_ms", known & (lat < 0), lat, ">= 0 or NaN")
    _fail("latency_slo_ms", known & ~(slo > 0), slo, "> 0 where latency is known")
    capped = np.minimum(lat, BREACH_CAP_RATIO * slo)
    breach = capped > slo  # NaN compares False
    with np.errstate(invalid="ignore", divide="ignore"):
        target = np.where(breach, c.base_weight * (1.0 + BREACH_SLOPE * capped / slo), c.base_weight)
        stepped = prev + (target - prev) / (1.0 + c.alpha)
    out: FloatArray = np.where(known, stepped, prev)
    return out


def _check_columns(c: FleetClasses, n: int) -> None:
    for name, arr in (("base_weight", c.base_weight), ("alpha", c.alpha), ("p99_slo_ms", c.p99_slo_ms),
                      ("p95_slo_ms", c.p95_slo_ms), ("success_rate_min", c.success_rate_min),
                      ("veto_margin", c.veto_margin), ("min_replicas", c.min_replicas)):
        if arr.shape != (n,):
            raise ValueError(f"classes.{name} must have shape ({n},), got {arr.shape}")


def veto_fleet(classes: FleetClasses, *, staleness_s: npt.ArrayLike, success_ratio: npt.ArrayLike,
               burst_active: npt.ArrayLike, replicas: npt.ArrayLike, latency_p99_ms: npt.ArrayLike,
               latency_p95_ms: npt.ArrayLike | None = None,
               max_staleness_s: float = DEFAULT_MAX_STALENESS_S) -> IntArray:
    """The :data:`VETO_BITS` of every workload: :func:`~ebb.decide.semantics.veto`, check by check
    (0 = a scale-down is allowed). Scalars broadcast to N; P95 defaults to the P99 column."""
    n = len(classes)
    stale = _floats(staleness_s, n, "staleness_s")
    success = _floats(success_ratio, n, "success_ratio")
    burst = _bools(burst_active, n, "burst_active")
    reps = _ints(replicas, n, "replicas")
    p99 = _floats(latency_p99_ms, n, "latency_p99_ms")
    p95 = p99 if latency_p95_ms is None else _floats(latency_p95_ms, n, "latency_p95_ms")
    c = classes
    _check_columns(c, n)
    code = np.where(~(stale <= max_staleness_s), VETO_STALE, 0)
    has99, has95 = ~np.isnan(c.p99_slo_ms), ~np.isnan(c.p95_slo_ms)
    nan99, nan95 = np.isnan(p99), np.isnan(p95)
    code |= np.where(has99 & nan99, VETO_P99_UNKNOWN, 0)
    code |= np.where(has99 & ~nan99 & (p99 >= c.veto_margin * c.p99_slo_ms), VETO_P99_HIGH, 0)
    code |= np.where(has95 & nan95, VETO_P95_UNKNOWN, 0)
    code |= np.where(has95 & ~nan95 & (p95 >= c.veto_margin * c.p95_slo_ms), VETO_P95_HIGH, 0)
    has_floor, nan_success = ~np.isnan(c.success_rate_min), np.isnan(success)
    code |= np.where(has_floor & nan_success, VETO_SUCCESS_UNKNOWN, 0)
    code |= np.where(has_floor & ~nan_success & (success < c.success_rate_min), VETO_SUCCESS_LOW, 0)
    code |= np.where(burst, VETO_BURST, 0)
    code |= np.where(reps <= c.min_replicas, VETO_MIN_REPLICAS, 0)
    out: IntArray = code.astype(np.int64)
    return out


def rank_fleet(classes: FleetClasses, *, weight: npt.ArrayLike, staleness_s: npt.ArrayLike,
               success_ratio: npt.ArrayLike, burst_active: npt.ArrayLike, replicas: npt.ArrayLike,
               latency_p99_ms: npt.ArrayLike, latency_p95_ms: npt.ArrayLike | None = None,
               utilisation_ratio: npt.ArrayLike | None = None,
               names: Sequence[str] | None = None,
               max_staleness_s: float = DEFAULT_MAX_STALENESS_S) -> FleetRank:
    """Veto and rank N workloads at their current weights (module docstring for the guarantees).

    ``weight`` is taken as given, as :func:`~ebb.decide.semantics.rank_candidates` takes its
    ``weights``: each workload's policy recalibrates its own (:func:`recalibrate_fleet` is the
    vectorised step). ``latency_p99_ms``/``latency_p95_ms`` drive vetoes and headroom against the
    class SLOs (P95 defaults to the P99 column: the workload's latency at its class's percentile).
    ``utilisation_ratio`` (default unknown, NaN) gives the headroom of classes without a latency
    SLO. Scalars broadcast to N.
    """
    n = len(classes)
    w = _floats(weight, n, "weight")
    stale = _floats(staleness_s, n, "staleness_s")
    success = _floats(success_ratio, n, "success_ratio")
    burst = _bools(burst_active, n, "burst_active")
    reps = _ints(replicas, n, "replicas")
    p99 = _floats(latency_p99_ms, n, "latency_p99_ms")
    p95 = p99 if latency_p95_ms is None else _floats(latency_p95_ms, n, "latency_p95_ms")
    util = np.full(n, np.nan) if utilisation_ratio is None else _floats(utilisation_ratio, n,
                                                                          "utilisation_ratio")
    c = classes
    _check_columns(c, n)
    _fail("weight", ~np.isfinite(w), w, "finite")

    code = veto_fleet(c, staleness_s=stale, success_ratio=success, burst_active=burst, replicas=reps,
                      latency_p99_ms=p99, latency_p95_ms=p95, max_staleness_s=max_staleness_s)
    has99, has95 = ~np.isnan(c.p99_slo_ms), ~np.isnan(c.p95_slo_ms)

    # -- headroom: governing SLO (P99, else P95), else utilisation ---------------------------------
    with np.errstate(invalid="ignore", divide="ignore"):
        head = np.where(has99, 1.0 - p99 / c.p99_slo_ms,
                        np.where(has95, 1.0 - p95 / c.p95_slo_ms, 1.0 - util))

    # -- order: (weight, -headroom with NaN → +inf, name or index) --------------------------------
    if names is None:
        tie = np.arange(n, dtype=np.int64)
    else:
        if len(names) != n:
            raise ValueError(f"names must have {n} entries, got {len(names)}")
        labels = np.asarray(names, dtype=str)
        by_name = np.argsort(labels, kind="stable")
        if n > 1 and np.any(labels[by_name[1:]] == labels[by_name[:-1]]):
            raise ValueError("names must be unique")
        tie = np.empty(n, dtype=np.int64)
        tie[by_name] = np.arange(n, dtype=np.int64)
    key = np.where(np.isnan(head), np.inf, -head)
    order = np.lexsort((tie, key, w)).astype(np.int64)
    return FleetRank(weight=w, headroom=head, veto_code=code, vetoed=code != 0, order=order)
