"""Stateless Kubernetes wire helpers behind :class:`ebb.testing.fake_kube.FakeKubeApiServer`.

These functions hold no state and take no locks: the fake owns the objects, the resourceVersion
counter and the lock, and calls these with plain JSON-shaped ``dict``s. What they guarantee:

* :func:`parse_selector` matches the label-selector query forms ``k=v``, ``k==v``, ``k!=v``,
  ``k in (a,b)``, ``k notin (a,b)``, ``k`` and ``!k`` as upstream does; an empty selector
  matches every object.
* :func:`merge_patch` is an RFC 7386 JSON merge patch (``null`` deletes a key; lists and scalars
  replace). It is also how ``application/strategic-merge-patch+json`` is applied, which is exact
  for map-only bodies (the only kind :mod:`ebb.actuate.kubernetes` sends); :data:`PATCH_TYPES`
  names both accepted media types, anything else answers 415.
* :func:`status_body` builds upstream's ``Status`` failure body (``kind: Status``, ``status:
  Failure``, ``reason``, ``code``, optional ``details``); :class:`ApiError` carries one up to the
  dispatcher. :func:`check_resource_version` answers 409 Conflict with upstream's wording when a
  patch body's ``metadata.resourceVersion`` differs from the stored one (no precondition: no check).
* Timestamps are metav1.Time text: UTC, whole seconds (``2024-01-02T03:04:05Z``).
* :func:`json_handler` serves GET, POST, PUT, PATCH and DELETE as HTTP/1.1 keep-alive JSON: every answer has ``Content-Type:
  application/json`` and a ``Content-Length``; an idle connection closes after 30 s.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any

__all__ = ["PATCH_TYPES", "ROUTES", "ApiError", "Serve", "age_key", "check_disruption_budget",
           "check_resource_version", "deployment_body", "fault_response", "is_ready", "json_handler", "merge_patch",
           "node_body", "now_text", "parse_selector", "pod_body", "public_view", "rbac_permission", "scale_view",
           "status_body", "unsupported_media_type"]

PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
_NS = r"/namespaces/(?P<ns>[^/]+)"
ROUTES: tuple[tuple[str, re.Pattern[str], str, str], ...] = (
    # (verb, path pattern, route name = the fake's handler minus its "_", RBAC "group resource verb")
    ("GET", re.compile(rf"^/apis/apps/v1{_NS}/deployments/(?P<name>[^/]+)$"), "get_deployment",
     "apps deployments get"),
    ("PATCH", re.compile(rf"^/apis/apps/v1{_NS}/deployments/(?P<name>[^/]+)$"), "patch_deployment",
     "apps deployments patch"),
    ("GET", re.compile(rf"^/apis/apps/v1{_NS}/deployments/(?P<name>[^/]+)/scale$"), "get_scale",
     "apps deployments/scale get"),
    ("PATCH", re.compile(rf"^/apis/apps/v1{_NS}/deployments/(?P<name>[^/]+)/scale$"), "patch_scale",
     "apps deployments/scale patch"),
    ("GET", re.compile(rf"^/api/v1{_NS}/pods$"), "list_pods", " pods list"),
    ("PATCH", re.compile(rf"^/api/v1{_NS}/pods/(?P<name>[^/]+)$"), "patch_pod", " pods patch"),
    ("POST", re.compile(rf"^/api/v1{_NS}/pods/(?P<name>[^/]+)/eviction$"), "evict", " pods/eviction create"),
    ("GET", re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$"), "get_node", " nodes get"),
    ("GET", re.compile(rf"^/apis/discovery.k8s.io/v1{_NS}/endpointslices$"), "list_endpointslices",
     "discovery.k8s.io endpointslices list"),
    ("POST", re.compile(rf"^/api/v1{_NS}/events$"), "create_event", " events create"),
    ("GET", re.compile(rf"^/apis/coordination.k8s.io/v1{_NS}/leases/(?P<name>[^/]+)$"), "get_lease",
     "coordination.k8s.io leases get"),
    ("POST", re.compile(rf"^/apis/coordination.k8s.io/v1{_NS}/leases$"), "create_lease",
     "coordination.k8s.io leases create"),
    ("PUT", re.compile(rf"^/apis/coordination.k8s.io/v1{_NS}/leases/(?P<name>[^/]+)$"), "replace_lease",
     "coordination.k8s.io leases update"),
    ("PATCH", re.compile(rf"^/apis/coordination.k8s.io/v1{_NS}/leases/(?P<name>[^/]+)$"), "patch_lease",
     "coordination.k8s.io leases patch"),
    ("DELETE", re.compile(rf"^/apis/coordination.k8s.io/v1{_NS}/leases/(?P<name>[^/]+)$"), "delete_lease",
     "coordination.k8s.io leases delete"),
)
_MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"

Serve = Callable[[str, str, str, bytes], tuple[int, dict[str, Any], dict[str, str]]]
"""(method, raw path with query, Content-Type, raw body) → (status code, JSON body, extra headers)."""


def rbac_permission(method: str, path: str) -> tuple[str, str, str] | None:
    """(apiGroup, resource, verb) an RBAC rule must grant for this request; None if not served."""
    for verb, pattern, _, perm in ROUTES:
        if verb == method and pattern.match(path):
            group, resource, rbac_verb = perm.split(" ")
            return group, resource, rbac_verb
    return None


def now_text(t_s: float) -> str:
    # metav1.Time has second precision on the wire
    return datetime.fromtimestamp(int(t_s), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def parse_selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """The label-selector forms ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``."""
    reqs: list[tuple[str, str, frozenset[str]]] = []  # (key, op, values)
    for p in (p.strip() for p in re.split(r",(?![^()]*\))", text)):
        if not p:
            continue
        if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", p):
            reqs.append((m.group(1), m.group(2), frozenset(v.strip() for v in m.group(3).split(","))))
        elif m := re.fullmatch(r"([^=!\s]+)\s*(!=|==|=)\s*(\S*)", p):
            reqs.append((m.group(1), "notin" if m.group(2) == "!=" else "in", frozenset({m.group(3)})))
        elif p.startswith("!"):
            reqs.append((p[1:], "absent", frozenset()))
        else:
            reqs.append((p, "present", frozenset()))

    def holds(labels: Mapping[str, str], key: str, op: str, values: frozenset[str]) -> bool:
        if op == "present":
            return key in labels
        if op == "absent":
            return key not in labels
        return (labels.get(key) in values) == (op == "in")

    return lambda labels: all(holds(labels, *r) for r in reqs)


class ApiError(Exception):
    """An API failure to answer as ``code`` with a ``Status`` body (and extra headers)."""

    def __init__(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("message", ""))
        self.code, self.body, self.headers = code, body, headers or {}


def check_resource_version(kind: str, name: str, current: str, body: Any) -> None:
    """Raise 409 Conflict when ``body`` carries a ``metadata.resourceVersion`` other than ``current``."""
    want = body.get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
    if want is not None and want != current:
        raise ApiError(409, status_body(409, "Conflict", f'Operation cannot be fulfilled on {kind} "{name}": '
                                        f"{_MODIFIED}", {"name": name, "kind": kind}))


def unsupported_media_type() -> dict[str, Any]:
    return status_body(415, "UnsupportedMediaType", f"the body of the request was in an "
                       f"unknown format - accepted media types include: {', '.join(PATCH_TYPES)}")


def fault_response(status: int, retry_after_s: int | None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The answer to an injected fault: 409 Conflict, 429 with ``Retry-After`` (default 1 s), else InternalError."""
    if status == 409:
        return 409, status_body(409, "Conflict", f"Operation cannot be fulfilled: {_MODIFIED}"), {}
    if status == 429:
        ra = retry_after_s if retry_after_s is not None else 1
        return 429, status_body(429, "TooManyRequests", "Too many requests, please try again later.",
                                {"retryAfterSeconds": ra}), {"Retry-After": str(ra)}
    return status, status_body(status, "InternalError", "Internal error occurred: injected fault"), {}


