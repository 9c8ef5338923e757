"""The verdict leads every report: the cheapest deployable policy meeting the SLO, Ebb against the best peer."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ebb.score.results import Scorecard
from ebb.score.verdict import SLO_VIOLATION_LIMIT_PCT, TIE_REL, ebb_profile, meets_slo, role, verdict


def card(policy: str, gpu_hours: float, pct: float, *, ups: int = 0, downs: int = 0) -> Scorecard:
    return Scorecard(policy=policy, trace="t", fidelity="fluid", requests=1000, gpu_hours=gpu_hours,
                     cost_usd=gpu_hours * 3, slo_violations=0, slo_violation_pct=pct, ttft_p50_ms=1.0,
                     ttft_p99_ms=2.0, e2e_p50_ms=3.0, e2e_p99_ms=4.0, scale_ups=ups, scale_downs=downs,
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


def test_a_tie_goes_to_the_static_fleet_before_a_peer_that_never_scaled_whatever_the_order() -> None:
    # #35: "Deploy wva" when WVA never scaled and cost exactly what static did, because it was listed first.
    v = verdict([card("wva", 10.0, 0.0), card("static", 10.0, 0.0), card("ebb", 12.0, 0.0, ups=3, downs=3)])
    assert v.pick is not None and v.pick.policy == "static"
    assert v.peer is not None and v.peer.policy == "static"
    assert v.lines()[0].startswith("Deploy static:") and "as cheap: wva" in v.lines()[0]


def test_a_tie_between_scalers_goes_to_the_one_that_scaled_least() -> None:
    cards = [card("hpa", 8.0, 0.0, ups=6, downs=5), card("kpa", 8.0 * (1 + TIE_REL / 2), 0.0, ups=2, downs=1),
             card("keda", 8.0, 0.0, ups=4, downs=4), card("ray", 7.9, 0.5)]
    v = verdict(cards)
    assert v.pick is not None and v.pick.policy == "kpa" and v.peer is v.pick
    assert [c.policy for c in v.tied] == ["hpa", "keda"]
    cheaper = verdict([*cards, card("aibrix", 7.5, 0.0, ups=40, downs=40)])
    assert cheaper.pick is not None and cheaper.pick.policy == "aibrix" and not cheaper.tied


def test_ebb_is_compared_as_its_default_profile_then_one_line_per_other_profile() -> None:
    # #35: the comparison line named ebb:profile=cautious (the cheapest Ebb) instead of the default profile.
    cards = [card("hpa", 10.0, 0.0), card("ebb:profile=cautious", 6.0, 0.0), card("ebb", 8.0, 0.0),
             card("ebb:profile=lean", 5.0, 0.05)]
    v = verdict(cards)
    assert v.ebb is not None and v.ebb.policy == "ebb"
    assert [e.policy for e in v.ebbs] == ["ebb", "ebb:profile=cautious", "ebb:profile=lean"]
    assert math.isclose(v.saved_pct, 20.0)
    compare = [line for line in v.lines() if line.startswith("Ebb (")]
    assert [line.split(")")[0] for line in compare] == ["Ebb (ebb", "Ebb (ebb:profile=cautious",
                                                        "Ebb (ebb:profile=lean"]
    assert "20.0 % fewer" in compare[0] and "40.0 % fewer" in compare[1] and "50.0 % fewer" in compare[2]
    explicit = verdict([card("hpa", 10.0, 0.0), card("ebb:profile=cautious", 6.0, 0.0),
                        card("ebb:profile=balanced,canary=on", 9.0, 0.0)])
    assert explicit.ebb is not None and explicit.ebb.policy == "ebb:profile=balanced,canary=on"
    only_lean = verdict([card("hpa", 10.0, 0.0), card("ebb:profile=lean", 5.0, 0.0)])
    assert only_lean.ebb is not None and only_lean.ebb.policy == "ebb:profile=lean" and len(only_lean.lines()) == 2


def test_the_profile_of_an_ebb_spec_defaults_to_balanced() -> None:
    assert [ebb_profile(p) for p in ("ebb", "ebb:canary=on", "ebb:canary=on,profile=lean", "ebb:profile=")] == [
        "balanced", "balanced", "lean", "balanced"]


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
        low = min(c.gpu_hours for c in deployable_ok)
        assert low <= v.pick.gpu_hours <= low + TIE_REL * low
        tied = [c for c in deployable_ok if c.gpu_hours <= low + TIE_REL * low]
        assert v.pick.policy == "static" or all(c.policy != "static" for c in tied)
    else:
        assert v.pick is None
    assert v.pick is None or v.pick.policy != "oracle"
    assert v.closest is None or v.closest.policy != "oracle"
    assert v.peer is None or role(v.peer.policy) == "peer"
    assert v.ebb is None or role(v.ebb.policy) == "ebb"
    assert all(isinstance(line, str) and line for line in v.lines())
