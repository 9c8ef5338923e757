"""Ebb's reconcile rules past L1 — sizing up, the hold floor, lateness, the scale-down vetoes — for
one tick, and beside each the same rule over a block of ticks.

:meth:`EbbPolicy.decide <ebb.decide.policy.EbbPolicy.decide>` applies the one-tick rules;
a block of proven holds (:mod:`ebb.decide.hold_proof`) applies their twins, which answer the same
question for many ticks at once with the same float operations:

=======================  ==========================  =================================================
one tick                 many ticks                  the rule
=======================  ==========================  =================================================
:func:`bounded`          :func:`bounded_many`        a count within ``[min_replicas, max_replicas]``
:func:`grows`            :func:`grows_many`          the scale-up test: above the fleet, urgent or past
                                                     the hysteresis
:func:`hold_floor`       :func:`hold_floors`         the fleet a scale-down may not go below
:func:`late`             :func:`calm_window`,        completions late enough to surge (a block starts
                         :func:`late_rows`           only when none can be)
:func:`down_vetoes`      :func:`repeats_last_veto`   why a wanted scale-down is vetoed (a block holds
                                                     through a veto only when it repeats the last one)
=======================  ==========================  =================================================

The rules read the policy through :class:`EbbConfig` (its settings and its memory,
:class:`~ebb.decide.ebb_state.EbbState`). Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ebb.config.workloads import WorkloadClass
from ebb.decide.ebb_state import EbbState
from ebb.decide.latency import TTFT
from ebb.decide.profiles import EbbProfile
from ebb.decide.semantics import WorkloadSignals, veto
from ebb.model.observation import FineSignals

__all__ = ["LATE_MIN_WEIGHT", "LATE_SHARE", "LONG_MIN_WEIGHT", "EbbConfig", "bounded", "bounded_many",
           "calm_window", "cooldown_s", "down_interval_s", "pace_horizon_s", "down_vetoes", "grows", "grows_many", "hold_floor",
           "hold_floors", "late", "late_rows", "repeats_last_veto", "veto_key", "warmup_s"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

LATE_MIN_WEIGHT = 3.0
"""A latency surge needs at least this many requests (weight) that waiting made miss the TTFT SLO in
the latency window: one unlucky collision of two long prompts on a replica is no shortage of replicas."""
LATE_SHARE = 0.005
"""…and more than this share of the window's requests (five times the 0.1 % SLO budget)."""
LONG_MIN_WEIGHT = 2.0
"""Over the long window (``breach_horizons``) a second breach at over half the violation budget's
rate is a trend: at Mooncake's 4 requests/s the budget is one request in 1,000 — four minutes — and
waiting for a third spends most of it."""
_LONG_MARGIN = 1e-6
"""Slack under the long window's breach threshold: its running sum is rounded on every change."""


class EbbConfig(Protocol):
    """What Ebb's rules read of the policy (:class:`~ebb.decide.policy.EbbPolicy` is one): its
    settings, fixed for its life, and its memory."""

    @property
    def profile(self) -> EbbProfile: ...
    @property
    def slo_ttft_ms(self) -> float: ...
    @property
    def slo_e2e_ms(self) -> float: ...
    @property
    def min_replicas(self) -> int: ...
    @property
    def max_replicas(self) -> int: ...
    @property
    def max_staleness_s(self) -> float: ...
    @property
    def warmup_s(self) -> float | None: ...
    @property
    def workload_class(self) -> WorkloadClass: ...
    @property
    def state(self) -> EbbState: ...


# -- counts within bounds ----------------------------------------------------------------------------
def bounded(cfg: EbbConfig, n: int) -> int:
    """``n`` replicas within ``[min_replicas, max_replicas]``."""
    return min(cfg.max_replicas, max(cfg.min_replicas, n))


def bounded_many(cfg: EbbConfig, n: FloatArray) -> FloatArray:
    """:func:`bounded` element-wise."""
    return np.asarray(np.minimum(cfg.max_replicas, np.maximum(cfg.min_replicas, n)), dtype=np.float64)


# -- the scale-up test -------------------------------------------------------------------------------
def grows(cfg: EbbConfig, need_now: int, spec: int, urgent: bool) -> bool:
    """Scale up to ``need_now``: above the fleet ``spec``, at once when ``urgent`` (a surge or a
    burst), else past ``up_hysteresis`` of the fleet."""
    return need_now > spec and (urgent or need_now > spec * (1.0 + cfg.profile.up_hysteresis))