def public_view(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without the fake's bookkeeping keys (those starting with ``_``)."""
    return {k: v for k, v in obj.items() if not k.startswith("_")}


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])


def age_key(obj: dict[str, Any]) -> tuple[str, str]:
    """Oldest first: creation time, then name."""
    return obj["metadata"]["creationTimestamp"], obj["metadata"]["name"]


def scale_view(dep: dict[str, Any]) -> dict[str, Any]:
    """The ``autoscaling/v1`` Scale of a Deployment; it shares the Deployment's resourceVersion."""
    sel = ",".join(f"{k}={v}" for k, v in sorted(dep["spec"]["selector"]["matchLabels"].items()))
    md = dep["metadata"]
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": md["name"], "namespace": md["namespace"], "uid": md["uid"],
                         "resourceVersion": md["resourceVersion"], "creationTimestamp": md["creationTimestamp"]},
            "spec": {"replicas": dep["spec"]["replicas"]},
            "status": {"replicas": dep["status"]["replicas"], "selector": sel}}


def node_body(name: str, labels: dict[str, str], resource_version: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "labels": labels,
                         "resourceVersion": resource_version}}


def deployment_body(namespace: str, name: str, replicas: int, labels: dict[str, str], resource_version: str, *,
                    created_s: float, template_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An ``apps/v1`` Deployment selecting ``labels`` and templating ``labels`` + ``template_labels``
    (upstream requires the selector to match the template's labels; the template may carry more)."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                     "resourceVersion": resource_version, "generation": 1, "labels": labels,
                     "annotations": {}, "creationTimestamp": now_text(created_s)},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": {**labels, **(template_labels or {})}},
                              "spec": {"containers": [{"name": "server", "image": "ebb/fake:1"}]}}},
        "status": {"replicas": replicas},
    }


