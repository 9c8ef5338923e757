"""KubeLeaseElector against the fake API server (official client, real HTTP on loopback), one round at a
time on fake monotonic clocks: client-go's acquire / renew / expiry rules, the local deadline, the fence."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

from ebb.errors import ConfigError, PermanentError  # noqa: E402
from ebb.ledger.kube_lease import KubeLeaseElector  # noqa: E402
from ebb.ledger.kube_lease_store import lease_name  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402

NS, NAME = "ebb-system", "ebb-serving-llm"
PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}"
LEASE_S, DEADLINE_S, RETRY_S = 15, 10.0, 2.0


class Clock:
    """A monotonic clock that moves only when told (one per candidate: their clocks are unrelated)."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        yield server


@pytest.fixture
def api(fake: FakeKubeApiServer) -> Iterator[Any]:
    c = client.ApiClient(fake.configuration())
    yield c
    c.close()


def candidate(api: Any, identity: str, clock: Clock, **kw: Any) -> KubeLeaseElector:
    e = KubeLeaseElector(NS, NAME, identity, api_client=api, clock=clock, wall_clock=lambda: 1_700_000_000.25 + clock.t,
                         rng=random.Random(0), **kw)
    e.start(background=False)
    return e


def spec(fake: FakeKubeApiServer) -> dict[str, Any]:
    found = fake.lease(NAME, NS)
    assert found is not None
    return dict(found["spec"])


def test_the_first_candidate_creates_the_lease_and_leads_with_token_one(fake: FakeKubeApiServer, api: Any) -> None:
    ca = Clock()
    a = candidate(api, "a", ca)
    assert not a.is_leader() and a.fence() is None
    pause = a.step()
    s = spec(fake)
    assert (s["holderIdentity"], s["leaseDurationSeconds"], s["leaseTransitions"]) == ("a", LEASE_S, 0)
    assert s["acquireTime"] == s["renewTime"] and re.fullmatch(r".*T.*\.\d{6}Z", s["renewTime"])
    fence = a.fence()
    assert fence is not None and (fence.key, fence.token, fence.holder) == (f"{NS}/{NAME}", 1, "a")
    assert fence.valid_until_s == pytest.approx(100.0 + DEADLINE_S)
    assert pause == pytest.approx(RETRY_S)


def test_a_renewal_moves_renew_time_and_the_deadline_but_keeps_acquire_time_and_the_token(
        fake: FakeKubeApiServer, api: Any) -> None:
    ca = Clock()
    a = candidate(api, "a", ca)
    a.step()
    first = spec(fake)
    ca.t += RETRY_S
    a.step()
    s = spec(fake)
    assert s["renewTime"] > first["renewTime"] and s["acquireTime"] == first["acquireTime"]
    assert s["leaseTransitions"] == 0
    fence = a.fence()
    assert fence is not None and fence.token == 1 and fence.valid_until_s == pytest.approx(102.0 + DEADLINE_S)


def test_a_follower_waits_while_the_record_keeps_changing_whatever_its_clock_says(
        fake: FakeKubeApiServer, api: Any) -> None:
    ca, cb = Clock(), Clock(5_000.0)
    a, b = candidate(api, "a", ca), candidate(api, "b", cb)
    a.step()
    for _ in range(20):  # 20 renewals, each seen by b 14 s (of b's clock) after the one before
        b.step()
        cb.t += LEASE_S - 1
        ca.t += RETRY_S
        a.step()
    b.step()
    assert a.is_leader() and not b.is_leader() and spec(fake)["holderIdentity"] == "a"


def test_a_follower_takes_an_unrenewed_lease_after_its_duration_on_the_follower_s_own_clock(
        fake: FakeKubeApiServer, api: Any) -> None:
    ca, cb = Clock(), Clock(7.0)
    a, b = candidate(api, "a", ca), candidate(api, "b", cb)
    a.step()
    b.step()  # b sees the record at its 7.0
    cb.t += LEASE_S - 0.001
    b.step()
    assert not b.is_leader(), "taken before leaseDurationSeconds had passed on b's clock"
    cb.t += 0.001
    b.step()
    s = spec(fake)
    assert b.is_leader() and (s["holderIdentity"], s["leaseTransitions"]) == ("b", 1)
    assert s["acquireTime"] == s["renewTime"]
    fence = b.fence()
    assert fence is not None and (fence.token, fence.holder) == (2, "b")