def grows_many(cfg: EbbConfig, need_now: FloatArray, spec: int, urgent: BoolArray) -> BoolArray:
    """:func:`grows` element-wise."""
    return np.asarray((need_now > spec) & (urgent | (need_now > spec * (1.0 + cfg.profile.up_hysteresis))),
                      dtype=bool)


# -- the hold floor ----------------------------------------------------------------------------------
def hold_floor(cfg: EbbConfig, comeback: int, learned: int, sized: int) -> int:
    """The fewest replicas a scale-down may leave: the comeback floor, the learned floor and the
    sized need, within the replica bounds."""
    return min(cfg.max_replicas, max(cfg.min_replicas, comeback, learned, sized))


def hold_floors(cfg: EbbConfig, comeback: FloatArray, learned: FloatArray, sized: FloatArray) -> FloatArray:
    """:func:`hold_floor` element-wise."""
    return np.asarray(np.minimum(cfg.max_replicas, np.maximum.reduce(
        [np.full(len(sized), float(cfg.min_replicas)), comeback, sized, learned])), dtype=np.float64)


# -- lateness ----------------------------------------------------------------------------------------
def late(cfg: EbbConfig) -> bool:
    """Whether waiting made requests late enough to surge: since the last scale-up, at least
    :data:`LATE_MIN_WEIGHT` requests and over :data:`LATE_SHARE` of the latency window past
    ``surge_margin`` of the TTFT SLO; or, over the long window, a second breach at over half the
    violation budget's rate."""
    p, st = cfg.profile, cfg.state
    return st.latency.breaches(p.surge_margin * cfg.slo_ttft_ms, min_weight=LATE_MIN_WEIGHT, share=LATE_SHARE,
                               since_s=st.last_up) or \
        st.latency.long_breaches(min_weight=LONG_MIN_WEIGHT, share=0.5 * p.violation_budget)


def calm_window(cfg: EbbConfig) -> bool:
    """Whether :func:`late` is False for the latency window as it is, whatever the shares: no
    completion in it past the surge limit or the SLO, and the long window's breaches under their
    threshold (less the rounding slack). With only calm rows added (:func:`late_rows`) it stays so."""
    ttft_cap = min(cfg.profile.surge_margin * cfg.slo_ttft_ms, cfg.slo_ttft_ms)
    lat = cfg.state.latency
    return not (lat.peak(TTFT) > ttft_cap or lat.long_breach_weight >= LONG_MIN_WEIGHT - _LONG_MARGIN)


def late_rows(cfg: EbbConfig, fine: FineSignals, rows: int) -> BoolArray:
    """Per completion row of ``fine`` (the first ``rows``), whether it could make :func:`late` True:
    a TTFT past the surge limit or the SLO, or an end-to-end latency past its SLO (or unknown)."""
    ttft_cap = min(cfg.profile.surge_margin * cfg.slo_ttft_ms, cfg.slo_ttft_ms)
    return np.asarray((fine.done_ttft_ms[:rows] > ttft_cap) | ~(fine.done_e2e_ms[:rows] <= cfg.slo_e2e_ms),
                      dtype=bool)


# -- the scale-down vetoes ---------------------------------------------------------------------------
def warmup_s(cfg: EbbConfig) -> float:
    """No scale-down before this much history (s): ``warmup_s`` or ``warmup_horizons`` horizons."""
    return cfg.warmup_s if cfg.warmup_s is not None else cfg.profile.warmup_horizons * cfg.state.bound.horizon_s


def cooldown_s(cfg: EbbConfig, spec: int | None = None) -> float:
    """No scale-down this long (s) after a scale-up (of a fleet of ``spec``: :func:`pace_horizon_s`)."""
    return cfg.profile.cooldown_horizons * pace_horizon_s(cfg, spec)


def down_interval_s(cfg: EbbConfig, spec: int | None = None) -> float:
    """No scale-down this long (s) after the last one: a wanted one holds, recording nothing."""
    return cfg.profile.down_interval_horizons * pace_horizon_s(cfg, spec)


