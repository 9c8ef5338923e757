"""The Dynamo planner emulation's documented rules, where upstream has no table: properties of the
formulas, the profile interpolators, the predictors, and the policy over synthetic intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.policy_specs import PolicySpecItem
from ebb.errors import ConfigError
from ebb.model.observation import Observation, ServingCounters
from ebb.sim.peers import dynamo
from ebb.sim.peers.dynamo import DynamoPolicy, component_gpu_budget, global_gpu_budget
from ebb.sim.peers.dynamo_predictors import ArimaPredictor, ConstantPredictor, KalmanPredictor, make_predictor
from ebb.sim.peers.dynamo_profile import h200_profile
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings

PREFILL, DECODE = h200_profile()


def _ctx(peak: int = 6) -> PolicyContext:
    return PolicyContext(SimSettings(), np.array([1, peak, 2], dtype=np.int64))


def _policy(**knobs: str) -> DynamoPolicy:
    p = dynamo.build(PolicySpecItem("dynamo", tuple(knobs.items())), _ctx())
    assert isinstance(p, DynamoPolicy)
    return p


def _obs(t_s: float, replicas: int, serving: ServingCounters | None) -> Observation:
    return Observation(t_s=t_s, spec_replicas=replicas, ready_replicas=replicas, pods=(), total_qps=None,
                       total_inflight=None, queued=None, serving=serving)


def _counters(n: float, isl: float, osl: float, ttft_s: float, itl_s: float, e2e_s: float) -> ServingCounters:
    return ServingCounters(requests_total=n, prompt_tokens_total=n * isl, generation_tokens_total=n * osl,
                           ttft_sum_s=n * ttft_s, itl_sum_s=n * (osl - 1) * itl_s, itl_count=n * (osl - 1),
                           e2e_sum_s=n * e2e_s)


# ---- build: upstream defaults and knob errors ------------------------------------------------------

def test_defaults_follow_upstream_and_the_run_slo() -> None:
    p = _policy()
    assert p.interval_s == 180.0 and p.cfg.predictor == "arima" and p.cfg.correction
    assert p.cfg.ttft_ms == SimSettings().slo.ttft_ms
    assert p.cfg.itl_ms == pytest.approx((60000.0 - 2000.0) / 1899)
    assert (p.cfg.min_replicas, p.cfg.max_replicas) == (1, 12)
    assert p.pipeline.period_s == SimSettings().pipeline.scrape_interval_s and p.pipeline.serving
    assert p.spec == "dynamo"


@pytest.mark.parametrize("knobs", [{"predictor": "prophet"}, {"target": "3"}, {"min": "5", "max": "2"},
                                   {"correction": "maybe"}, {"itl": "0"}])
def test_bad_knobs_raise_config_error_naming_the_spec(knobs: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="dynamo"):
        _policy(**knobs)


# ---- the policy over intervals ---------------------------------------------------------------------

def test_initial_fleet_is_the_oracle_peak_within_max() -> None:
    d = _policy(max="4").decide(_obs(0.0, 0, None))
    assert (d.from_replicas, d.to_replicas) == (0, 4)


def test_holds_without_metrics_and_on_an_idle_interval() -> None:
    p = _policy()
    assert p.decide(_obs(180.0, 3, None)).to_replicas == 3
    d = p.decide(_obs(180.0, 3, ServingCounters()))  # no request finished: NaN means, skipped
    assert d.to_replicas == 3 and "skipped" in d.reasons[0]


def test_steady_load_settles_on_the_profile_sizing_without_flapping() -> None:
    p = _policy(correction="off", predictor="constant", max="50")
    n, isl, osl = 100.0 * 180, 800.0, 300.0  # 100 req/s
    want_frac = n * isl / 180 / PREFILL.interpolate_thpt_per_gpu(isl) + \
        n * osl / 180 / DECODE.find_best_throughput_per_gpu(p.cfg.itl_ms, isl + osl / 2)[0]
    cur, seen = 10, []
    for k in range(1, 6):
        d = p.decide(_obs(180.0 * k, cur, _counters(n * k, isl, osl, 0.05, 0.006, 2.0)))
        cur = d.to_replicas
        seen.append(cur)
    assert seen == [math.ceil(want_frac)] * 5


def test_decode_correction_tightens_the_itl_the_profile_must_meet() -> None:
    p = _policy(predictor="constant", itl="7")
    obs_itl_ms = 2.0 * DECODE.interpolate_itl_ms(100 / 1 * 2.0 / 180, 800 + 150)
    p.decide(_obs(180.0, 1, _counters(100, 800, 300, 0.005, obs_itl_ms / 1000, 2.0)))
    assert p.d_correction == pytest.approx(2.0, rel=1e-6)
    assert p.plan(100, 800, 300)[1].count("ITL 3.5 ms") == 1


def test_prefill_correction_only_ever_lowers_prefill_demand() -> None:
    p = _policy(predictor="constant", max="100")
    base = p.plan(50_000, 800, 10)[0]
    p.p_correction = 4.0  # observed TTFT 4x the profile's: clamped to 1
    assert p.plan(50_000, 800, 10)[0] == base
    p.p_correction = 0.25
    assert p.plan(50_000, 800, 10)[0] < base


def test_ttft_target_below_the_profiled_ttft_sets_the_latency_floor() -> None:
    p = _policy(ttft="2", predictor="constant")
    assert p.plan(1, 800, 10)[0] == math.ceil(PREFILL.interpolate_ttft_ms(800) / 2.0)


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(1, 4000), st.floats(1, 2000),
       st.integers(1, 4), st.integers(4, 64))
def test_replicas_are_within_min_max_and_monotone_in_predicted_load(
        a: float, b: float, isl: float, osl: float, mn: int, mx: int) -> None:
    p = _policy(min=str(mn), max=str(mx))
    lo, hi = sorted((a, b))
    r_lo, r_hi = p.plan(lo, isl, osl)[0], p.plan(hi, isl, osl)[0]
    assert mn <= r_lo <= mx and mn <= r_hi <= mx
    # Over budget upstream floors desired × (budget / required) in floats, which can land one below the
    # budget (e.g. 353,881 requests: 3.999… → 3); below it the count is monotone in load.
    assert r_lo <= r_hi or (r_lo == mx and r_hi == mx - 1)


def test_over_budget_the_count_is_floored_in_floats_as_upstream_does() -> None:
    assert component_gpu_budget(49, 1, 4, 1) == math.floor(49 * (4 / 49)) == 3
    assert component_gpu_budget(50, 1, 4, 1) == 4


@settings(max_examples=40, deadline=None)
@given(st.floats(3.0, 10.0), st.floats(3.0, 10.0), st.floats(1, 4000), st.floats(1, 2000))
def test_looser_itl_target_never_needs_more_replicas(t1: float, t2: float, isl: float, osl: float) -> None:
    tight, loose = sorted((t1, t2))
    pt, pl = _policy(itl=str(tight), max="1000"), _policy(itl=str(loose), max="1000")
    assert pl.plan(20_000, isl, osl)[0] <= pt.plan(20_000, isl, osl)[0]


# ---- GPU budget --------------------------------------------------------------------------------------

@given(st.integers(0, 500), st.integers(1, 8), st.integers(0, 200), st.integers(1, 4))
def test_component_budget_caps_gpus_and_keeps_min_endpoint(desired: int, gpus: int, budget: int, mn: int) -> None:
    got = component_gpu_budget(desired, gpus, budget, mn)
    if desired * gpus <= budget:
        assert got == desired
    elif budget < mn * gpus:
        assert got == 0
    else:
        assert mn <= got and got * gpus <= budget


@given(st.integers(1, 300), st.integers(1, 300), st.integers(1, 4), st.integers(1, 4), st.integers(0, 200),
       st.integers(1, 3))
def test_global_budget_keeps_total_within_budget(p: int, d: int, pg: int, dg: int, budget: int, mn: int) -> None:
    np_, nd = global_gpu_budget(max(p, mn), max(d, mn), pg, dg, budget, mn)
    if budget >= mn * (pg + dg):
        assert np_ >= mn and nd >= mn and np_ * pg + nd * dg <= budget
    else:
        assert (np_, nd) == (0, 0)


# ---- profile -----------------------------------------------------------------------------------------

@given(st.floats(0, 5000))
def test_prefill_interpolation_stays_within_the_profiled_range(isl: float) -> None:
    assert PREFILL.ttft_ms.min() <= PREFILL.interpolate_ttft_ms(isl) <= PREFILL.ttft_ms.max()
    assert PREFILL.thpt_per_gpu.min() <= PREFILL.interpolate_thpt_per_gpu(isl) <= PREFILL.thpt_per_gpu.max()


@given(st.floats(2.0, 60.0), st.floats(2.0, 60.0), st.floats(0, 4000))
def test_best_decode_throughput_meets_the_itl_and_grows_with_it(t1: float, t2: float, ctx: float) -> None:
    tight, loose = sorted((t1, t2))
    th, itl_t, _ = DECODE.find_best_throughput_per_gpu(tight, ctx)
    tl, itl_l, _ = DECODE.find_best_throughput_per_gpu(loose, ctx)
    assert tl >= th > 0
    row_min = float(DECODE.itl_grid[DECODE._iy(ctx)].min())
    if tight >= row_min:
        assert itl_t <= tight
    assert 170.0 <= th and tl <= 9400.0  # within the sweep's decode tokens/s (178 ... 9,399)


def test_profile_reproduces_the_sweep_at_its_own_points() -> None:
    assert PREFILL.interpolate_ttft_ms(512) == pytest.approx(5.495)
    # batch 64 at context 896 is KV usage 0.875; the grid cell nearest to it
    assert DECODE.interpolate_itl_ms(64, 896) == pytest.approx(6.886, abs=0.05)


# ---- predictors --------------------------------------------------------------------------------------

values = st.lists(st.floats(0.1, 1e5), min_size=1, max_size=30)


@given(values)
def test_constant_predictor_returns_the_last_value(xs: list[float]) -> None:
    p = ConstantPredictor()
    for x in xs:
        p.add_data_point(x)
    assert p.predict_next() == xs[-1]


@settings(max_examples=30, deadline=None)
@given(values)
def test_arima_follows_upstream_fallbacks_and_is_never_negative(xs: list[float]) -> None:
    p = ArimaPredictor()
    for x in xs:
        p.add_data_point(x)
    got = p.predict_next()
    if len(xs) < 5:
        assert got == xs[-1]
    elif len(set(xs)) == 1:
        assert got == xs[0]
    assert got >= 0.0 and math.isfinite(got)


def test_arima_and_kalman_extrapolate_a_linear_trend() -> None:
    for name in ("arima", "kalman"):
        p = make_predictor(name)
        for k in range(30):
            p.add_data_point(100.0 + 10.0 * k)
        assert p.predict_next() == pytest.approx(400.0, rel=0.02), name


def test_kalman_converges_on_a_constant_series() -> None:
    p = KalmanPredictor()
    for _ in range(40):
        p.add_data_point(250.0)
    assert p.predict_next() == pytest.approx(250.0, rel=1e-3)
