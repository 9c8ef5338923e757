"""A small in-process fake Kubernetes API server: exactly the endpoints :mod:`ebb.actuate.kubernetes` calls.

No real API server can run on the build machines, so the Kubernetes actuator is tested against
this fake. It is **not** a Kubernetes API server: it serves plain HTTP on 127.0.0.1 (no TLS, no
authentication, no authorization — RBAC is checked separately, by mapping :attr:`requests` to the
rules in ``deploy/rbac.yaml``), keeps everything in memory, and implements these nine endpoints and
nothing more (anything else answers 404, an unsupported patch type 415):

=======  =====================================================================  ==================
verb     path                                                                   RBAC (group/resource verb)
=======  =====================================================================  ==================
GET      ``/apis/apps/v1/namespaces/{ns}/deployments/{name}``                   apps/deployments get
PATCH    ``/apis/apps/v1/namespaces/{ns}/deployments/{name}``                   apps/deployments patch
GET      ``/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale``             apps/deployments/scale get
PATCH    ``/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale``             apps/deployments/scale patch
GET      ``/api/v1/namespaces/{ns}/pods?labelSelector=...``                     pods list
PATCH    ``/api/v1/namespaces/{ns}/pods/{name}``                                pods patch
POST     ``/api/v1/namespaces/{ns}/pods/{name}/eviction``                       pods/eviction create
GET      ``/api/v1/nodes/{name}``                                               nodes get
POST     ``/api/v1/namespaces/{ns}/events``                                     events create
=======  =====================================================================  ==================

What it models, roughly as upstream does:

* **Optimistic concurrency.** One global ``resourceVersion`` counter; a PATCH whose body carries
  ``metadata.resourceVersion`` different from the stored one answers 409 with upstream's Conflict
  ``Status`` ("the object has been modified; please apply your changes to the latest version...").
  ``/scale`` shares the Deployment's resourceVersion. Patches are JSON merge patches (RFC 7386);
  ``application/strategic-merge-patch+json`` is accepted and applied the same way, which is exact
  for the map-only bodies the actuator sends.
* **The ReplicaSet controller**, synchronously after every change and lazily before every request:
  too few non-terminating pods → create pods (Ready after ``ready_delay_s``); too many → delete
  by upstream's ranking as far as it matters here: not-Ready first, then lowest
  ``controller.kubernetes.io/pod-deletion-cost``, then newest (creation time, then name). Deleted
  and evicted pods get ``deletionTimestamp`` and vanish after ``termination_grace_s``.
* **Eviction** (policy/v1) honours PodDisruptionBudgets (:meth:`add_pdb`): for each budget
  selecting the pod, healthy = Ready, non-terminating selected pods; desired = ``minAvailable``
  or (selected pods − ``maxUnavailable``) (integers or percentages, rounded up as upstream);
  evicting a healthy pod needs ``healthy − desired ≥ 1``. Blocked → 429 with upstream's message
  "Cannot evict pod as it would violate the pod's disruption budget." and a ``DisruptionBudget``
  cause. More than one budget → 500, as upstream refuses.
* **Fault injection**: :meth:`inject` makes the next N requests to a path answer 409, 429 (with
  ``Retry-After``) or 500; :meth:`before` runs a callback before a matching request is served
  (a concurrent writer). :attr:`requests` logs every request (verb, path, status, body).
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeKubeApiServer", "Fault", "RequestRecord", "rbac_permission"]

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
ZONE_LABEL = "topology.kubernetes.io/zone"
_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
_NS = r"/namespaces/(?P<ns>[^/]+)"
_ROUTES: tuple[tuple[str, re.Pattern[str], str, str], ...] = (
    # (verb, path pattern, handler, RBAC "group/resource[/subresource] verb")
    ("GET", re.compile(rf"^/apis/apps/v1{_NS}/deployments/(?P<name>[^/]+)$"), "_get_deployment",
     "apps deployments get"),
    ("PATCH", re.compile(rf"^/apis/apps/v1{_NS}/deployments/(?P<name>[^/]+)$"), "_patch_deployment",
     "apps deployments patch"),
    ("GET", re.compile(rf"^/apis/apps/v1{_NS}/deployments/(?P<name>[^/]+)/scale$"), "_get_scale",
     "apps deployments/scale get"),
    ("PATCH", re.compile(rf"^/apis/apps/v1{_NS}/deployments/(?P<name>[^/]+)/scale$"), "_patch_scale",
     "apps deployments/scale patch"),
    ("GET", re.compile(rf"^/api/v1{_NS}/pods$"), "_list_pods", " pods list"),
    ("PATCH", re.compile(rf"^/api/v1{_NS}/pods/(?P<name>[^/]+)$"), "_patch_pod", " pods patch"),
    ("POST", re.compile(rf"^/api/v1{_NS}/pods/(?P<name>[^/]+)/eviction$"), "_evict", " pods/eviction create"),
    ("GET", re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$"), "_get_node", " nodes get"),
    ("POST", re.compile(rf"^/api/v1{_NS}/events$"), "_create_event", " events create"),
)


def rbac_permission(method: str, path: str) -> tuple[str, str, str] | None:
    """(apiGroup, resource, verb) an RBAC rule must grant for this request; None if not served."""
    for verb, pattern, _, perm in _ROUTES:
        if verb == method and pattern.match(path):
            group, resource, rbac_verb = perm.split(" ")
            return group, resource, rbac_verb
    return None


@dataclass(frozen=True)
class RequestRecord:
    """One request the fake answered."""

    method: str
    path: str
    status: int
    query: Mapping[str, str] = field(default_factory=dict)
    content_type: str = ""
    body: Any = None
    """The parsed JSON body (None for GET)."""


@dataclass
class Fault:
    """Answer the next ``times`` ``method`` requests to ``path`` with ``status``."""

    method: str
    path: str
    status: int
    times: int = 1
    retry_after_s: int | None = None


def _now_text(t_s: float) -> str:
    # metav1.Time has second precision on the wire
    return datetime.fromtimestamp(int(t_s), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def _parse_selector(text: str) -> Callable[[Mapping[str, str]], bool]:
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


class _Error(Exception):
    def __init__(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("message", ""))
        self.code, self.body, self.headers = code, body, headers or {}


class FakeKubeApiServer:
    """See the module docstring. Use as a context manager; :meth:`configuration` points a client at it."""

    def __init__(self, *, ready_delay_s: float = 0.0, termination_grace_s: float = 0.0,
                 clock: Callable[[], float] | None = None) -> None:
        self.ready_delay_s = ready_delay_s
        self.termination_grace_s = termination_grace_s
        self._clock = clock or time.time
        self._lock = threading.RLock()
        self._rv = 100
        self._counter = 0
        self.deployments: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pdbs: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.requests: list[RequestRecord] = []
        self._faults: list[Fault] = []
        self._hooks: list[tuple[str, str, Callable[[], None], list[int]]] = []
        self._conns: set[socket.socket] = set()
        self.port = 0
        self.url = ""
        """``http://127.0.0.1:PORT`` once started (port chosen by the OS: no race for a free port)."""
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeKubeApiServer:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="fake-kube", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        with self._lock:
            conns = list(self._conns)
        for c in conns:  # wake handler threads parked on idle keep-alive connections
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None

    def __enter__(self) -> FakeKubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` for this server (plain http, no auth, no retries)."""
        from kubernetes import client

        cfg = client.Configuration(host=self.url)
        cfg.retries = False
        return cfg

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig file naming this server (context ``fake``), for ``load_kube_config``."""
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
               "users": [{"name": "fake", "user": {}}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}
        path.write_text(json.dumps(doc), encoding="utf-8")
        return path

    # -- test set-up and knobs -----------------------------------------------------------------
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def add_node(self, name: str, zone: str = "") -> None:
        labels = {ZONE_LABEL: zone} if zone else {}
        with self._lock:
            self.nodes[name] = {"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": name, "uid": str(uuid.uuid4()), "labels": labels,
                                             "resourceVersion": self._next_rv()}}

    def add_deployment(self, name: str, replicas: int, *, namespace: str = "default",
                       labels: Mapping[str, str] | None = None) -> None:
        """A Deployment with ``replicas`` pods, Ready at once, created one second apart (oldest first)."""
        labels = dict(labels or {"app": name})
        now = self._clock()
        with self._lock:
            self.deployments[(namespace, name)] = {
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                             "resourceVersion": self._next_rv(), "generation": 1, "labels": labels,
                             "annotations": {}, "creationTimestamp": _now_text(now - replicas - 60)},
                "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels},
                                      "spec": {"containers": [{"name": "server", "image": "ebb/fake:1"}]}}},
                "status": {"replicas": replicas},
            }
            for i in range(replicas):
                self._create_pod(namespace, name, created_s=now - replicas + i, ready=True)

    def add_pdb(self, name: str, selector: Mapping[str, str], *, namespace: str = "default",
                min_available: int | str | None = None, max_unavailable: int | str | None = None) -> None:
        with self._lock:
            self.pdbs[(namespace, name)] = {"name": name, "selector": dict(selector),
                                            "minAvailable": min_available, "maxUnavailable": max_unavailable}

    def set_replicas(self, name: str, replicas: int, *, namespace: str = "default") -> None:
        """Another writer (an HPA, a human) changes ``spec.replicas``."""
        with self._lock:
            dep = self.deployments[(namespace, name)]
            dep["spec"]["replicas"] = replicas
            dep["metadata"]["resourceVersion"] = self._next_rv()
            self._reconcile()

    def touch(self, name: str, *, namespace: str = "default") -> None:
        """An unrelated write (the deployment controller updating status) bumps resourceVersion."""
        with self._lock:
            self.deployments[(namespace, name)]["metadata"]["resourceVersion"] = self._next_rv()

    def inject(self, method: str, path: str, status: int, *, times: int = 1,
               retry_after_s: int | None = None) -> Fault:
        """The next ``times`` matching requests answer ``status`` (409, 429, 500...) and change nothing."""
        fault = Fault(method, path, status, times, retry_after_s)
        with self._lock:
            self._faults.append(fault)
        return fault

    def before(self, method: str, path: str, action: Callable[[], None], *, times: int = 1) -> None:
        """Run ``action`` just before serving the next ``times`` matching requests."""
        with self._lock:
            self._hooks.append((method, path, action, [times]))

    def pod_names(self, namespace: str = "default", *, terminating: bool | None = None) -> list[str]:
        """Pod names, oldest first; ``terminating`` filters on deletionTimestamp."""
        with self._lock:
            self._reconcile()
            pods = [p for (ns, _), p in self.pods.items() if ns == namespace
                    and (terminating is None or ("deletionTimestamp" in p["metadata"]) == terminating)]
            return [p["metadata"]["name"] for p in sorted(pods, key=self._age_key)]

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        with self._lock:
            return self.pods.get((namespace, name))

    def calls(self, method: str | None = None, path_suffix: str = "") -> list[RequestRecord]:
        """Logged requests, filtered by verb and path ending."""
        return [r for r in list(self.requests)
                if (method is None or r.method == method) and r.path.endswith(path_suffix)]

    # -- the simulated controllers ------------------------------------------------------------
    @staticmethod
    def _age_key(p: dict[str, Any]) -> tuple[str, str]:
        return p["metadata"]["creationTimestamp"], p["metadata"]["name"]

    def _create_pod(self, namespace: str, deployment: str, *, created_s: float, ready: bool) -> None:
        self._counter += 1
        name = f"{deployment}-5d8f7c-{self._counter:05d}"
        dep = self.deployments[(namespace, deployment)]
        nodes = sorted(self.nodes)
        node = nodes[(self._counter - 1) % len(nodes)] if nodes else ""
        conds = ([{"type": "Ready", "status": "True", "lastTransitionTime": _now_text(created_s)}] if ready
                 else [{"type": "Ready", "status": "False", "lastTransitionTime": _now_text(created_s)}])
        self.pods[(namespace, name)] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                         "resourceVersion": self._next_rv(), "creationTimestamp": _now_text(created_s),
                         "labels": dict(dep["spec"]["selector"]["matchLabels"]), "annotations": {},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": f"{deployment}-5d8f7c", "uid": dep["metadata"]["uid"]}]},
            "spec": {"nodeName": node, "containers": [{"name": "server", "image": "ebb/fake:1"}]},
            "status": {"phase": "Running", "conditions": conds},
            "_created_s": created_s,
        }

    @staticmethod
    def _ready(p: dict[str, Any]) -> bool:
        return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])

    def _terminate(self, p: dict[str, Any], now: float) -> None:
        p["metadata"]["deletionTimestamp"] = _now_text(now)
        p["metadata"]["resourceVersion"] = self._next_rv()
        p["_gone_at_s"] = now + self.termination_grace_s

    def _reconcile(self) -> None:
        now = self._clock()
        for key, p in list(self.pods.items()):
            if "_gone_at_s" in p and now >= p["_gone_at_s"]:
                del self.pods[key]
            elif not self._ready(p) and now >= p["_created_s"] + self.ready_delay_s:
                p["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": _now_text(now)}]
        for (ns, name), dep in self.deployments.items():
            match = _parse_selector(",".join(f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items()))
            live = [p for (pns, _), p in self.pods.items()
                    if pns == ns and match(p["metadata"]["labels"]) and "deletionTimestamp" not in p["metadata"]]
            want = int(dep["spec"]["replicas"])
            for _ in range(want - len(live)):
                self._create_pod(ns, name, created_s=now, ready=self.ready_delay_s <= 0)
            if len(live) > want:
                def rank(p: dict[str, Any]) -> tuple[bool, int, float]:
                    try:
                        cost = int(p["metadata"]["annotations"].get(DELETION_COST, "0"))
                    except ValueError:
                        cost = 0
                    return self._ready(p), cost, -p["_created_s"]
                # sort by name (newest-looking last name first) then stably by rank: ties go newest first
                by_name = sorted(live, key=lambda p: p["metadata"]["name"], reverse=True)
                for p in sorted(by_name, key=rank)[: len(live) - want]:
                    self._terminate(p, now)
            for key, p in list(self.pods.items()):
                if "_gone_at_s" in p and now >= p["_gone_at_s"]:
                    del self.pods[key]
            dep["status"]["replicas"] = sum(1 for (pns, _n), p in self.pods.items()
                                            if pns == ns and match(p["metadata"]["labels"]))

    # -- request handling -----------------------------------------------------------------------
    def _serve(self, method: str, raw_path: str, ctype: str, raw_body: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
        parts = urlsplit(raw_path)
        path, query = parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()}
        body: Any = None
        if raw_body:
            try:
                body = json.loads(raw_body)
            except ValueError:
                body = raw_body.decode("utf-8", "replace")
        for m, p, action, left in list(self._hooks):
            if m == method and p == path and left[0] > 0:
                left[0] -= 1
                action()
        with self._lock:
            code, out, headers = self._dispatch(method, path, query, ctype, body)
            self.requests.append(RequestRecord(method, path, code, query, ctype, body))
        return code, out, headers

    def _dispatch(self, method: str, path: str, query: dict[str, str], ctype: str,
                  body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        for fault in self._faults:
            if fault.method == method and fault.path == path and fault.times > 0:
                fault.times -= 1
                return self._fault_answer(fault)
        self._reconcile()
        for verb, pattern, handler, _ in _ROUTES:
            m = pattern.match(path)
            if verb == method and m:
                if method == "PATCH" and ctype.split(";")[0].strip() not in _PATCH_TYPES:
                    return 415, _status(415, "UnsupportedMediaType", f"the body of the request was in an "
                                        f"unknown format - accepted media types include: {', '.join(_PATCH_TYPES)}"), {}
                try:
                    code, out = getattr(self, handler)(query=query, body=body, **m.groupdict())
                    return code, out, {}
                except _Error as err:
                    return err.code, err.body, err.headers
        return 404, _status(404, "NotFound", "the server could not find the requested resource"), {}

    @staticmethod
    def _fault_answer(fault: Fault) -> tuple[int, dict[str, Any], dict[str, str]]:
        if fault.status == 409:
            return 409, _status(409, "Conflict", "Operation cannot be fulfilled: the object has been modified; "
                                "please apply your changes to the latest version and try again"), {}
        if fault.status == 429:
            ra = fault.retry_after_s if fault.retry_after_s is not None else 1
            return 429, _status(429, "TooManyRequests", "Too many requests, please try again later.",
                                {"retryAfterSeconds": ra}), {"Retry-After": str(ra)}
        return fault.status, _status(fault.status, "InternalError", "Internal error occurred: injected fault"), {}

    def _deployment(self, ns: str, name: str) -> dict[str, Any]:
        dep = self.deployments.get((ns, name))
        if dep is None:
            raise _Error(404, _status(404, "NotFound", f'deployments.apps "{name}" not found',
                                      {"name": name, "group": "apps", "kind": "deployments"}))
        return dep

    @staticmethod
    def _check_rv(kind: str, name: str, current: str, body: Any) -> None:
        want = body.get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
        if want is not None and want != current:
            raise _Error(409, _status(409, "Conflict", f'Operation cannot be fulfilled on {kind} "{name}": the object '
                                      "has been modified; please apply your changes to the latest version and try again",
                                      {"name": name, "kind": kind}))

    @staticmethod
    def _public(obj: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if not k.startswith("_")}

    def _get_deployment(self, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        return 200, self._deployment(ns, name)

    def _patch_deployment(self, *, ns: str, name: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        dep = self._deployment(ns, name)
        self._check_rv("deployments.apps", name, dep["metadata"]["resourceVersion"], body)
        merged = _merge(dep, body)
        merged["metadata"]["resourceVersion"] = self._next_rv()
        self.deployments[(ns, name)] = merged
        self._reconcile()
        return 200, merged

    def _scale_view(self, dep: dict[str, Any]) -> dict[str, Any]:
        sel = ",".join(f"{k}={v}" for k, v in sorted(dep["spec"]["selector"]["matchLabels"].items()))
        md = dep["metadata"]
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": md["name"], "namespace": md["namespace"], "uid": md["uid"],
                             "resourceVersion": md["resourceVersion"], "creationTimestamp": md["creationTimestamp"]},
                "spec": {"replicas": dep["spec"]["replicas"]},
                "status": {"replicas": dep["status"]["replicas"], "selector": sel}}

    def _get_scale(self, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        return 200, self._scale_view(self._deployment(ns, name))

    def _patch_scale(self, *, ns: str, name: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        dep = self._deployment(ns, name)
        self._check_rv("deployments.apps", name, dep["metadata"]["resourceVersion"], body)
        scale = _merge(self._scale_view(dep), body)
        replicas = scale.get("spec", {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise _Error(422, _status(422, "Invalid", f'Scale.autoscaling "{name}" is invalid: spec.replicas: '
                                      f"Invalid value: {replicas!r}: must be greater than or equal to 0"))
        dep["spec"]["replicas"] = replicas
        dep["metadata"]["resourceVersion"] = self._next_rv()
        self._reconcile()
        return 200, self._scale_view(dep)

    def _list_pods(self, *, ns: str, query: dict[str, str], **_: Any) -> tuple[int, dict[str, Any]]:
        match = _parse_selector(query.get("labelSelector", ""))
        items = [self._public(p) for (pns, _n), p in sorted(self.pods.items(), key=lambda kv: self._age_key(kv[1]))
                 if pns == ns and match(p["metadata"]["labels"])]
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self._rv)},
                     "items": items}

    def _pod_or_404(self, ns: str, name: str) -> dict[str, Any]:
        pod = self.pods.get((ns, name))
        if pod is None:
            raise _Error(404, _status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
        return pod

    def _patch_pod(self, *, ns: str, name: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        pod = self._pod_or_404(ns, name)
        self._check_rv("pods", name, pod["metadata"]["resourceVersion"], body)
        merged = _merge(pod, body)
        merged["metadata"]["resourceVersion"] = self._next_rv()
        self.pods[(ns, name)] = merged
        return 200, self._public(merged)

    def _evict(self, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        pod = self._pod_or_404(ns, name)
        if "deletionTimestamp" not in pod["metadata"]:
            budgets = [b for (bns, _n), b in self.pdbs.items()
                       if bns == ns and all(pod["metadata"]["labels"].get(k) == v for k, v in b["selector"].items())]
            if len(budgets) > 1:
                raise _Error(500, _status(500, "InternalError", "This pod has more than one PodDisruptionBudget, "
                                          "which the eviction subresource does not support."))
            if budgets:
                self._check_budget(ns, budgets[0], pod)
            self._terminate(pod, self._clock())
            self._reconcile()
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _check_budget(self, ns: str, b: dict[str, Any], pod: dict[str, Any]) -> None:
        selected = [p for (pns, _n), p in self.pods.items() if pns == ns and "deletionTimestamp" not in p["metadata"]
                    and all(p["metadata"]["labels"].get(k) == v for k, v in b["selector"].items())]
        healthy = sum(1 for p in selected if self._ready(p))

        def count(v: int | str) -> int:
            if isinstance(v, str) and v.endswith("%"):
                return math.ceil(int(v[:-1]) * len(selected) / 100)
            return int(v)

        if b["minAvailable"] is not None:
            desired = count(b["minAvailable"])
        else:
            desired = max(0, len(selected) - count(b["maxUnavailable"] if b["maxUnavailable"] is not None else 0))
        # upstream: an unhealthy pod may go whenever the budget itself is met (IfHealthyBudget)
        allowed = healthy - desired >= 1 if self._ready(pod) else healthy >= desired
        if not allowed:
            raise _Error(429, _status(429, "TooManyRequests",
                                      "Cannot evict pod as it would violate the pod's disruption budget.",
                                      {"causes": [{"reason": "DisruptionBudget",
                                                   "message": f"The disruption budget {b['name']} needs {desired} "
                                                              f"healthy pods and has {healthy} currently"}]}))

    def _get_node(self, *, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        node = self.nodes.get(name)
        if node is None:
            raise _Error(404, _status(404, "NotFound", f'nodes "{name}" not found', {"name": name, "kind": "nodes"}))
        return 200, node

    def _create_event(self, *, ns: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(body, dict):
            raise _Error(400, _status(400, "BadRequest", "expected an Event object"))
        name = body.get("metadata", {}).get("name", "")
        if any(e["metadata"].get("name") == name and e["metadata"].get("namespace") == ns for e in self.events):
            raise _Error(409, _status(409, "AlreadyExists", f'events "{name}" already exists',
                                      {"name": name, "kind": "events"}))
        ev = _merge(body, {"metadata": {"namespace": ns, "uid": str(uuid.uuid4()), "resourceVersion": self._next_rv()}})
        self.events.append(ev)
        return 201, ev



class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall
    server_fake: FakeKubeApiServer
    timeout = 30.0  # an idle keep-alive connection ends after 30 s even if nobody stops the server

    def setup(self) -> None:
        super().setup()
        with self.server_fake._lock:
            self.server_fake._conns.add(self.connection)

    def finish(self) -> None:
        with self.server_fake._lock:
            self.server_fake._conns.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        code, body, headers = self.server_fake._serve(self.command, self.path,
                                                      self.headers.get("Content-Type", ""), raw)
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
