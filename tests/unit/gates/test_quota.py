"""Elastic quota per namespace: admission by QoS class, borrowing, reclaim order (SPEC §3.5)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.gates.qos import QoSClass
from ebb.gates.quota import (
    QUOTA_RESOURCES,
    Admission,
    Quota,
    QuotaPod,
    QuotaPolicy,
    admit,
    borrowed,
    borrower_keys,
)

G, B, BE = QoSClass.GUARANTEED, QoSClass.BURSTABLE, QoSClass.BEST_EFFORT
GPU = "nvidia.com/gpu"
Q = Quota("team-a", min={"cpu": 4000, GPU: 2000}, max={"cpu": 8000, GPU: 4000})


def pod(name: str, *, qos: QoSClass = G, priority: int = 0, created_s: float = 0.0,
        ns: str = "team-a", **requests: int) -> QuotaPod:
    req = {("nvidia.com/gpu" if k == "gpu" else k): v for k, v in requests.items()}
    return QuotaPod(name, ns, qos, priority, created_s, req)


def test_the_gate_re_exports_the_planning_model_unchanged() -> None:
    # the model lives in ebb.decide.quota so the L3 planner can use it (decide may not import gates)
    import ebb.decide.quota as model
    import ebb.gates.qos as qos
    import ebb.gates.quota as gate

    assert gate.__all__ == model.__all__
    assert all(getattr(gate, name) is getattr(model, name) for name in model.__all__)
    assert qos.QoSClass is model.QoSClass


# --- admission table ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("qos", "usage", "pod_request", "allowed", "reason_part"),
    [
        (G, {"cpu": 0}, {"cpu": 4000}, True, "within min"),
        (B, {"cpu": 0}, {"cpu": 4000}, True, "within min"),
        (BE, {"cpu": 0}, {"cpu": 4000}, True, "within min"),
        (G, {"cpu": 3000}, {"cpu": 2000}, True, "Guaranteed borrows the elastic share"),
        (B, {"cpu": 3000}, {"cpu": 2000}, False, "Burstable may not use the elastic share"),
        (BE, {"cpu": 3000}, {"cpu": 2000}, False, "BestEffort may not use the elastic share"),
        (G, {"cpu": 7000}, {"cpu": 2000}, False, "hard cap"),
        (B, {"cpu": 7000}, {"cpu": 2000}, False, "hard cap"),
        (G, {"cpu": 6000}, {"cpu": 2000}, True, "cpu 8000 > min 4000"),
        (G, {GPU: 2000}, {GPU: 1000}, True, "nvidia.com/gpu 3000 > min 2000"),
        (B, {GPU: 2000}, {"cpu": 1000}, True, "within min"),
        (B, {"cpu": 9000}, {"memory": 5}, True, "within min"),
        (BE, {"cpu": 9000}, {}, True, "within min"),
        (G, {}, {"ephemeral-storage": 10**12}, True, "within min"),
    ],
    ids=[
        "guaranteed_within_min", "burstable_within_min", "best_effort_within_min",
        "guaranteed_may_borrow", "burstable_may_not_borrow", "best_effort_may_not_borrow",
        "guaranteed_stops_at_max", "burstable_stops_at_max", "guaranteed_may_reach_max_exactly",
        "gpu_borrowing_is_named", "only_requested_resources_are_checked",
        "a_resource_the_quota_does_not_list_is_unlimited", "a_pod_requesting_nothing_always_fits",
        "ungoverned_resources_are_not_limited",
    ],
)
def test_admission_follows_the_qos_rules(qos: QoSClass, usage: dict[str, int],
                                         pod_request: dict[str, int], allowed: bool,
                                         reason_part: str) -> None:
    got = admit(Q, usage, pod_request, qos)
    assert got.allowed is allowed
    assert reason_part in got.reason


def test_a_resource_listed_only_in_max_has_no_guaranteed_share() -> None:
    quota = Quota("ns", max={"memory": 100})
    assert not admit(quota, {}, {"memory": 1}, B).allowed
    assert admit(quota, {}, {"memory": 100}, G).allowed
    assert not admit(quota, {}, {"memory": 101}, G).allowed


def test_a_resource_listed_only_in_min_has_no_cap() -> None:
    assert admit(Quota("ns", min={"cpu": 1}), {"cpu": 10**9}, {"cpu": 10**9}, G).allowed


def test_admission_unpacks_as_allowed_reason_and_borrows() -> None:
    allowed, reason, borrows = admit(Q, {}, {"cpu": 1}, G)
    assert allowed and reason.startswith("allowed") and not borrows
    assert isinstance(admit(Q, {}, {}, G), Admission)


@pytest.mark.parametrize(
    ("qos", "usage", "allowed", "borrows"),
    [(G, {"cpu": 0}, True, False), (G, {"cpu": 3000}, True, True), (B, {"cpu": 3000}, False, False),
     (G, {"cpu": 7000}, False, False)],
    ids=["within_min", "guaranteed_borrows", "burstable_refused", "over_max"],
)
def test_borrows_is_set_exactly_when_a_pod_is_let_into_the_elastic_share(
        qos: QoSClass, usage: dict[str, int], allowed: bool, borrows: bool) -> None:
    got = admit(Q, usage, {"cpu": 2000}, qos)
    assert (got.allowed, got.borrows) == (allowed, borrows)
    assert ("borrows" in got.reason) is borrows


def test_a_policy_can_let_burstable_pods_borrow() -> None:
    assert admit(Q, {"cpu": 3000}, {"cpu": 2000}, B, QuotaPolicy(burstable_may_borrow=True)).allowed


def test_a_policy_can_forbid_guaranteed_pods_from_borrowing() -> None:
    assert not admit(Q, {"cpu": 3000}, {"cpu": 2000}, G, QuotaPolicy(guaranteed_may_borrow=False)).allowed


def test_the_default_policy_is_the_notes() -> None:
    p = QuotaPolicy()
    assert (p.may_borrow(G), p.may_borrow(B), p.may_borrow(BE)) == (True, False, False)


@pytest.mark.parametrize(
    ("make", "quoted"),
    [
        (lambda: Quota("ns", min={"cpu": 5}, max={"cpu": 4}), "min['cpu']=5"),
        (lambda: Quota("ns", min={"gpu": 1}), "'gpu'"),
        (lambda: Quota("ns", max={"cpu": -1}), "-1"),
        (lambda: Quota("", min={}), "''"),
        (lambda: Quota("ns", min={"cpu": 1.5}), "1.5"),  # type: ignore[dict-item]
        (lambda: QuotaPod("p", "ns", "Guaranteed"), "'Guaranteed'"),  # type: ignore[arg-type]
        (lambda: QuotaPod("p", "ns", G, requests={"cpu": -3}), "-3"),
        (lambda: admit(Q, {"cpu": -2}, {}, G), "-2"),
        (lambda: admit(Q, {}, {}, "Burstable"), "'Burstable'"),  # type: ignore[arg-type]
        (lambda: borrowed(Q, [pod("x"), pod("x")]), "'x'"),
        (lambda: borrower_keys([pod("x")], {"other": Q}), "'other'"),
    ],
    ids=["min_above_max", "unknown_resource", "negative_max", "empty_namespace",
         "fractional_milli", "qos_as_plain_string", "negative_request", "negative_usage",
         "admit_qos_as_plain_string", "duplicate_pod", "quota_under_the_wrong_namespace"],
)
def test_bad_arguments_raise_value_error_quoting_the_value(make: object, quoted: str) -> None:
    assert callable(make)
    with pytest.raises(ValueError) as info:
        make()
    assert quoted in str(info.value)


# --- borrowing ---------------------------------------------------------------------------------

def test_pods_within_min_are_not_borrowers() -> None:
    assert borrowed(Q, [pod("a", cpu=2000), pod("b", cpu=2000)]) == []


def test_the_newest_pod_past_min_is_the_borrower() -> None:
    pods = [pod("old", cpu=3000, created_s=1), pod("new", cpu=3000, created_s=2)]
    assert [p.name for p in borrowed(Q, pods)] == ["new"]


def test_higher_priority_pods_hold_min_before_older_ones() -> None:
    pods = [pod("old-low", cpu=3000, created_s=1), pod("new-high", cpu=3000, created_s=2, priority=10)]
    assert [p.name for p in borrowed(Q, pods)] == ["old-low"]


def test_a_small_later_pod_still_fits_under_min_first_fit() -> None:
    pods = [pod("a", cpu=3000, created_s=1), pod("big", cpu=3000, created_s=2),
            pod("small", cpu=1000, created_s=3)]
    assert [p.name for p in borrowed(Q, pods)] == ["big"]


def test_a_pod_past_min_in_any_one_resource_borrows() -> None:
    pods = [pod("a", cpu=1000, gpu=2000, created_s=1), pod("b", cpu=1000, gpu=1000, created_s=2)]
    assert [p.name for p in borrowed(Q, pods)] == ["b"]


def test_borrowed_ignores_pods_of_other_namespaces() -> None:
    assert borrowed(Q, [pod("x", ns="team-b", cpu=10**6)]) == []


# --- properties --------------------------------------------------------------------------------

RES = sorted(QUOTA_RESOURCES)
qos_st = st.sampled_from(list(QoSClass))
amount = st.integers(min_value=0, max_value=10_000)
requests_st = st.dictionaries(st.sampled_from(RES), amount, max_size=3)


@st.composite
def quotas(draw: st.DrawFn, namespace: str = "ns") -> Quota:
    lo = draw(st.dictionaries(st.sampled_from(RES), amount, max_size=3))
    hi = {r: lo.get(r, 0) + draw(amount) for r in draw(st.sets(st.sampled_from(RES)))}
    return Quota(namespace, min=lo, max=hi)


@st.composite
def pod_lists(draw: st.DrawFn) -> list[QuotaPod]:
    n = draw(st.integers(min_value=0, max_value=12))
    return [QuotaPod(f"p{i}", draw(st.sampled_from(["ns", "other"])), draw(qos_st),
                     draw(st.integers(-3, 3)), float(draw(st.integers(0, 20))), draw(requests_st))
            for i in range(n)]


@settings(max_examples=200)
@given(quotas(), st.lists(st.tuples(requests_st, qos_st), max_size=15),
       st.booleans(), st.booleans(), st.booleans())
def test_usage_never_exceeds_max_after_admitted_pods(
        quota: Quota, arrivals: list[tuple[dict[str, int], QoSClass]], guaranteed_may_borrow: bool,
        burstable_may_borrow: bool, best_effort_may_borrow: bool) -> None:
    policy = QuotaPolicy(guaranteed_may_borrow=guaranteed_may_borrow,
                         burstable_may_borrow=burstable_may_borrow,
                         best_effort_may_borrow=best_effort_may_borrow)
    usage: dict[str, int] = {}
    for req, qos in arrivals:
        if admit(quota, usage, req, qos, policy).allowed:
            for r, v in req.items():
                usage[r] = usage.get(r, 0) + v
        for r, cap in quota.max.items():
            assert usage.get(r, 0) <= cap
    if not any(policy.may_borrow(q) for q in QoSClass):
        for r in filter(quota.governs, RES):
            assert usage.get(r, 0) <= quota.min_of(r)


@settings(max_examples=200)
@given(quotas(), pod_lists())
def test_removing_every_borrower_brings_usage_back_within_min(
        quota: Quota, pods: list[QuotaPod]) -> None:
    keys = {p.key for p in borrowed(quota, pods)}
    for r in filter(quota.governs, RES):
        kept = sum(p.requests.get(r, 0) for p in pods
                   if p.namespace == "ns" and p.key not in keys)
        assert kept <= quota.min_of(r)


@settings(max_examples=300)
@given(quotas(), requests_st, requests_st, qos_st, st.dictionaries(st.sampled_from(RES), amount),
       st.dictionaries(st.sampled_from(RES), amount))
def test_more_free_capacity_never_turns_an_allow_into_a_deny(
        quota: Quota, usage: dict[str, int], request: dict[str, int], qos: QoSClass,
        less_usage: dict[str, int], more_room: dict[str, int]) -> None:
    lower = {r: max(0, v - less_usage.get(r, 0)) for r, v in usage.items()}
    lo = {r: v + more_room.get(r, 0) for r, v in quota.min.items()}
    hi = {r: max(v + more_room.get(r, 0), lo.get(r, 0)) for r, v in quota.max.items()}
    roomier = Quota(quota.namespace, min=lo, max=hi)
    if admit(quota, usage, request, qos).allowed:
        assert admit(quota, lower, request, qos).allowed
        assert admit(roomier, usage, request, qos).allowed
        assert admit(roomier, lower, request, qos).allowed


@given(quotas(), requests_st, requests_st)
def test_guaranteed_is_admitted_whenever_a_burstable_or_best_effort_pod_would_be(
        quota: Quota, usage: dict[str, int], request: dict[str, int]) -> None:
    if admit(quota, usage, request, B).allowed or admit(quota, usage, request, BE).allowed:
        assert admit(quota, usage, request, G).allowed
