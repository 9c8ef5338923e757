"""Ray Serve's default autoscaling policy: upstream's unit tests (ported as data) run through our
core, property tests of its documented rules, and the emulated controller on hand-built observations."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.policy_specs import parse_policies
from ebb.errors import ConfigError
from ebb.model.ids import ReplicaId
from ebb.model.observation import Observation, PodView
from ebb.sim.peers import ray_serve as rs
from ebb.sim.peers.ray_serve import (
    NO_DELAY,
    DelayState,
    HandleMetrics,
    RayAutoscalingConfig,
    aggregate_total,
    apply_delays,
    bounded,
    merge_total,
    policy_step,
    scale_by_factor,
    time_weighted_mean,
)
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings

DATA = Path(__file__).parents[3] / "data" / "upstream" / "ray" / "autoscaling_policy.json"
DOC = json.loads(DATA.read_text())
CASES = DOC["cases"]


def _config(raw: dict[str, Any]) -> RayAutoscalingConfig:
    # Upstream's tests use max_replicas < what the unbounded policy answers; the bounds are applied
    # a level up (get_decision_num_replicas), so the config's own validation must accept them.
    return RayAutoscalingConfig(**raw)


def _expand(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for s in steps:
        if "steps" in s:
            out.extend(_expand(s["steps"]) * s["repeat"])
        else:
            out.extend([s] * s.get("repeat", 1))
    return out


def _run_policy_case(case: dict[str, Any]) -> None:
    raw_cfg = dict(case["config"])
    cfg = _config(raw_cfg)
    clock = case.get("clock", {"start_s": 0.0, "tick_s": 0.1})
    tps = round(1 / clock["tick_s"]) if clock["tick_s"] else 0
    init = case.get("initial_state")
    state = DelayState(init[0], init[1]) if init else NO_DELAY
    tick = 0
    for k, s in enumerate(_expand(case["steps"])):
        if "set_config" in s:
            raw_cfg.update(s["set_config"])
            cfg = _config(raw_cfg)
        # Upstream's fake clock is tick / ticks-per-second (not tick × 0.1) to avoid double rounding.
        now = clock["start_s"] + (tick / tps if tps else 0.0)
        tick += 1
        before = NO_DELAY if (case["state"] == "fresh" or s.get("fresh")) else state
        got, new_state = policy_step(s["total_requests"], s["running"], s["target"], cfg, before, now,
                                     raw_desired=s.get("raw_desired"))
        if case["state"] == "carried" and not s.get("fresh"):
            state = new_state
        if s["expect"] is not None:
            assert got == s["expect"], f"step {k} at t={now}: {s}"
        if "expect_state" in s:
            assert [new_state.counter, new_state.since_s] == s["expect_state"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_upstream_case(case: dict[str, Any]) -> None:
    kind = case["kind"]
    if kind == "policy":
        _run_policy_case(case)
    elif kind == "scaling_factor":
        assert scale_by_factor(case["desired"], case["current"], _config(case["config"])) == case["expect"]
    elif kind == "delay":
        cfg, state = _config(case["config"]), NO_DELAY
        for s in case["steps"]:
            got, state = apply_delays(s["desired"], s["target"], cfg, state, s["now_s"])
            assert got == s["expect"], s
    elif kind == "aggregate":
        series = [[(t, v) for t, v in s] for s in case["series"]]
        merged = merge_total(series)
        assert [x for p in merged for x in p] == pytest.approx([x for p in case["expect_merged"] for x in p])
        unaligned = time_weighted_mean(merged, last_window_s=case["last_window_s"])
        aligned = time_weighted_mean(merged, window_start_s=case["aligned_start_s"],
                                     last_window_s=case["last_window_s"])
        assert unaligned == pytest.approx(case["expect_unaligned"], rel=1e-9)
        assert aligned == pytest.approx(case["expect_aligned"], rel=1e-9)
        assert aligned is not None and unaligned is not None and aligned > unaligned
    else:
        assert kind == "aggregate_total"
        series = [[(t, v) for t, v in s] for s in case["series"]]
        assert aggregate_total(series, case["now_s"]) == pytest.approx(case["expect"], rel=1e-9)


def test_every_upstream_test_named_in_the_provenance_has_a_case() -> None:
    assert DOC["provenance"]["repo"] == "ray-project/ray"
    assert sorted({c["upstream_test"] for c in CASES}) == DOC["provenance"]["tests"]
    assert len(CASES) == 36


# ---- properties of the documented rules ----------------------------------------------------------

_cfgs = st.builds(
    RayAutoscalingConfig,
    target_ongoing_requests=st.floats(0.1, 50),
    min_replicas=st.integers(0, 3), max_replicas=st.integers(3, 40),
    upscale_delay_s=st.sampled_from([0.0, 0.3, 2.0, 30.0]),
    downscale_delay_s=st.sampled_from([0.0, 0.5, 5.0, 600.0]),
    upscaling_factor=st.one_of(st.none(), st.floats(0.1, 3)),
    downscaling_factor=st.one_of(st.none(), st.floats(0.1, 3)))


@given(_cfgs, st.lists(st.tuples(st.floats(0, 200), st.integers(0, 40)), min_size=1, max_size=60))
@settings(max_examples=200, deadline=None)
def test_no_change_before_its_delay_and_never_outside_bounds(
        cfg: RayAutoscalingConfig, loads: list[tuple[float, int]]) -> None:
    """Closed loop at 0.1 s: a change of the target happens only after an unbroken run of wishes in
    its direction lasting the delay; the bounded answer stays in [min, max]; only 1 -> 0 reaches 0."""
    target, state, run_dir, run_since = bounded(cfg.min_replicas, cfg), NO_DELAY, 0, 0.0
    for k, (total, running_raw) in enumerate(loads):
        now = k / 10
        running = min(running_raw, target)
        wish, state = policy_step(total, running, target, cfg, state, now)
        new = bounded(wish, cfg)
        assert cfg.min_replicas <= new <= cfg.max_replicas
        raw = policy_step(total, running, target, cfg, NO_DELAY, now)[0] if running else None
        direction = 0 if raw is None else (raw > target) - (raw < target)
        if direction != run_dir:
            run_dir, run_since = direction, now
        if running > 0 and new != target and wish != target:
            delay = cfg.upscale_delay_s if new > target else (
                cfg.downscale_delay_s if target > 1 else cfg.downscale_delay_s)
            assert now - run_since + 1e-6 >= delay
            if new < target and target > 1:
                assert wish >= 1
        target = new


# Upstream computes ``running × (total / (target × running))`` in floats, so e.g. 25 × (7 / 12.5) is
# 14.000000000000002 and its ceiling 15: the wish is the ceiling of that expression (rounding
# included), never more than one above the exact ceil(total / target).
@given(st.integers(0, 4000).map(lambda q: q / 4), st.integers(1, 100), st.sampled_from([0.5, 1.0, 2.0, 4.0, 16.0]))
def test_without_delays_or_gains_the_wish_is_ceil_total_over_target(
        total: float, running: int, per_replica: float) -> None:
    plain = RayAutoscalingConfig(target_ongoing_requests=per_replica, max_replicas=100,
                                 upscale_delay_s=0, downscale_delay_s=0)
    got, _ = policy_step(total, running, running, plain, NO_DELAY, 0.0)
    want = math.ceil(running * (total / (per_replica * running)))
    exact = math.ceil(total / per_replica)
    assert want - exact in (0, 1)
    # The gain step (running + 1.0 × (wish − running)) may round the expression's excess away again
    # (25 × (3.5 / 12.5) is 7.000000000000001, 25 − 18.0 is 7.0): either ceiling is upstream's float.
    allowed = {max(1, w) if w < running else w for w in (exact, want)}
    assert got in allowed or (running == 1 and got == want == 0)


@given(st.floats(0.5, 50), st.floats(0, 1), st.integers(1, 30), st.integers(1, 30))
def test_a_fractional_gain_moves_at_most_its_share_and_never_stalls(
        gain: float, frac: float, current: int, desired: int) -> None:
    cfg = RayAutoscalingConfig(upscaling_factor=gain, downscaling_factor=gain, max_replicas=100)
    got = scale_by_factor(desired - frac, current, cfg)
    if math.ceil(desired - frac) < current:
        assert got < current  # the "stuck downscale" rule
    if gain <= 1 and desired - frac > current:
        assert current < got <= math.ceil(desired - frac)


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 50)), min_size=1, max_size=30), st.floats(0.001, 10))
def test_the_look_back_mean_lies_between_the_samples(points: list[tuple[float, float]], hold_s: float) -> None:
    step = sorted({round(t, 2): v for t, v in points}.items())
    mean = aggregate_total([step], step[-1][0] + hold_s)
    values = [v for _, v in step]
    assert min(values) - 1e-9 <= mean <= max(values) + 1e-9


# ---- the emulated deployment ---------------------------------------------------------------------

def _ctx(peak: int = 6) -> PolicyContext:
    return PolicyContext(SimSettings(), np.full(10, peak, dtype=np.int64))


def _obs(t: float, target: int, ready: int, inflight: list[float], queued: float) -> Observation:
    pods = tuple(PodView(ReplicaId(i), 0.0, 0.0 if i < ready else None, 0.5, inflight[i] if i < ready else None,
                         1.0) for i in range(target))
    return Observation(t, target, ready, pods, 1.0, sum(inflight[:ready]) + queued, queued)


def test_build_uses_upstream_defaults_and_the_seam() -> None:
    (item,) = parse_policies("ray", ("ray",))
    p = rs.build(item, _ctx())
    assert p.interval_s == 0.1 and p.pipeline.period_s == 1 and p.pipeline.window_s == 1
    c = p.config
    assert (c.target_ongoing_requests, c.upscale_delay_s, c.downscale_delay_s, c.look_back_period_s,
            c.metrics_interval_s, c.upscaling_gain, c.downscaling_gain, c.min_replicas, c.max_replicas) == (
        2.0, 30.0, 600.0, 30.0, 10.0, 1.0, 1.0, 1, 12)
    assert c.record_interval_s == 6.0
    first = p.decide(Observation(0.0, 0, 0, (), None, None, None))
    assert (first.from_replicas, first.to_replicas) == (0, 6)
    assert p.gate_queries() == ()
    assert set(rs.KEYS) >= {"target", "upscale_delay", "downscale_delay", "look_back", "metrics_interval",
                            "upscaling_factor", "downscaling_factor", "min", "max", "initial"}
    assert "\n" not in rs.HELP


@pytest.mark.parametrize("spec, needle", [
    ("ray:bogus=1", "unknown parameter"), ("ray:min=5,max=3", "min=5"), ("ray:target=0", "target"),
    ("ray:initial=9,max=4", "initial=9"), ("ray:upscaling_factor=-1", "upscaling_factor")])
def test_bad_knobs_name_the_spec_and_the_parameter(spec: str, needle: str) -> None:
    (item,) = parse_policies(spec, ("ray",))
    with pytest.raises(ConfigError, match=needle):
        rs.build(item, _ctx())


def _drive(p: rs.RayServePolicy, seconds: float, target: int, per_replica: float, queued: float = 0.0,
           t0: float = 0.1) -> tuple[float, int]:
    """Feed constant load every 0.1 s until the target changes; returns (time, new target)."""
    k = 0
    while (t := round(t0 + k / 10, 6)) <= seconds:
        d = p.decide(_obs(t, target, target, [per_replica] * target, queued))
        if d.to_replicas != target:
            return t, d.to_replicas
        k += 1
    return math.inf, target


def test_defaults_scale_up_after_the_upscale_delay_once_the_push_shows_the_load() -> None:
    (item,) = parse_policies("ray:initial=2", ("ray",))
    p = rs.build(item, _ctx())
    # 2 replicas at 6 ongoing each: total 12 → 6 replicas. The first push is at 10 s; the wish
    # starts there, so the scale-up comes 30 s later (upscale_delay_s).
    t, n = _drive(p, 100.0, 2, 6.0)
    assert n == 6 and t == pytest.approx(40.0, abs=0.11)


def test_defaults_scale_down_only_after_the_downscale_delay() -> None:
    (item,) = parse_policies("ray:initial=6", ("ray",))
    p = rs.build(item, _ctx())
    # Before the first push (10 s) the controller has no metrics, total 0: the scale-down wish starts
    # at the first tick; the push then shows 3 ongoing (→ 2 replicas), the same direction, so the
    # clock runs on and the scale-down lands 600 s after that first tick.
    t, n = _drive(p, 700.0, 6, 0.5)
    assert n == 2 and t == pytest.approx(600.1, abs=0.01)


def test_the_look_back_mean_smooths_a_one_push_spike() -> None:
    cfg = RayAutoscalingConfig(max_replicas=20, look_back_period_s=10.0, metrics_interval_s=1.0,
                               upscale_delay_s=0.0)
    h = HandleMetrics(cfg)
    for k in range(101):
        t = k / 10
        h.advance(t, 0.0, {0: 20.0 if 9.0 <= t < 10.0 else 2.0}, 1)
    # Samples every 1 s (min(10 × 0.2, 1)) over the last 10 s: one of ten at 20, the rest at 2.
    assert h.total_requests(10.0) == pytest.approx((9 * 2 + 20) / 10, rel=0.1)
    assert policy_step(h.total_requests(10.0), 1, 1, cfg, NO_DELAY, 10.0)[0] == 2


def test_from_zero_the_handle_pushes_at_once_and_the_cold_start_skips_the_delay() -> None:
    (item,) = parse_policies("ray:min=0,initial=0,upscale_delay=30", ("ray",))
    p = rs.build(item, _ctx())
    d = p.decide(Observation(0.3, 0, 0, (), 1.0, 3.0, 3.0))
    assert d.to_replicas == 1


def test_requests_on_a_new_replica_open_a_fresh_window() -> None:
    """The window opens once every series has a point: a replica's first request shortens it."""
    cfg = RayAutoscalingConfig(max_replicas=5, look_back_period_s=10.0, metrics_interval_s=1.0)
    h = HandleMetrics(cfg)
    for k in range(51):
        h.advance(k / 10, 0.0, {0: 0.0}, 1)
    for k in range(51, 71):
        h.advance(k / 10, 0.0, {0: 4.0, 1: 4.0}, 2)
    # Replica 1's series starts at 6 s; the mean covers [6, 7] only, where the total is 8.
    assert h.total_requests(7.0) == pytest.approx(8.0)