def pace_horizon_s(cfg: EbbConfig, spec: int | None = None) -> float:
    """The horizon a fleet of ``spec`` replicas paces its scale-downs by: the cold start's (61 s at the
    default 60 s cold start); with an asleep tier, once the cold floor counts on every replica it
    runs (``spec`` ≤ :attr:`~ebb.decide.ebb_state.EbbState.cold_floor`: its victims would sleep),
    the wake's (3.1 s at a 2 s wake) — a scale-down undone then costs a wake, not a cold start, and
    pacing by the cold start kept the whole cold floor running for a minute after each wake."""
    st = cfg.state
    cold = st.cold_floor
    if st.wake_bound is None or spec is None or cold is None or spec > cold:
        return st.bound.horizon_s
    return st.wake_bound.horizon_s


def down_vetoes(cfg: EbbConfig, t: float, spec: int, ready_replicas: int, latency_ms: float, burst: bool,
                utilisation: float) -> tuple[str, ...] | None:
    """Every reason a scale-down wanted at ``t`` is vetoed (empty: none) — warming up, cooling down
    after a scale-up, then L2's (:func:`~ebb.decide.semantics.veto`: stale data, latency within the
    veto margin, a burst, the replica floor) — or None while the last scale-down is too recent (a
    plain hold, nothing recorded)."""
    st = cfg.state
    assert st.first_t is not None
    warm = warmup_s(cfg)
    vetoes = []
    if t - st.first_t < warm:
        vetoes.append(f"warming up: {t - st.first_t:.0f} s of history < {warm:.0f} s")
    cool = cooldown_s(cfg, spec)
    if t - st.last_up < cool:
        vetoes.append(f"cooldown: {t - st.last_up:.0f} s since the last scale-up < {cool:.0f} s")
    if t - st.last_down < down_interval_s(cfg, spec):
        return None
    cls = cfg.workload_class
    vetoes.extend(veto(cls, WorkloadSignals(
        workload="serving", class_name=cls.name, replicas=spec, ready_replicas=ready_replicas,
        latency_p99_ms=latency_ms, latency_p95_ms=float("nan"), success_ratio=float("nan"), burst_active=burst,
        utilisation_ratio=utilisation, staleness_s=t - st.last_signal_t), cfg.max_staleness_s))
    return tuple(vetoes)


def veto_key(vetoes: tuple[str, ...]) -> tuple[str, ...]:
    """The reasons of ``vetoes`` without their figures: a veto is recorded when they change."""
    return tuple(v.split(":")[0] for v in vetoes)


def repeats_last_veto(cfg: EbbConfig, ticks: FloatArray, burst: BoolArray, spec: int,
                      ttft_peak: FloatArray) -> BoolArray:
    """Per tick, whether a scale-down wanted there is vetoed (:func:`down_vetoes`) with the reasons of
    the last veto (a repeated veto: ``decide`` holds and records nothing, and a hold without one
    leaves the same state). The reasons a block can change are the warm-up, the cooldown, an
    active burst and an unknown TTFT P99 (``ttft_peak`` NaN: a latency window without a row); the
    rest of ``veto``'s are fixed while samples are fresh (staleness 0) and every TTFT in the window
    is under the class's veto margin (checked per tick on the window's peak, an upper bound of the
    P99; -inf where the P99 reads 0)."""
    m = len(ticks)
    st = cfg.state
    last = st.last_veto
    cls = cfg.workload_class
    if not last or st.first_t is None:
        return np.zeros(m, dtype=bool)
    calm = WorkloadSignals(workload="serving", class_name=cls.name, replicas=spec, ready_replicas=spec,
                           latency_p99_ms=0.0, latency_p95_ms=math.nan, success_ratio=math.nan, burst_active=False,
                           utilisation_ratio=math.nan, staleness_s=0.0)
    fixed = [veto(cls, replace(calm, burst_active=b, latency_p99_ms=p99), cfg.max_staleness_s)
             for p99 in (0.0, math.nan) for b in (False, True)]
    same = np.zeros(16, dtype=bool)  # by warm-up (1), cooldown (2), burst (4), unknown P99 (8): the key matches
    for code in range(16):
        key = (("warming up",) if code & 1 else ()) + (("cooldown",) if code & 2 else ()) + veto_key(fixed[code >> 2])
        same[code] = bool(key) and key == last
    unknown = np.isnan(ttft_peak)
    code_at = (((ticks - st.first_t) < warmup_s(cfg)).astype(np.int64) + 2 * ((ticks - st.last_up) < cooldown_s(cfg))
               + 4 * burst + 8 * unknown)
    ok = same[code_at]
    if cls.p99_latency_ms is not None:
        ok &= unknown | (ttft_peak < cls.veto_margin * cls.p99_latency_ms)
    return np.asarray(ok, dtype=bool)
