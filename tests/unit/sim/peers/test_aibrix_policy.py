"""The ``aibrix`` policy: AIBrix's documented rules as properties, and its behaviour over observations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.policy_specs import PolicySpecItem
from ebb.errors import ConfigError
from ebb.model.ids import ReplicaId
from ebb.model.observation import Observation, PodView
from ebb.sim.peers import aibrix
from ebb.sim.peers.aibrix_core import (
    AibrixContext,
    Recommendation,
    apa_target_replicas,
    kpa_target_replicas,
    stabilize,
)
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings

CTX = PolicyContext(SimSettings(), np.array([1, 4, 8, 8, 2], dtype=np.int64))  # oracle peak 8


def _item(**params: str) -> PolicySpecItem:
    return PolicySpecItem("aibrix", tuple(params.items()))


def _obs(t_s: float, replicas: int, kv: float | None, waiting: float = 0.0, running: float = 0.0) -> Observation:
    pods = tuple(PodView(ReplicaId(i), 0.0, 0.0, 0.5, running, 1.0, running=running, waiting=waiting,
                         kv_usage_ratio=kv) for i in range(replicas))
    return Observation(t_s, replicas, replicas, pods, 1.0, replicas * running, 0.0)


def _run(policy: aibrix.AibrixPolicy, kv: list[float], start: int) -> list[int]:
    """One reconcile per 10 s with the given mean KV usage; decisions applied at once."""
    n, out = start, []
    for k, v in enumerate(kv, start=1):
        n = policy.decide(_obs(10.0 * k, n, v)).to_replicas
        out.append(n)
    return out


contexts = st.builds(AibrixContext, target_value=st.floats(0.05, 100), up_tolerance_ratio=st.floats(0, 0.5),
                     down_tolerance_ratio=st.floats(0, 0.5), max_scale_up_rate=st.floats(1, 10),
                     max_scale_down_rate=st.floats(1, 10))


@settings(max_examples=300, deadline=None)
@given(ctx=contexts, cur=st.integers(1, 200), use=st.floats(0, 500))
def test_apa_moves_within_rates_and_holds_within_tolerance(ctx: AibrixContext, cur: int, use: float) -> None:
    got = apa_target_replicas(float(cur), use, ctx)
    assert math.floor(cur / ctx.max_scale_down_rate) <= got <= math.ceil(cur * ctx.max_scale_up_rate)
    r = use / ctx.target_value
    if 1 - ctx.down_tolerance_ratio <= r <= 1 + ctx.up_tolerance_ratio:
        assert got == cur


@settings(max_examples=300, deadline=None)
@given(ctx=contexts, cur=st.integers(0, 200), stable=st.floats(0, 500), panic=st.floats(0, 500),
       maxpp=st.integers(0, 300))
def test_kpa_panic_never_goes_below_its_high_water_mark(ctx: AibrixContext, cur: int, stable: float, panic: float,
                                                        maxpp: int) -> None:
    in_panic = kpa_target_replicas(float(cur), stable, panic, ctx, in_panic=True, max_panic_pods=maxpp)
    calm = kpa_target_replicas(float(cur), stable, panic, ctx, in_panic=False)
    assert in_panic >= max(maxpp, calm)
    assert calm >= math.floor(cur / ctx.max_scale_down_rate)


@settings(max_examples=300, deadline=None)
@given(recs=st.lists(st.integers(0, 50), min_size=1, max_size=60), cur=st.integers(0, 50))
def test_cooldown_picks_max_up_min_down_within_window(recs: list[int], cur: int) -> None:
    hist: tuple[Recommendation, ...] = ()
    for k, rec in enumerate(recs):
        got, hist = stabilize(hist, 10.0 * k, rec, cur, 0.0, 300.0)
        if rec == cur:
            assert got == cur
        elif rec > cur:
            assert got == rec  # no scale-up cooldown by default
        else:
            assert got == min(recs[max(0, k - 29):k + 1])  # the last 300 s (t > now - 300)
        assert all(r.t_s > 10.0 * k - 300.0 for r in hist)


@settings(max_examples=60, deadline=None)
@given(kv=st.lists(st.floats(0, 1), min_size=1, max_size=60), mn=st.integers(0, 3), mx=st.integers(3, 30),
       algo=st.sampled_from(["apa", "kpa"]))
def test_policy_never_leaves_min_max(kv: list[float], mn: int, mx: int, algo: str) -> None:
    p = aibrix.build(_item(algo=algo, min=str(mn), max=str(mx)), CTX)
    for n in _run(p, kv, start=min(mx, 8)):
        assert mn <= n <= mx


def test_initial_fleet_and_reconcile_period() -> None:
    p = aibrix.build(_item(), CTX)
    assert p.decide(Observation(0.0, 0, 0, (), None, None, None)).to_replicas == 8
    assert p.interval_s == 10.0 and p.algo == "apa" and p.metric == "kv" and p.context.target_value == 0.5


def test_apa_scales_up_at_most_twice_per_reconcile() -> None:
    p = aibrix.build(_item(max="64"), CTX)
    assert _run(p, [1.0, 1.0, 1.0], start=4) == [8, 16, 32]


def test_apa_scale_down_waits_for_the_stable_window_mean() -> None:
    # Windows average 180 s of history: one quiet reconcile after a busy period does not scale down.
    p = aibrix.build(_item(), CTX)
    fleet = _run(p, [0.5] * 18 + [0.1] * 30, start=8)
    assert fleet[:18] == [8] * 18
    assert fleet[18] == 8  # mean still within tolerance
    assert fleet[-1] < 8


def test_kpa_sizes_from_the_per_pod_mean_as_upstream() -> None:
    # Upstream divides the per-pod mean by the per-pod target: 8 pods at 0.8 KV ask ceil(1.6) = 2 pods,
    # limited to halving per reconcile.
    p = aibrix.build(_item(algo="kpa"), CTX)
    fleet = _run(p, [0.8] * 5, start=8)
    assert fleet == [4, 2, 2, 2, 2]


def test_pods_without_samples_are_skipped_and_all_missing_holds() -> None:
    p = aibrix.build(_item(), CTX)
    d = p.decide(_obs(10.0, 6, None))
    assert d.to_replicas == 6 and "no pod metrics" in d.reasons[0]


def test_waiting_metric_reads_num_requests_waiting() -> None:
    p = aibrix.build(_item(metric="waiting", target="5", max="64"), CTX)
    assert p.decide(_obs(10.0, 4, 0.0, waiting=10.0)).to_replicas == 8


@pytest.mark.parametrize("params", [{"algo": "hpa"}, {"metric": "gpu"}, {"target": "0"}, {"min": "9", "max": "3"},
                                    {"panic_window": "200"}, {"observe_window": "4000"}, {"up_rate": "0.5"},
                                    {"window": "30"}])
def test_bad_knobs_raise_config_error_naming_the_spec(params: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="aibrix"):
        aibrix.build(_item(**params), CTX)


def test_help_is_one_line_and_keys_cover_the_sweep_knob() -> None:
    assert "\n" not in aibrix.HELP and "target" in aibrix.KEYS


def test_down_pick_max_holds_the_window_high_water_mark_as_the_docs_describe() -> None:
    # Upstream code: a scale-down jumps to the smallest recommendation of the last 300 s;
    # down_pick=max keeps the largest (HPA-style stabilisation), so a brief lull does not drop the fleet.
    hist: tuple[Recommendation, ...] = ()
    for k, rec in enumerate([1, 1, 40, 36]):
        got_min, hist2 = stabilize(hist, 10.0 * k, rec, 40, 0.0, 300.0)
        got_max, _ = stabilize(hist, 10.0 * k, rec, 40, 0.0, 300.0, down_pick_max=True)
        hist = hist2
    assert (got_min, got_max) == (1, 40)
