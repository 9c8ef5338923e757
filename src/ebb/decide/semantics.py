"""L2 — workload-semantic weighting, vetoes and candidate ranking (SPEC §3.3, note §3.2).

Pure: snapshots in, values out; no clocks (staleness arrives measured), no I/O.

Weight recalibration (:func:`recalibrate_weight`), with base weight ``b``, elasticity ``α ≥ 0``,
observed latency ``p`` and its SLO ``s``::

    target = b · (1 + 0.2 · p/s)   if p > s     (the note: b · (1 + 0.2 · rt99/800) past 800 ms)
    target = b                     otherwise
    new    = prev + (target − prev) / (1 + α)

Guarantees: for a constant target the error shrinks by exactly ``α/(1+α)`` per step, so the
sequence converges monotonically and never overshoots (every step lies between ``prev`` and
``target``). Order fulfilment (α = 1.2) closes 95 % of a gap in 5 steps (0.545⁵ = 0.048);
offline training (α = 0.3) in 3 steps (0.231³ = 0.012). Unknown latency (NaN) keeps ``prev``:
there is no evidence to move on, and :func:`veto` already blocks scale-down on unknown latency.
The target jumps from ``b`` to ``1.2·b`` as ``p`` crosses ``s``: that is the note's rule, and α
turns the jump into a ramp.

Veto (:func:`veto`) is fail-safe and monotone: any unknown input vetoes, and raising latency or
staleness never removes a veto. Ranking (:func:`rank_candidates`) orders by lowest weight, then
most headroom ``1 − latency/SLO``; vetoed workloads stay in the list, marked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ebb.config.workloads import WorkloadClass

__all__ = ["DEFAULT_MAX_STALENESS_S", "BREACH_CAP_RATIO", "BREACH_SLOPE", "Candidate", "WorkloadSignals", "calm_weight",
           "headroom", "rank_candidates", "recalibrate_weight", "target_weight", "veto"]

#: Slope of the note's linear weight growth past the SLO: target = base · (1 + 0.2 · p/slo).
BREACH_SLOPE = 0.2

#: Latency past this multiple of the SLO counts as this multiple: the weight's growth stops at
#: ``base · (1 + 0.2 · 10) = 3 · base``. A histogram whose observations all fall in its ``+Inf``
#: bucket (an overload: every TTFT above the top bound, 60 s) reads as P99 = inf; that is a breach
#: to surge on, not a number to compute with.
BREACH_CAP_RATIO = 10.0

#: Signals older than this veto scale-down. Two L1 windows (2 × 1 s): older data no longer
#: describes the window the burst detector judged, and the note's 30–60 s metric lag is exactly
#: the failure this rule exists to refuse.
DEFAULT_MAX_STALENESS_S = 2.0


def target_weight(cls: WorkloadClass, latency_ms: float, latency_slo_ms: float) -> float:
    """The undamped weight: ``base · (1 + 0.2 · p/slo)`` when ``p > slo``, else ``base``."""
    if not latency_slo_ms > 0:
        raise ValueError(f"latency_slo_ms must be > 0, got {latency_slo_ms!r}")
    if latency_ms > latency_slo_ms:  # NaN compares False → base
        return cls.base_weight * (1.0 + BREACH_SLOPE * latency_ms / latency_slo_ms)
    return cls.base_weight


def recalibrate_weight(cls: WorkloadClass, prev_weight: float, latency_p99_ms: float,
                       latency_slo_ms: float) -> float:
    """One damped step: ``prev + (target − prev) / (1 + α)``; NaN latency keeps ``prev``; latency
    above :data:`BREACH_CAP_RATIO` × SLO (``+inf`` included) counts as that multiple."""
    if not math.isfinite(prev_weight) or prev_weight < 0:
        raise ValueError(f"prev_weight must be finite and >= 0, got {prev_weight!r}")
    if not cls.alpha >= 0:
        raise ValueError(f"class {cls.name!r} has alpha {cls.alpha!r}; need alpha >= 0")
    if math.isnan(latency_p99_ms):
        return prev_weight
    if latency_p99_ms < 0:
        raise ValueError(f"latency_p99_ms must be >= 0, got {latency_p99_ms!r}")
    target = target_weight(cls, min(latency_p99_ms, BREACH_CAP_RATIO * latency_slo_ms), latency_slo_ms)
    return prev_weight + (target - prev_weight) / (1.0 + cls.alpha)


def calm_weight(cls: WorkloadClass, prev_weight: float, steps: int) -> float:
    """:func:`recalibrate_weight` ``steps`` times with the latency within its SLO (the target is the
    base weight): the same float operations, one step after another."""
    weight, base, damping = prev_weight, cls.base_weight, 1.0 + cls.alpha
    for _ in range(steps):
        weight = weight + (base - weight) / damping
    return weight


@dataclass(frozen=True)
class WorkloadSignals:
    """What L2 knows about one workload at one tick (all measured, never assumed)."""

    workload: str
    """Workload name (unique in a snapshot)."""
    class_name: str
    """Name of its :class:`~ebb.config.workloads.WorkloadClass`."""
    replicas: int
    """Replicas that exist now, ready or not."""
    ready_replicas: int
    """Replicas passing readiness now."""
    latency_p99_ms: float
    """Windowed P99 latency (ms); NaN = unknown (vetoes when the class has a P99 SLO)."""
    latency_p95_ms: float
    """Windowed P95 latency (ms); NaN = unknown (vetoes when the class has a P95 SLO)."""
    success_ratio: float
    """Share of requests that succeeded in the window (fraction); NaN = unknown."""
    burst_active: bool
    """L1 has a declared burst for this workload right now."""
    utilisation_ratio: float
    """Mean utilisation of its replicas (fraction); NaN = unknown. Ranks SLO-less classes."""
    staleness_s: float
    """Age of the newest sample behind these signals (s); NaN = unknown (vetoes)."""


def _latency_checks(cls: WorkloadClass, s: WorkloadSignals) -> list[tuple[str, float, float]]:
    out: list[tuple[str, float, float]] = []
    if cls.p99_latency_ms is not None:
        out.append(("p99", s.latency_p99_ms, cls.p99_latency_ms))
    if cls.p95_latency_ms is not None:
        out.append(("p95", s.latency_p95_ms, cls.p95_latency_ms))
    return out


def veto(cls: WorkloadClass, signals: WorkloadSignals,
         max_staleness_s: float = DEFAULT_MAX_STALENESS_S) -> tuple[str, ...]:
    """Every reason this workload must not be scaled down now; empty = scale-down allowed.

    Checks, in this order: stale or unknown data; each latency SLO (unknown, or ≥ ``veto_margin``
    of the SLO); success ratio unknown or below its floor; an active burst; replicas at or
    below ``min_replicas``.
    """
    if signals.class_name != cls.name:
        raise ValueError(f"signals of {signals.workload!r} are for class {signals.class_name!r}, "
                         f"not {cls.name!r}")
    reasons: list[str] = []
    if not signals.staleness_s <= max_staleness_s:  # NaN → stale: fail safe
        reasons.append(f"stale data: {signals.staleness_s:g} s old > {max_staleness_s:g} s allowed")
    for q, value, slo in _latency_checks(cls, signals):
        if math.isnan(value):
            reasons.append(f"{q} latency unknown (fail safe)")
        elif value >= cls.veto_margin * slo:
            reasons.append(f"{q} latency {value:g} ms >= {cls.veto_margin:.0%} of SLO {slo:g} ms")
    if cls.success_rate_min is not None:
        if math.isnan(signals.success_ratio):
            reasons.append("success rate unknown (fail safe)")
        elif signals.success_ratio < cls.success_rate_min:
            reasons.append(f"success rate {signals.success_ratio:.4%} < floor "
                           f"{cls.success_rate_min:.4%}")
    if signals.burst_active:
        reasons.append("burst active (L1)")
    if signals.replicas <= cls.min_replicas:
        reasons.append(f"replicas {signals.replicas} <= min_replicas {cls.min_replicas}")
    return tuple(reasons)


def headroom(cls: WorkloadClass, signals: WorkloadSignals) -> float:
    """``1 − latency/SLO`` on the class's governing SLO (P99, else P95); for classes with no
    latency SLO, ``1 − utilisation``. NaN when the input is unknown. Larger = safer to shrink."""
    slo = cls.latency_slo
    if slo is None:
        return 1.0 - signals.utilisation_ratio
    value = signals.latency_p99_ms if slo[0] == "p99" else signals.latency_p95_ms
    return 1.0 - value / slo[1]


@dataclass(frozen=True)
class Candidate:
    """One workload considered for scale-down, with its rank inputs and vetoes."""

    workload: str
    """Workload name."""
    class_name: str
    """Its class."""
    weight: float
    """Current (recalibrated) weight; lower = scaled down first."""
    headroom: float
    """See :func:`headroom`; NaN = unknown (ranks last among equal weights)."""
    vetoes: tuple[str, ...]
    """Reasons from :func:`veto`; empty = eligible."""
    reason: str
    """One line explaining the rank or the veto, for decision logs."""

    @property
    def vetoed(self) -> bool:
        """True when any veto applies; consumers must skip such candidates."""
        return bool(self.vetoes)


def rank_candidates(classes: Iterable[WorkloadClass], signals: Iterable[WorkloadSignals],
                    weights: Mapping[str, float],
                    max_staleness_s: float = DEFAULT_MAX_STALENESS_S) -> list[Candidate]:
    """All workloads ordered by (lowest weight, most headroom, name), vetoed ones marked.

    ``weights`` maps workload name → current weight; a missing entry uses the class's
    ``base_weight`` (a workload seen for the first time starts at rest).
    """
    by_name: dict[str, WorkloadClass] = {}
    for c in classes:
        if c.name in by_name:
            raise ValueError(f"duplicate workload class {c.name!r}")
        by_name[c.name] = c
    out: list[Candidate] = []
    seen: set[str] = set()
    for s in signals:
        if s.workload in seen:
            raise ValueError(f"duplicate signals for workload {s.workload!r}")
        seen.add(s.workload)
        cls = by_name.get(s.class_name)
        if cls is None:
            raise ValueError(f"workload {s.workload!r} has unknown class {s.class_name!r}; "
                             f"known: {sorted(by_name)}")
        w = float(weights.get(s.workload, cls.base_weight))
        if not math.isfinite(w):
            raise ValueError(f"weight of {s.workload!r} must be finite, got {w!r}")
        h = headroom(cls, s)
        vetoes = veto(cls, s, max_staleness_s)
        if vetoes:
            reason = f"vetoed: {'; '.join(vetoes)}"
        else:
            reason = f"eligible: weight {w:.4g} ({cls.name}), headroom {h:.1%}"
        out.append(Candidate(s.workload, cls.name, w, h, vetoes, reason))
    # NaN headroom sorts after every known headroom of the same weight (unknown = least safe)
    out.sort(key=lambda c: (c.weight, -c.headroom if not math.isnan(c.headroom) else math.inf,
                            c.workload))
    return out
