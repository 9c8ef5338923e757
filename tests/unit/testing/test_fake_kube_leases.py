"""The fake API server's ``coordination.k8s.io/v1`` Leases, driven through the official client
(``CoordinationV1Api``): what leader election relies on behaves as upstream's registry does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from ebb.testing.fake_kube import FakeKubeApiServer, rbac_permission  # noqa: E402
from ebb.testing.kube_leases import micro_time_text, parse_micro_time  # noqa: E402

NS = "ebb-system"
T0 = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        yield server


@pytest.fixture
def api(fake: FakeKubeApiServer) -> Iterator[Any]:
    c = client.ApiClient(fake.configuration())
    yield client.CoordinationV1Api(c)
    c.close()


def lease(name: str = "ebb-leader", holder: str = "a", *, transitions: int = 0, when: datetime = T0,
          duration_s: int = 15) -> Any:
    return client.V1Lease(metadata=client.V1ObjectMeta(name=name),
                          spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=duration_s,
                                                  acquire_time=when, renew_time=when, lease_transitions=transitions))


def refused(call: Any, *args: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as err:
        call(*args)
    return err.value.status, json.loads(err.value.body)


def test_a_lease_that_does_not_exist_is_404_not_found(api: Any) -> None:
    status, body = refused(api.read_namespaced_lease, "nope", NS)
    assert (status, body["reason"]) == (404, "NotFound")
    assert body["message"] == 'leases.coordination.k8s.io "nope" not found'
    assert body["details"] == {"name": "nope", "group": "coordination.k8s.io", "kind": "leases"}


def test_a_created_lease_reads_back_with_its_spec_and_server_made_metadata(api: Any) -> None:
    made = api.create_namespaced_lease(NS, lease(transitions=3))
    got = api.read_namespaced_lease("ebb-leader", NS)
    assert got.metadata.namespace == NS and got.metadata.uid and got.metadata.creation_timestamp is not None
    assert got.metadata.resource_version == made.metadata.resource_version
    assert (got.spec.holder_identity, got.spec.lease_duration_seconds, got.spec.lease_transitions) == ("a", 15, 3)
    assert got.spec.renew_time == T0 and got.spec.acquire_time == T0


def test_creating_a_lease_that_exists_is_409_already_exists_and_changes_nothing(api: Any) -> None:
    first = api.create_namespaced_lease(NS, lease(holder="a"))
    status, body = refused(api.create_namespaced_lease, NS, lease(holder="b"))
    assert (status, body["reason"]) == (409, "AlreadyExists")
    assert body["message"] == 'leases.coordination.k8s.io "ebb-leader" already exists'
    again = api.read_namespaced_lease("ebb-leader", NS)
    assert again.spec.holder_identity == "a" and again.metadata.resource_version == first.metadata.resource_version


def test_a_replace_with_the_current_resource_version_wins_and_a_stale_one_is_409_conflict(api: Any) -> None:
    seen = api.create_namespaced_lease(NS, lease(holder="a"))
    mine = api.read_namespaced_lease("ebb-leader", NS)
    mine.spec.holder_identity, mine.spec.lease_transitions = "b", 1
    won = api.replace_namespaced_lease("ebb-leader", NS, mine)
    assert won.spec.holder_identity == "b"
    assert int(won.metadata.resource_version) > int(seen.metadata.resource_version)
    seen.spec.holder_identity, seen.spec.lease_transitions = "c", 1  # raced on the same read
    status, body = refused(api.replace_namespaced_lease, "ebb-leader", NS, seen)
    assert (status, body["reason"]) == (409, "Conflict")
    assert "the object has been modified" in body["message"]
    assert api.read_namespaced_lease("ebb-leader", NS).spec.holder_identity == "b"


def test_a_replace_without_a_resource_version_is_refused_as_lease_allows_no_unconditional_update(api: Any) -> None:
    api.create_namespaced_lease(NS, lease())
    status, body = refused(api.replace_namespaced_lease, "ebb-leader", NS, lease(holder="b"))
    assert (status, body["reason"]) == (422, "Invalid")
    assert "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update" in body["message"]


def test_a_replace_of_an_absent_lease_creates_it_unless_it_names_a_uid(api: Any, fake: FakeKubeApiServer) -> None:
    body = lease(name="fresh", holder="a")
    assert api.replace_namespaced_lease("fresh", NS, body).spec.holder_identity == "a"
    assert fake.calls("PUT")[-1].status == 201
    gone = lease(name="gone")
    gone.metadata.uid = "0f0e0d0c-0000-0000-0000-000000000000"  # the uid of a Lease deleted since
    status, err = refused(api.replace_namespaced_lease, "gone", NS, gone)
    assert status == 409 and "Precondition failed: UID in precondition" in err["message"]
    assert fake.lease("gone", NS) is None


def test_a_replace_whose_name_differs_from_the_url_is_400(api: Any) -> None:
    api.create_namespaced_lease(NS, lease())
    status, body = refused(api.replace_namespaced_lease, "other", NS, lease())
    assert (status, body["reason"]) == (400, "BadRequest")
    assert "does not match the name on the URL (other)" in body["message"]


def test_an_update_that_changes_nothing_keeps_the_resource_version(api: Any) -> None:
    made = api.create_namespaced_lease(NS, lease())
    same = api.replace_namespaced_lease("ebb-leader", NS, made)
    assert same.metadata.resource_version == made.metadata.resource_version


def test_a_merge_patch_with_a_stale_resource_version_is_409_and_a_fresh_one_applies(api: Any) -> None:
    made = api.create_namespaced_lease(NS, lease())
    patched = api.patch_namespaced_lease("ebb-leader", NS, {"spec": {"leaseTransitions": 4},
                                                            "metadata": {"resourceVersion": made.metadata.resource_version}})
    assert patched.spec.lease_transitions == 4 and patched.spec.holder_identity == "a"
    status, _ = refused(api.patch_namespaced_lease, "ebb-leader", NS,
                        {"spec": {"leaseTransitions": 5}, "metadata": {"resourceVersion": made.metadata.resource_version}})
    assert status == 409
    assert refused(api.patch_namespaced_lease, "absent", NS, {"spec": {"leaseTransitions": 1}})[0] == 404


def test_micro_times_are_refused_unless_they_carry_six_fraction_digits(api: Any) -> None:
    """Go's RFC3339Micro layout needs ``.000000``: Python's isoformat drops a zero fraction, and a real
    API server answers 400 to that; so does the fake."""
    whole = T0.replace(microsecond=0)
    status, body = refused(api.create_namespaced_lease, NS, lease(when=whole))
    assert (status, body["reason"]) == (400, "BadRequest") and "2006-01-02T15:04:05.000000Z07:00" in body["message"]
    raw = {"metadata": {"name": "raw"}, "spec": {"holderIdentity": "a", "renewTime": "2024-05-06T09:08:09.000001+02:00"}}
    api.create_namespaced_lease(NS, raw)
    assert api.read_namespaced_lease("raw", NS).spec.renew_time == datetime(2024, 5, 6, 7, 8, 9, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("text", ["2024-05-06T07:08:09Z", "2024-05-06T07:08:09.1234567Z", "2024-05-06T07:08:09.123Z",
                                  "2024-05-06 07:08:09.123456Z", "2024-13-06T07:08:09.123456Z", "2024-05-06T07:08:09.123456",
                                  "2024-05-06T07:08:09.123456z", 1715000000])
def test_the_micro_time_parser_refuses_what_go_s_layout_refuses(text: object) -> None:
    from ebb.testing.kube_wire import ApiError
    with pytest.raises(ApiError) as err:
        parse_micro_time(text)
    assert err.value.code == 400


def test_micro_times_are_answered_in_utc_with_six_digits() -> None:
    east = T0.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert micro_time_text(parse_micro_time(micro_time_text(east))) == "2024-05-06T07:08:09.123456Z"


@pytest.mark.parametrize(("spec", "field"), [({"leaseDurationSeconds": 0}, "spec.leaseDurationSeconds"),
                                             ({"leaseTransitions": -1}, "spec.leaseTransitions"),
                                             ({"preferredHolder": "b"}, "spec.preferredHolder")])
def test_an_invalid_spec_is_422_naming_the_field(api: Any, spec: dict[str, Any], field: str) -> None:
    status, body = refused(api.create_namespaced_lease, NS, {"metadata": {"name": "bad"}, "spec": spec})
    assert (status, body["reason"]) == (422, "Invalid") and body["details"]["causes"][0]["field"] == field


def test_a_name_that_is_not_a_dns_subdomain_is_422(api: Any) -> None:
    status, body = refused(api.create_namespaced_lease, NS, {"metadata": {"name": "Not_OK"}, "spec": {}})
    assert status == 422 and "RFC 1123 subdomain" in body["message"]


def test_delete_removes_the_lease_and_honours_its_preconditions(api: Any) -> None:
    made = api.create_namespaced_lease(NS, lease())
    stale = client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version="1"))
    with pytest.raises(ApiException) as err:
        api.delete_namespaced_lease("ebb-leader", NS, body=stale)
    assert err.value.status == 409
    done = api.delete_namespaced_lease("ebb-leader", NS)
    assert done["status"] == "Success" and done["details"]["uid"] == made.metadata.uid
    assert refused(api.read_namespaced_lease, "ebb-leader", NS)[0] == 404


def test_every_lease_request_maps_to_its_rbac_rule(api: Any, fake: FakeKubeApiServer) -> None:
    api.create_namespaced_lease(NS, lease())
    got = api.read_namespaced_lease("ebb-leader", NS)
    api.replace_namespaced_lease("ebb-leader", NS, got)
    api.patch_namespaced_lease("ebb-leader", NS, {"spec": {"leaseTransitions": 2}})
    api.delete_namespaced_lease("ebb-leader", NS)
    perms = [rbac_permission(r.method, r.path) for r in fake.requests]
    assert perms == [("coordination.k8s.io", "leases", v) for v in ("create", "get", "update", "patch", "delete")]