def test_with_two_series_leading_zeros_drop_out_of_the_mean_as_in_rays_kernel() -> None:
    """Expected values produced by the ray 2.60.0 wheel's own kernels on these inputs
    (``merge_instantaneous_total_cython``, ``merge_and_aggregate_arrays(..., now=6.0)``)."""
    a = [(1.0, 0.0), (2.0, 0.0), (3.0, 5.0), (4.0, 5.0), (5.0, 0.0)]
    b = [(1.0, 0.0), (2.0, 1.0), (3.0, 1.0), (4.0, 1.0)]
    assert merge_total([a, b]) == [(2.0, 1.0), (3.0, 6.0), (5.0, 1.0)]
    assert aggregate_total([a, b], 6.0) == pytest.approx(3.5)
    assert merge_total([a]) == a  # a lone series passes through as it is
    assert aggregate_total([a], 6.0) == pytest.approx(10.0 / 5.0)  # zeros count: window [1, 6]


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4), st.booleans()), min_size=1, max_size=120),
       st.floats(0.5, 10), st.sampled_from([0.1, 0.5, 2.0]))
@settings(max_examples=100, deadline=None)
def test_the_pre_reduced_push_reads_as_the_plain_aggregation(
        ticks: list[tuple[int, int, bool]], look_back: float, interval: float) -> None:
    """The handle's O(1) per-decision read equals ``aggregate_total`` over its newest push."""
    h = HandleMetrics(RayAutoscalingConfig(look_back_period_s=look_back, metrics_interval_s=interval))
    for k, (a, b, second) in enumerate(ticks):
        now = (k + 1) / 10
        h.advance(now, float(b), {0: float(a), **({1: float(b)} if second else {})}, 1)
        want = aggregate_total(h.report, now) if h.report else 0.0
        assert h.total_requests(now) == pytest.approx(want, rel=1e-9, abs=1e-12)