def pod_body(namespace: str, name: str, dep: dict[str, Any], replica_set: str, node: str, resource_version: str, *,
             created_s: float, ready: bool, ip: str = "") -> dict[str, Any]:
    """A Running pod of ``dep`` owned by ``replica_set``, labelled from the pod template, with pod IP
    ``ip`` when given; ``_created_s`` is the fake's exact creation time."""
    conds = ([{"type": "Ready", "status": "True", "lastTransitionTime": now_text(created_s)}] if ready
             else [{"type": "Ready", "status": "False", "lastTransitionTime": now_text(created_s)}])
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                     "resourceVersion": resource_version, "creationTimestamp": now_text(created_s),
                     "labels": dict(dep["spec"]["template"]["metadata"]["labels"]), "annotations": {},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": replica_set, "uid": dep["metadata"]["uid"]}]},
        "spec": {"nodeName": node, "containers": [{"name": "server", "image": "ebb/fake:1"}]},
        "status": {"phase": "Running", "conditions": conds, **({"podIP": ip, "podIPs": [{"ip": ip}]} if ip else {})},
        "_created_s": created_s,
    }


def check_disruption_budget(budget: dict[str, Any], selected: list[dict[str, Any]], pod: dict[str, Any]) -> None:
    """Raise 429 (DisruptionBudget cause) unless evicting ``pod`` keeps ``budget`` met.

    ``selected``: the budget's non-terminating pods. healthy = Ready ones; desired = ``minAvailable``
    or (selected − ``maxUnavailable``), percentages rounded up; a Ready pod needs healthy − desired ≥ 1.
    """
    healthy = sum(1 for p in selected if is_ready(p))

    def count(v: int | str) -> int:
        if isinstance(v, str) and v.endswith("%"):
            return math.ceil(int(v[:-1]) * len(selected) / 100)
        return int(v)

    if budget["minAvailable"] is not None:
        desired = count(budget["minAvailable"])
    else:
        desired = max(0, len(selected) - count(budget["maxUnavailable"] if budget["maxUnavailable"] is not None
                                               else 0))
    # upstream: an unhealthy pod may go whenever the budget itself is met (IfHealthyBudget)
    allowed = healthy - desired >= 1 if is_ready(pod) else healthy >= desired
    if not allowed:
        cause = {"reason": "DisruptionBudget", "message": f"The disruption budget {budget['name']} needs {desired} "
                                                           f"healthy pods and has {healthy} currently"}
        raise ApiError(429, status_body(429, "TooManyRequests",
                                        "Cannot evict pod as it would violate the pod's disruption budget.",
                                        {"causes": [cause]}))


def json_handler(serve: Serve, conns: set[socket.socket], lock: threading.RLock) -> type[BaseHTTPRequestHandler]:
    """A request-handler class answering GET/POST/PUT/PATCH/DELETE through ``serve``; open connections are kept
    in ``conns`` (under ``lock``) so the owner can shut them down when it stops."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall
        timeout = 30.0  # an idle keep-alive connection ends after 30 s even if nobody stops the server

        def setup(self) -> None:
            super().setup()
            with lock:
                conns.add(self.connection)

        def finish(self) -> None:
            with lock:
                conns.discard(self.connection)
            super().finish()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            code, body, headers = serve(self.command, self.path, self.headers.get("Content-Type", ""), raw)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        do_GET = _handle
        do_PATCH = _handle
        do_POST = _handle
        do_PUT = _handle
        do_DELETE = _handle

    return Handler
