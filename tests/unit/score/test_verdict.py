"""The verdict leads every report: the cheapest deployable policy meeting the SLO, Ebb against the best peer."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ebb.score.results import Scorecard
from ebb.score.verdict import SLO_VIOLATION_LIMIT_PCT, meets_slo, role, verdict


def card(policy: str, gpu_hours: float, pct: float) -> Scorecard:
    return Scorecard(policy=policy, trace="t", fidelity="fluid", requests=1000, gpu_hours=gpu_hours,
                     cost_usd=gpu_hours * 3, slo_violations=0, slo_violation_pct=pct, ttft_p50_ms=1.0,
                     ttft_p99_ms=2.0, e2e_p50_ms=3.0, e2e_p99_ms=4.0, scale_ups=0, scale_downs=0,
                     dropped_requests=0, peak_replicas=1, mean_replicas=1.0, slo_ttft_ms=2000.0,
                     slo_e2e_ms=60000.0, wall_s=0.1)


def test_the_oracle_is_never_the_pick_even_when_cheapest() -> None:
    v = verdict([card("oracle", 1.0, 0.0), card("hpa:target=0.5", 5.0, 0.05), card("ebb", 4.0, 0.02)])
    assert v.pick is not None and v.pick.policy == "ebb"
    assert v.peer is not None and v.peer.policy == "hpa:target=0.5"
    assert math.isclose(v.saved_gpu_hours, 1.0) and math.isclose(v.saved_pct, 20.0)
    assert v.lines()[0].startswith("Deploy ebb:")
    assert "20.0 % fewer GPU-h than the best peer" in v.lines()[1]


def test_the_best_peer_is_the_cheapest_meeting_the_slo_else_the_one_with_fewest_violations() -> None:
    v = verdict([card("hpa", 3.0, 0.5), card("keda", 2.0, 0.09), card("static", 1.0, 0.0), card("ebb", 1.5, 0.0)])
    assert v.peer is not None and v.peer.policy == "static"
    assert v.pick is not None and v.pick.policy == "static"
    assert "more GPU-h" in v.lines()[1]
    none_ok = verdict([card("hpa", 3.0, 0.5), card("keda", 2.0, 0.9), card("ebb", 1.0, 2.0)])
    assert none_ok.pick is None
    assert none_ok.peer is not None and none_ok.peer.policy == "hpa"
    assert none_ok.closest is not None and none_ok.closest.policy == "hpa"
    assert none_ok.lines()[0].startswith("No deployable policy meets the SLO")
    assert "neither meets the SLO" in none_ok.lines()[1]


def test_a_comparison_without_ebb_or_without_peers_says_so() -> None:
    assert "Ebb did not run" in verdict([card("hpa", 3.0, 0.0)]).lines()[1]
    assert "No peer ran" in verdict([card("ebb", 3.0, 0.0)]).lines()[1]
    assert verdict([card("oracle", 1.0, 0.0)]).lines() == [
        "No deployable policy ran (only the oracle, which sees the future)."]


def test_roles_come_from_the_policy_family() -> None:
    assert [role(p) for p in ("ebb:profile=lean", "oracle", "hpa:target=0.5", "ray-serve", "static")] == [
        "ebb", "oracle", "peer", "peer", "peer"]


_policies = st.sampled_from(["oracle", "ebb", "ebb:profile=lean", "hpa:target=0.5", "keda", "static", "kpa"])
_cards = st.lists(st.builds(card, _policies, st.floats(0.0, 100.0), st.one_of(
    st.floats(0.0, 5.0), st.just(math.nan), st.sampled_from([0.0, SLO_VIOLATION_LIMIT_PCT]))), max_size=12)


@given(_cards)
def test_the_pick_is_the_cheapest_deployable_policy_meeting_the_slo_and_never_the_oracle(cards: list[Scorecard]) -> None:
    v = verdict(cards)
    deployable_ok = [c for c in cards if c.policy != "oracle" and meets_slo(c)]
    if deployable_ok:
        assert v.pick is not None and meets_slo(v.pick)
        assert v.pick.gpu_hours == min(c.gpu_hours for c in deployable_ok)
    else:
        assert v.pick is None
    assert v.pick is None or v.pick.policy != "oracle"
    assert v.closest is None or v.closest.policy != "oracle"
    assert v.peer is None or role(v.peer.policy) == "peer"
    assert v.ebb is None or role(v.ebb.policy) == "ebb"
    assert all(isinstance(line, str) and line for line in v.lines())
