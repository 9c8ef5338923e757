"""The ``coordination.k8s.io/v1`` Lease API of :class:`ebb.testing.fake_kube.FakeKubeApiServer`.

:class:`LeaseRoutes` is mixed into the fake: it serves namespaced ``leases`` (get, create, replace,
merge patch, delete) over the fake's one ``resourceVersion`` counter and lock, with what upstream's
registry does (``pkg/registry/coordination/lease`` and the generic store, Kubernetes 1.30):

* **Get** answers the stored object, 404 ``NotFound`` (``leases.coordination.k8s.io "NAME" not
  found``) when absent.
* **Create** (POST) stores the body's ``metadata.name`` with a new ``uid``, ``resourceVersion`` and
  ``creationTimestamp``; 409 ``AlreadyExists`` when the name is taken; 400 when the body's namespace
  is not the URL's.
* **Replace** (PUT) needs ``metadata.name`` equal to the URL's (else 400) and, on an existing Lease,
  a ``metadata.resourceVersion`` (Lease does not allow unconditional updates: 422 ``must be specified
  for an update``) equal to the stored one (else 409 ``Conflict``, "the object has been modified");
  a ``metadata.uid`` is a precondition too (409 "Precondition failed: UID in precondition"). A PUT
  to an absent Lease creates it (201: Lease allows create-on-update) unless it carries a uid.
* **Patch** is a JSON merge patch (strategic merge is the same for LeaseSpec's scalars) with the same
  resourceVersion and uid preconditions when the patch names them; 404 when absent.
* **Delete** answers a ``Status`` of ``Success``; preconditions in the body's ``preconditions``.
* An update that changes nothing keeps the resourceVersion (etcd writes nothing), as upstream.
* **Validation** (422 ``Invalid``, as ``ValidateLease``): the name is a DNS-1123 subdomain,
  ``leaseDurationSeconds`` > 0, ``leaseTransitions`` >= 0, ``preferredHolder`` only with ``strategy``.
* **MicroTime.** ``acquireTime`` and ``renewTime`` are parsed as upstream's ``RFC3339Micro`` layout
  (``2006-01-02T15:04:05.000000Z07:00``): exactly six fraction digits and a ``Z`` or ``±hh:mm`` zone;
  anything else is a 400 decode error (so a client that drops a zero fraction, as Python's
  ``isoformat`` does, is refused here as by a real API server). Stored and answered in UTC
  (``...05.123456Z``). ``null`` leaves a field unset; unknown spec fields are dropped.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from ebb.testing.kube_wire import ApiError, merge_patch, now_text, status_body

__all__ = ["LeaseRoutes", "micro_time_text", "parse_micro_time"]

GROUP = "coordination.k8s.io"
RESOURCE = f"leases.{GROUP}"
_INT32_MAX = 2**31 - 1
_MICRO = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})(?:(Z)|([+-])(\d{2}):(\d{2}))")
_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SPEC_FIELDS = {"holderIdentity": str, "leaseDurationSeconds": int, "acquireTime": "micro", "renewTime": "micro",
                "leaseTransitions": int, "strategy": str, "preferredHolder": str}
_META_KEPT = ("labels", "annotations", "ownerReferences", "finalizers")
_MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def parse_micro_time(text: object) -> datetime:
    """A MicroTime as upstream's ``RFC3339Micro`` parse accepts it; ApiError 400 otherwise."""
    m = _MICRO.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise _decode_error(f'parsing time "{text}" as "{_LAYOUT}": cannot parse')
    y, mo, d, h, mi, s, frac, z, sign, zh, zm = m.groups()
    try:
        offset = timedelta(0) if z else (1 if sign == "+" else -1) * timedelta(hours=int(zh), minutes=int(zm))
        if not z and (int(zh) > 23 or int(zm) > 59):
            raise ValueError("zone offset out of range")
        return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), int(frac), tzinfo=timezone(offset))
    except ValueError as exc:
        raise _decode_error(f'parsing time "{text}": {exc}') from exc