def test_a_leader_whose_renewals_fail_stops_leading_at_its_deadline_without_running_a_round(
        fake: FakeKubeApiServer, api: Any) -> None:
    ca = Clock()
    a = candidate(api, "a", ca)
    a.step()
    fake.inject("PUT", PATH, 500, times=100)
    for _ in range(4):
        ca.t += RETRY_S
        assert a.step() == pytest.approx(RETRY_S)  # an outage is retried, never raised
    assert a.is_leader()
    ca.t = 100.0 + DEADLINE_S - 0.001
    assert a.is_leader()
    ca.t = 100.0 + DEADLINE_S  # the deadline counts from the clock read before the last landed write
    assert not a.is_leader() and a.fence() is None


def test_a_leader_that_reads_another_holder_is_deposed_at_once(fake: FakeKubeApiServer, api: Any) -> None:
    ca = Clock()
    a = candidate(api, "a", ca)
    a.step()
    lease = fake.lease(NAME, NS)
    assert lease is not None
    client.CoordinationV1Api(api).patch_namespaced_lease(NAME, NS, {"spec": {"holderIdentity": "intruder",
                                                                             "leaseTransitions": 1}})
    ca.t += RETRY_S
    a.step()  # the fast-path PUT is a 409; the read shows the intruder
    assert not a.is_leader() and a.fence() is None
    assert spec(fake)["holderIdentity"] == "intruder"


def test_two_followers_racing_for_an_expired_lease_produce_one_leader_and_one_transition(
        fake: FakeKubeApiServer, api: Any) -> None:
    ca, cb, cc = Clock(), Clock(), Clock()
    a, b, c = candidate(api, "a", ca), candidate(api, "b", cb), candidate(api, "c", cc)
    a.step()
    b.step()
    c.step()
    cb.t += LEASE_S
    cc.t += LEASE_S
    fake.before("PUT", PATH, c.step)  # c reads and writes just before b's PUT is served
    b.step()
    s = spec(fake)
    assert (s["holderIdentity"], s["leaseTransitions"]) == ("c", 1)
    assert c.is_leader() and not b.is_leader()
    assert [r.status for r in fake.calls("PUT")][-2:] == [200, 409]


def test_resigning_releases_the_lease_so_a_follower_takes_it_at_its_next_try(fake: FakeKubeApiServer, api: Any) -> None:
    ca, cb = Clock(), Clock()
    a, b = candidate(api, "a", ca), candidate(api, "b", cb)
    a.step()
    b.step()
    assert a.resign() and not a.is_leader()
    s = spec(fake)
    assert (s["holderIdentity"], s["leaseDurationSeconds"], s["leaseTransitions"]) == ("", 1, 0)
    b.step()  # no time has passed on b's clock: a released Lease is free at once
    assert b.is_leader() and spec(fake)["leaseTransitions"] == 1
    assert a.step() > 1_000, "a resigned candidate does not campaign"


def test_a_former_leader_whose_deadline_passed_takes_its_unchallenged_lease_back_with_the_same_token(
        fake: FakeKubeApiServer, api: Any) -> None:
    ca = Clock()
    a = candidate(api, "a", ca)
    a.step()
    ca.t += 60.0  # paused far past its deadline; nobody else campaigned
    assert not a.is_leader()
    a.step()
    fence = a.fence()
    assert fence is not None and fence.token == 1 and spec(fake)["leaseTransitions"] == 0


def test_a_lease_deleted_under_its_leader_is_recreated_and_the_token_still_grows(fake: FakeKubeApiServer,
                                                                                 api: Any) -> None:
    ca, cb = Clock(), Clock()
    a, b = candidate(api, "a", ca), candidate(api, "b", cb)
    a.step()
    b.step()
    cb.t += LEASE_S
    b.step()  # b leads with token 2
    ca.t += RETRY_S
    a.step()  # a sees b
    client.CoordinationV1Api(api).delete_namespaced_lease(NAME, NS)
    cb.t += RETRY_S
    b.step()  # fast-path PUT: 409 (uid precondition); read: absent; create continues the count
    fence = b.fence()
    assert fence is not None and fence.token == 3 and spec(fake)["leaseTransitions"] == 2