def micro_time_text(when: datetime) -> str:
    """How upstream writes a MicroTime: UTC, six fraction digits, ``Z``."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _decode_error(why: str) -> ApiError:
    return ApiError(400, status_body(400, "BadRequest", f'Lease in version "v1" cannot be handled as a Lease: {why}'))


def _spec(raw: object) -> dict[str, Any]:
    """The body's ``spec`` decoded as the API server would: typed fields, MicroTimes in UTC, unknowns dropped."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _decode_error(f"spec: expected an object, got {type(raw).__name__}")
    out: dict[str, Any] = {}
    for key, kind in _SPEC_FIELDS.items():
        value = raw.get(key)
        if value is None:
            continue
        if kind == "micro":
            out[key] = micro_time_text(parse_micro_time(value))
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int) or not -_INT32_MAX - 1 <= value <= _INT32_MAX:
                raise _decode_error(f"spec.{key}: expected an int32, got {value!r}")
            out[key] = value
        elif not isinstance(value, str):
            raise _decode_error(f"spec.{key}: expected a string, got {value!r}")
        else:
            out[key] = value
    return out


def _invalid(name: str, field: str, detail: str, value: object = None, reason: str = "FieldValueInvalid") -> ApiError:
    said = f"Invalid value: {value}: {detail}" if reason == "FieldValueInvalid" else detail
    return ApiError(422, status_body(422, "Invalid", f'Lease.{GROUP} "{name}" is invalid: {field}: {said}',
                                     {"name": name, "group": GROUP, "kind": "Lease",
                                      "causes": [{"reason": reason, "message": said, "field": field}]}))


def _validate(lease: dict[str, Any]) -> None:
    """422 for what upstream's ``ValidateLease`` refuses."""
    name, spec = lease["metadata"]["name"], lease["spec"]
    if len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        raise _invalid(name, "metadata.name", "a lowercase RFC 1123 subdomain must consist of lower case "
                       "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                       f'"{name}"')
    if spec.get("leaseDurationSeconds", 1) <= 0:
        raise _invalid(name, "spec.leaseDurationSeconds", "must be greater than 0", spec["leaseDurationSeconds"])
    if spec.get("leaseTransitions", 0) < 0:
        raise _invalid(name, "spec.leaseTransitions", "must be greater than or equal to 0", spec["leaseTransitions"])
    if spec.get("preferredHolder") and not spec.get("strategy"):
        raise _invalid(name, "spec.preferredHolder", "Forbidden: may only be specified if `strategy` is defined",
                       reason="FieldValueForbidden")


def _not_found(name: str) -> ApiError:
    return ApiError(404, status_body(404, "NotFound", f'{RESOURCE} "{name}" not found',
                                     {"name": name, "group": GROUP, "kind": "leases"}))


def _conflict(name: str, why: str = _MODIFIED) -> ApiError:
    return ApiError(409, status_body(409, "Conflict", f'Operation cannot be fulfilled on {RESOURCE} "{name}": {why}',
                                     {"name": name, "group": GROUP, "kind": "leases"}))


def _check_uid(name: str, want: object, stored: dict[str, Any] | None) -> None:
    have = "" if stored is None else stored["metadata"]["uid"]
    if want and want != have:
        raise _conflict(name, f"Precondition failed: UID in precondition: {want}, UID in object meta: {have}")


class _LeaseHost(Protocol):
    """What :class:`LeaseRoutes` needs of the fake it is mixed into (held under the fake's lock)."""

    leases: dict[tuple[str, str], dict[str, Any]]
    _clock: Callable[[], float]

    def _next_rv(self) -> str: ...


class LeaseRoutes:
    """The fake's Lease handlers (module docstring); routed by :data:`ebb.testing.kube_wire.ROUTES`."""

    def lease(self: _LeaseHost, name: str, namespace: str = "default") -> dict[str, Any] | None:
        """The stored Lease (a copy), or None."""
        found = self.leases.get((namespace, name))
        return None if found is None else merge_patch({}, found)

    def _get_lease(self: _LeaseHost, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        found = self.leases.get((ns, name))
        if found is None:
            raise _not_found(name)
        return 200, found

    def _create_lease(self: _LeaseHost, *, ns: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        meta = _object_meta(body, ns)
        name = meta.get("name") or ""
        if not name:
            raise _invalid("", "metadata.name", "Required value: name or generateName is required",
                           reason="FieldValueRequired")
        if (ns, name) in self.leases:
            raise ApiError(409, status_body(409, "AlreadyExists", f'{RESOURCE} "{name}" already exists',
                                            {"name": name, "group": GROUP, "kind": "leases"}))
        return _store(self, ns, name, body, None)

    def _replace_lease(self: _LeaseHost, *, ns: str, name: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        meta = _object_meta(body, ns)
        if meta.get("name") != name:
            raise ApiError(400, status_body(400, "BadRequest", f"the name of the object ({meta.get('name') or ''}) "
                                            f"does not match the name on the URL ({name})"))
        old = self.leases.get((ns, name))
        _check_uid(name, meta.get("uid"), old)
        if old is not None:
            rv = meta.get("resourceVersion")
            if not rv:
                raise ApiError(422, status_body(422, "Invalid", f'{RESOURCE} "{name}" is invalid: '
                                                "metadata.resourceVersion: Invalid value: 0x0: must be specified for "
                                                "an update", {"name": name, "group": GROUP, "kind": "leases"}))
            if rv != old["metadata"]["resourceVersion"]:
                raise _conflict(name)
        return _store(self, ns, name, body, old)

    def _patch_lease(self: _LeaseHost, *, ns: str, name: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        old = self.leases.get((ns, name))
        if old is None:
            raise _not_found(name)
        meta = (body.get("metadata") or {}) if isinstance(body, dict) else {}
        _check_uid(name, meta.get("uid"), old)
        if meta.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
            raise _conflict(name)
        merged = merge_patch(old, body)
        if merged.get("metadata", {}).get("name", name) != name:
            raise ApiError(400, status_body(400, "BadRequest", "metadata.name: the name of a Lease cannot change"))
        return _store(self, ns, name, merged, old)

    def _delete_lease(self: _LeaseHost, *, ns: str, name: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        old = self.leases.get((ns, name))
        if old is None:
            raise _not_found(name)
        pre = (body.get("preconditions") or {}) if isinstance(body, dict) else {}
        _check_uid(name, pre.get("uid"), old)
        if pre.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
            raise _conflict(name, "Precondition failed: ResourceVersion in precondition: "
                            f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                            f"{old['metadata']['resourceVersion']}")
        del self.leases[(ns, name)]
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                     "details": {"name": name, "group": GROUP, "kind": "leases", "uid": old["metadata"]["uid"]}}


def _store(host: _LeaseHost, ns: str, name: str, body: dict[str, Any],
           old: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
    """Store ``body`` as Lease ``ns/name`` over ``old`` (None: create): system fields kept or made,
    validated, a new resourceVersion only when something changed (201 for a new Lease)."""
    meta = body.get("metadata") or {}
    lease: dict[str, Any] = {
        "kind": "Lease", "apiVersion": f"{GROUP}/v1",
        "metadata": {"name": name, "namespace": ns, **{k: meta[k] for k in _META_KEPT if meta.get(k)},
                     "uid": old["metadata"]["uid"] if old else str(uuid.uuid4()),
                     "creationTimestamp": old["metadata"]["creationTimestamp"] if old else now_text(host._clock())},
        "spec": _spec(body.get("spec")),
    }
    _validate(lease)
    if old is not None and {**old, "metadata": {**old["metadata"], "resourceVersion": None}} == \
            {**lease, "metadata": {**lease["metadata"], "resourceVersion": None}}:
        return 200, old  # nothing changed: etcd writes nothing, the resourceVersion stays
    lease["metadata"]["resourceVersion"] = host._next_rv()
    host.leases[(ns, name)] = lease
    return (201 if old is None else 200), lease


def _object_meta(body: Any, ns: str) -> dict[str, Any]:
    """The body's metadata; 400 for a body that is not an object or names another namespace."""
    if not isinstance(body, dict):
        raise _decode_error("expected a Lease object")
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict):
        raise _decode_error("metadata: expected an object")
    if meta.get("namespace") not in (None, "", ns):
        raise ApiError(400, status_body(400, "BadRequest", "the namespace of the provided object does not match "
                                        "the namespace sent on the request"))
    return meta