def test_an_rbac_refusal_is_a_permanent_error_naming_the_rule_and_an_outage_is_not(
        fake: FakeKubeApiServer, api: Any) -> None:
    a = candidate(api, "a", Clock())
    fake.inject("GET", PATH, 403)
    with pytest.raises(PermanentError, match="coordination.k8s.io leases in namespace ebb-system"):
        a.step()
    fake.inject("GET", PATH, 503)
    assert a.step() == pytest.approx(RETRY_S) and not a.is_leader()
    a.step()
    assert a.is_leader()


def test_renew_and_acquire_times_are_micro_times_the_api_server_accepts_even_on_a_whole_second(
        fake: FakeKubeApiServer, api: Any) -> None:
    a = KubeLeaseElector(NS, NAME, "a", api_client=api, clock=Clock(), wall_clock=lambda: 1_700_000_000.0)
    a.start(background=False)
    a.step()
    # the official client sends a time without its zero fraction, which RFC3339Micro refuses: 1 µs later
    assert spec(fake)["renewTime"] == "2023-11-14T22:13:20.000001Z" and a.is_leader()


def test_the_background_thread_campaigns_and_close_releases(fake: FakeKubeApiServer, api: Any) -> None:
    with KubeLeaseElector(NS, NAME, "a", api_client=api, lease_duration_s=2, renew_deadline_s=1.0,
                          retry_period_s=0.2) as a:
        fence = a.campaign(timeout_s=20)
        assert fence is not None and fence.holder == "a"
    assert spec(fake)["holderIdentity"] == ""


@pytest.mark.parametrize(("kw", "said"), [({"lease_duration_s": 10, "renew_deadline_s": 10.0}, "--lease-renew-deadline-s"),
                                          ({"retry_period_s": 9.0}, "--lease-retry-s"),
                                          ({"lease_duration_s": 1.5}, "--lease-duration-s"),
                                          ({"lease_duration_s": 0}, "--lease-duration-s")])
def test_settings_that_break_client_go_s_ordering_are_refused(api: Any, kw: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        KubeLeaseElector(NS, NAME, "a", api_client=api, **kw)


def test_a_namespace_that_is_not_a_dns_label_is_refused(api: Any) -> None:
    with pytest.raises(ConfigError, match="DNS-1123"):
        KubeLeaseElector("Ebb_System", NAME, "a", api_client=api)


@given(st.text(min_size=1, max_size=300))
def test_a_lease_name_is_always_a_dns_1123_label_starting_with_ebb(target: str) -> None:
    name = lease_name(target)
    assert len(name) <= 63 and re.fullmatch(r"ebb-([a-z0-9-]*[a-z0-9])?", name) and "--" not in name[-10:]


def test_lease_names_read_as_their_target_and_keep_look_alike_targets_apart() -> None:
    assert lease_name("serving/llm").startswith("ebb-serving-llm-")
    assert lease_name("a-b/c") != lease_name("a/b-c")
    assert lease_name("serving/llm") == lease_name("serving/llm")
    assert len(lease_name("ns/" + "x" * 200)) == 63


def test_the_election_needs_exactly_get_create_and_update_on_leases_in_its_namespace(fake: FakeKubeApiServer,
                                                                                      api: Any) -> None:
    """What the Lease RBAC (deploy/overlays/ha/lease-rbac.yaml) must grant, from every path: create,
    renew (fast and slow), follow, take over, release."""
    from ebb.testing.fake_kube import rbac_permission

    ca, cb = Clock(), Clock()
    a, b = candidate(api, "a", ca), candidate(api, "b", cb)
    a.step()
    b.step()
    fake.inject("PUT", PATH, 409)  # a's fast path loses: the slow path reads and writes again
    ca.t += RETRY_S
    a.step()
    for _ in range(2):  # b sees a's renewal, then no other for a whole lease: it takes over
        cb.t += LEASE_S
        b.step()
    assert b.is_leader() and b.resign() and spec(fake)["holderIdentity"] == ""
    used = {(r.path.split("/namespaces/")[1].split("/")[0], rbac_permission(r.method, r.path)) for r in fake.requests}
    assert used == {(NS, ("coordination.k8s.io", "leases", verb)) for verb in ("get", "create", "update")}
