"""A small in-process fake Kubernetes API server: exactly the endpoints :mod:`ebb.actuate.kubernetes` calls.

No real API server can run on the build machines, so the Kubernetes actuator is tested against
this fake. It is **not** a Kubernetes API server: it serves plain HTTP on 127.0.0.1 (no TLS, no
authentication, no authorization — RBAC is checked separately, by mapping :attr:`requests` to the
rules in ``deploy/rbac.yaml``), keeps everything in memory, and implements these endpoints and
nothing more (anything else answers 404, an unsupported patch type 415):

=======  =====================================================================  ==================
verb     path                                                                   RBAC (group/resource verb)
=======  =====================================================================  ==================
GET      ``/apis/apps/v1/namespaces/{ns}/deployments/{name}``                   apps/deployments get
PATCH    ``/apis/apps/v1/namespaces/{ns}/deployments/{name}``                   apps/deployments patch
GET      ``/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale``             apps/deployments/scale get
PATCH    ``/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale``             apps/deployments/scale patch
GET      ``/api/v1/namespaces/{ns}/pods?labelSelector=...&fieldSelector=...``   pods list
PATCH    ``/api/v1/namespaces/{ns}/pods/{name}``                                pods patch
POST     ``/api/v1/namespaces/{ns}/pods/{name}/eviction``                       pods/eviction create
GET      ``/api/v1/nodes/{name}``                                               nodes get
POST     ``/api/v1/namespaces/{ns}/events``                                     events create
GET      ``/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?...``         discovery.k8s.io/endpointslices list
GET      ``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}``         coordination.k8s.io/leases get
POST     ``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases``                coordination.k8s.io/leases create
PUT      ``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}``         coordination.k8s.io/leases update
PATCH    ``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}``         coordination.k8s.io/leases patch
DELETE   ``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}``         coordination.k8s.io/leases delete
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
* **Pod lists** filter by ``labelSelector`` and by ``fieldSelector`` on ``spec.nodeName``,
  ``status.phase``, ``status.podIP``, ``metadata.name`` and ``metadata.namespace`` (``=``, ``==``,
  ``!=``, comma-joined); any other field answers 400 as upstream does. :meth:`add_pod` adds a
  standalone pod (no owner) with a node, a pod IP, a phase and a Ready condition that stays as
  set (:meth:`set_pod_ready` changes it), as the agent's engine-pod discovery needs.
* **Pod templates and labels.** A Deployment's pods get the template's labels, which may carry more
  than its selector (``add_deployment(template_labels=...)``), and pod IPs from ``pod_ips``. A pod's
  labels change by a merge PATCH of ``metadata.labels`` (``null`` removes one); the Service's slices
  follow at the next request, because a Service ``spec.selector`` is an equality-only
  ``map[string]string`` ("Route service traffic to pods with label keys and values matching this
  selector", Kubernetes API reference, ServiceSpec v1; "services ... support only equality-based
  requirement selectors", Concepts › Labels and Selectors). The ReplicaSet still owns a relabelled
  pod whose selector labels are intact.
* **EndpointSlices** (:mod:`ebb.testing.kube_slices`): the EndpointSlice controller keeps, for every
  Service added with :meth:`add_service`, the slices upstream's would (endpoints with addresses,
  conditions, ``nodeName``, ``targetRef``; named target ports resolved per pod), synchronously
  before every request; a slice keeps its name while its group exists and gets a new
  ``resourceVersion`` only when its content changes. Lists filter by ``labelSelector`` (e.g.
  ``kubernetes.io/service-name=NAME``); ``fieldSelector`` accepts only ``metadata.name`` and
  ``metadata.namespace`` (else 400, as upstream); ``limit`` pages with a ``continue`` token over one
  consistent snapshot, and :meth:`compact` expires the issued tokens (410 ``Expired``).
  ``watch`` is not served (400): nothing in Ebb watches.
* **Leases** (``coordination.k8s.io/v1``, :mod:`ebb.testing.kube_leases`): get, create, replace
  with resourceVersion and uid preconditions (409 Conflict), merge patch, delete; 404 when absent,
  409 AlreadyExists on create; MicroTimes parsed as upstream's RFC3339Micro; :meth:`lease` reads one.
* **Fault injection**: :meth:`inject` makes the next N requests to a path answer 409, 429 (with
  ``Retry-After``) or 500; :meth:`before` runs a callback before a matching request is served
  (a concurrent writer). :attr:`requests` logs every request (verb, path, status, body).

This module holds the state (objects, the resourceVersion counter, one lock) and the simulated
controllers; the stateless wire pieces — the route/RBAC table, object and ``Status`` bodies,
selector matching, merge patches, resourceVersion preconditions, the disruption-budget arithmetic
and the HTTP handler — are in :mod:`ebb.testing.kube_wire`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ebb.testing.kube_leases import LeaseRoutes
from ebb.testing.kube_wire import (
    PATCH_TYPES,
    ROUTES,
    ApiError,
    age_key,
    check_disruption_budget,
    check_resource_version,
    deployment_body,
    fault_response,
    is_ready,
    json_handler,
    merge_patch,
    node_body,
    now_text,
    parse_selector,
    pod_body,
    public_view,
    rbac_permission,
    scale_view,
    status_body,
    unsupported_media_type,
)
from ebb.testing.kube_slices import (
    EXPIRED_MESSAGE,
    decode_continue,
    desired_slices,
    encode_continue,
    slice_field_selector,
)

__all__ = ["FakeKubeApiServer", "Fault", "RequestRecord", "rbac_permission"]

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
ZONE_LABEL = "topology.kubernetes.io/zone"


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


class FakeKubeApiServer(LeaseRoutes):
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
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.slices: dict[tuple[str, str], dict[str, Any]] = {}
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self._slice_names: dict[tuple[Any, ...], str] = {}
        self._snapshots: dict[int, tuple[str, list[dict[str, Any]]]] = {}  # id → (resourceVersion, items)
        self._snapshot_seq = 0
        self._ips: dict[tuple[str, str], Iterator[str]] = {}
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
        handler = json_handler(self._serve, self._conns, self._lock)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
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
            self.nodes[name] = node_body(name, labels, self._next_rv())

    def add_deployment(self, name: str, replicas: int, *, namespace: str = "default",
                       labels: Mapping[str, str] | None = None, template_labels: Mapping[str, str] | None = None,
                       pod_ips: Iterable[str] | None = None) -> None:
        """A Deployment with ``replicas`` pods, Ready at once, created one second apart (oldest first).

        ``labels``: its selector (and template labels); ``template_labels``: more labels its pods get
        from the template but the selector does not require (``ebb.io/routable``), so a pod whose such
        label is patched stays the Deployment's. ``pod_ips``: the addresses its pods get, in creation
        order (the network plugin's IPAM; ``127.0.0.N`` reaches in-process engines); none: no pod IP."""
        labels = dict(labels or {"app": name})
        now = self._clock()
        with self._lock:
            if pod_ips is not None:
                self._ips[(namespace, name)] = iter(list(pod_ips))
            self.deployments[(namespace, name)] = deployment_body(namespace, name, replicas, labels, self._next_rv(),
                                                                  created_s=now - replicas - 60,
                                                                  template_labels=dict(template_labels or {}))
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
            return [p["metadata"]["name"] for p in sorted(pods, key=age_key)]

    def add_service(self, name: str, selector: Mapping[str, str], ports: Mapping[str, int | str], *,
                    namespace: str = "default", port: int = 80) -> None:
        """A Service selecting ``selector``; ``ports`` maps each port name to its ``targetPort`` (a
        number, or a container port name resolved per pod). The EndpointSlice controller follows it."""
        with self._lock:
            self.services[(namespace, name)] = {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                             "resourceVersion": self._next_rv()},
                "spec": {"selector": dict(selector),
                         "ports": [{"name": n, "port": port + i, "targetPort": t, "protocol": "TCP"}
                                   for i, (n, t) in enumerate(ports.items())]}}
            self._sync_slices()

    def compact(self) -> None:
        """Forget every list snapshot: the ``continue`` tokens issued so far answer 410 Expired."""
        with self._lock:
            self._snapshots.clear()

    def add_pod(self, name: str, labels: Mapping[str, str], *, node: str, ip: str = "", namespace: str = "default",
                phase: str = "Running", ready: bool = True, terminating: bool = False,
                ports: Mapping[str, int] | None = None, host_network: bool = False) -> None:
        """A standalone pod (no owner, no Deployment reconciles it) whose readiness stays as given.

        ``ports``: its container's named ports. ``host_network``: the pod IP is the node's, as
        upstream sets it, so two such pods on one node share ``ip``."""
        now = self._clock()
        with self._lock:
            self.pods[(namespace, name)] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                             "resourceVersion": self._next_rv(), "creationTimestamp": now_text(now),
                             "labels": dict(labels), "annotations": {},
                             **({"deletionTimestamp": now_text(now)} if terminating else {})},
                "spec": {"nodeName": node, **({"hostNetwork": True} if host_network else {}),
                         "containers": [{"name": "engine", "image": "ebb/fake-engine:1",
                                         **({"ports": [{"name": n, "containerPort": p, "protocol": "TCP"}
                                                       for n, p in ports.items()]} if ports else {})}]},
                "status": {"phase": phase, **({"podIP": ip, "podIPs": [{"ip": ip}]} if ip else {}),
                           **({"hostIP": ip} if host_network and ip else {}),
                           "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                           "lastTransitionTime": now_text(now)}]},
                "_created_s": now, "_fixed_ready": True,
            }

    def set_pod_ready(self, name: str, ready: bool, *, namespace: str = "default") -> None:
        """Change the Ready condition of a pod added with :meth:`add_pod`."""
        with self._lock:
            p = self.pods[(namespace, name)]
            p["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False",
                                          "lastTransitionTime": now_text(self._clock())}]
            p["metadata"]["resourceVersion"] = self._next_rv()

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        with self._lock:
            return self.pods.get((namespace, name))

    def calls(self, method: str | None = None, path_suffix: str = "") -> list[RequestRecord]:
        """Logged requests, filtered by verb and path ending."""
        return [r for r in list(self.requests)
                if (method is None or r.method == method) and r.path.endswith(path_suffix)]

    # -- the simulated controllers ------------------------------------------------------------
    def _create_pod(self, namespace: str, deployment: str, *, created_s: float, ready: bool) -> None:
        self._counter += 1
        name = f"{deployment}-5d8f7c-{self._counter:05d}"
        dep = self.deployments[(namespace, deployment)]
        nodes = sorted(self.nodes)
        node = nodes[(self._counter - 1) % len(nodes)] if nodes else ""
        pool = self._ips.get((namespace, deployment))
        ip = next(pool, "") if pool is not None else ""
        self.pods[(namespace, name)] = pod_body(namespace, name, dep, f"{deployment}-5d8f7c", node, self._next_rv(),
                                                created_s=created_s, ready=ready, ip=ip)

    def _terminate(self, p: dict[str, Any], now: float) -> None:
        p["metadata"]["deletionTimestamp"] = now_text(now)
        p["metadata"]["resourceVersion"] = self._next_rv()
        p["_gone_at_s"] = now + self.termination_grace_s

    def _reconcile(self) -> None:
        now = self._clock()
        for key, p in list(self.pods.items()):
            if "_gone_at_s" in p and now >= p["_gone_at_s"]:
                del self.pods[key]
            elif not is_ready(p) and not p.get("_fixed_ready") and now >= p["_created_s"] + self.ready_delay_s:
                p["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": now_text(now)}]
        for (ns, name), dep in self.deployments.items():
            match = parse_selector(",".join(f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items()))
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
                    return is_ready(p), cost, -p["_created_s"]
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
    def _serve(self, method: str, raw_path: str, ctype: str,
               raw_body: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
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
                return fault_response(fault.status, fault.retry_after_s)
        self._reconcile()
        self._sync_slices()
        for verb, pattern, route, _ in ROUTES:
            m = pattern.match(path)
            if verb == method and m:
                if method == "PATCH" and ctype.split(";")[0].strip() not in PATCH_TYPES:
                    return 415, unsupported_media_type(), {}
                try:
                    code, out = getattr(self, f"_{route}")(query=query, body=body, **m.groupdict())
                    return code, out, {}
                except ApiError as err:
                    return err.code, err.body, err.headers
        return 404, status_body(404, "NotFound", "the server could not find the requested resource"), {}

    def _deployment(self, ns: str, name: str) -> dict[str, Any]:
        dep = self.deployments.get((ns, name))
        if dep is None:
            raise ApiError(404, status_body(404, "NotFound", f'deployments.apps "{name}" not found',
                                            {"name": name, "group": "apps", "kind": "deployments"}))
        return dep

    def _get_deployment(self, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        return 200, self._deployment(ns, name)

    def _patch_deployment(self, *, ns: str, name: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        dep = self._deployment(ns, name)
        check_resource_version("deployments.apps", name, dep["metadata"]["resourceVersion"], body)
        merged = merge_patch(dep, body)
        merged["metadata"]["resourceVersion"] = self._next_rv()
        self.deployments[(ns, name)] = merged
        self._reconcile()
        return 200, merged

    def _get_scale(self, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        return 200, scale_view(self._deployment(ns, name))

    def _patch_scale(self, *, ns: str, name: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        dep = self._deployment(ns, name)
        check_resource_version("deployments.apps", name, dep["metadata"]["resourceVersion"], body)
        scale = merge_patch(scale_view(dep), body)
        replicas = scale.get("spec", {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(422, status_body(422, "Invalid", f'Scale.autoscaling "{name}" is invalid: '
                                            f"spec.replicas: Invalid value: {replicas!r}: must be greater than or "
                                            "equal to 0"))
        dep["spec"]["replicas"] = replicas
        dep["metadata"]["resourceVersion"] = self._next_rv()
        self._reconcile()
        return 200, scale_view(dep)

    def _list_pods(self, *, ns: str, query: dict[str, str], **_: Any) -> tuple[int, dict[str, Any]]:
        match = parse_selector(query.get("labelSelector", ""))
        fields = _field_selector(query.get("fieldSelector", ""))
        items = [public_view(p) for (pns, _n), p in sorted(self.pods.items(), key=lambda kv: age_key(kv[1]))
                 if pns == ns and match(p["metadata"]["labels"]) and fields(p)]
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self._rv)},
                     "items": items}

    def _pod_or_404(self, ns: str, name: str) -> dict[str, Any]:
        pod = self.pods.get((ns, name))
        if pod is None:
            raise ApiError(404, status_body(404, "NotFound", f'pods "{name}" not found',
                                            {"name": name, "kind": "pods"}))
        return pod

    def _patch_pod(self, *, ns: str, name: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        pod = self._pod_or_404(ns, name)
        check_resource_version("pods", name, pod["metadata"]["resourceVersion"], body)
        merged = merge_patch(pod, body)
        merged["metadata"]["resourceVersion"] = self._next_rv()
        self.pods[(ns, name)] = merged
        return 200, public_view(merged)

    def _evict(self, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        pod = self._pod_or_404(ns, name)
        if "deletionTimestamp" not in pod["metadata"]:
            budgets = [b for (bns, _n), b in self.pdbs.items()
                       if bns == ns and all(pod["metadata"]["labels"].get(k) == v for k, v in b["selector"].items())]
            if len(budgets) > 1:
                raise ApiError(500, status_body(500, "InternalError", "This pod has more than one "
                                                "PodDisruptionBudget, which the eviction subresource does not "
                                                "support."))
            if budgets:
                b = budgets[0]
                selected = [p for (pns, _n), p in self.pods.items() if pns == ns
                            and "deletionTimestamp" not in p["metadata"]
                            and all(p["metadata"]["labels"].get(k) == v for k, v in b["selector"].items())]
                check_disruption_budget(b, selected, pod)
            self._terminate(pod, self._clock())
            self._reconcile()
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _sync_slices(self) -> None:
        """Run the EndpointSlice controller: keep each Service's slices equal to :func:`desired_slices`."""
        keep: set[tuple[str, str]] = set()
        for (ns, svc), service in self.services.items():
            seen: dict[tuple[Any, ...], int] = {}
            for want in desired_slices(service, (p for (pns, _n), p in self.pods.items() if pns == ns)):
                group = (ns, svc, want["addressType"], tuple((p["name"], p["port"]) for p in want["ports"]))
                seen[group] = seen.get(group, -1) + 1
                key = (*group, seen[group])
                if key not in self._slice_names:  # generateName: SERVICE-xxxxx
                    self._slice_names[key] = f"{svc}-{uuid.uuid4().hex[:5]}"
                name = self._slice_names[key]
                old = self.slices.get((ns, name))
                body = {**want, "metadata": {**want["metadata"], "name": name,
                                             "generateName": f"{svc}-",
                                             "uid": old["metadata"]["uid"] if old else str(uuid.uuid4())}}
                if old is None or {k: v for k, v in old.items() if k != "metadata"} != \
                        {k: v for k, v in body.items() if k != "metadata"}:
                    body["metadata"]["resourceVersion"] = self._next_rv()
                    self.slices[(ns, name)] = body
                keep.add((ns, name))
        for k in [k for k in self.slices if k not in keep]:
            del self.slices[k]
        live = set(keep)
        self._slice_names = {k: n for k, n in self._slice_names.items() if (k[0], n) in live}

    def _list_endpointslices(self, *, ns: str, query: dict[str, str], **_: Any) -> tuple[int, dict[str, Any]]:
        if query.get("watch") in ("1", "true"):
            raise ApiError(400, status_body(400, "BadRequest", "the fake API server serves no watch"))
        limit = int(query.get("limit") or 0)
        if limit < 0:
            raise ApiError(400, status_body(400, "BadRequest", "limit must be non-negative"))
        token = query.get("continue", "")
        if token:
            if query.get("resourceVersion") not in (None, "", "0"):
                raise ApiError(400, status_body(400, "BadRequest",
                                                "specifying resource version is not allowed when using continue"))
            snap_id, offset = decode_continue(token)
            if snap_id not in self._snapshots:
                raise ApiError(410, status_body(410, "Expired", EXPIRED_MESSAGE))
            rv, snapshot = self._snapshots[snap_id]
        else:
            match = parse_selector(query.get("labelSelector", ""))
            fields = slice_field_selector(query.get("fieldSelector", ""))
            snapshot = [public_view(s) for (sns, name), s in sorted(self.slices.items())
                        if sns == ns and match(s["metadata"]["labels"])
                        and fields.get("metadata.name", name) == name and fields.get("metadata.namespace", ns) == ns]
            self._snapshot_seq += 1
            snap_id, offset, rv = self._snapshot_seq, 0, str(self._rv)
        end = offset + limit if limit else len(snapshot)
        meta: dict[str, Any] = {"resourceVersion": rv}
        if end < len(snapshot):
            self._snapshots[snap_id] = (rv, snapshot)
            meta["continue"] = encode_continue(snap_id, end)
            meta["remainingItemCount"] = len(snapshot) - end
        return 200, {"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1", "metadata": meta,
                     "items": snapshot[offset:end]}

    def _get_node(self, *, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        node = self.nodes.get(name)
        if node is None:
            raise ApiError(404, status_body(404, "NotFound", f'nodes "{name}" not found',
                                            {"name": name, "kind": "nodes"}))
        return 200, node

    def _create_event(self, *, ns: str, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(body, dict):
            raise ApiError(400, status_body(400, "BadRequest", "expected an Event object"))
        name = body.get("metadata", {}).get("name", "")
        if any(e["metadata"].get("name") == name and e["metadata"].get("namespace") == ns for e in self.events):
            raise ApiError(409, status_body(409, "AlreadyExists", f'events "{name}" already exists',
                                            {"name": name, "kind": "events"}))
        ev = merge_patch(body, {"metadata": {"namespace": ns, "uid": str(uuid.uuid4()),
                                             "resourceVersion": self._next_rv()}})
        self.events.append(ev)
        return 201, ev


_POD_FIELDS = {"spec.nodeName": ("spec", "nodeName"), "status.phase": ("status", "phase"),
               "status.podIP": ("status", "podIP"), "metadata.name": ("metadata", "name"),
               "metadata.namespace": ("metadata", "namespace")}


def _field_selector(text: str) -> Callable[[dict[str, Any]], bool]:
    """A pod field selector (see the module docstring); ApiError 400 for a field upstream would refuse."""
    reqs: list[tuple[tuple[str, str], bool, str]] = []
    for term in (t.strip() for t in text.split(",") if t.strip()):
        neg = "!=" in term
        key, _, value = term.partition("!=" if neg else ("==" if "==" in term else "="))
        if key.strip() not in _POD_FIELDS:
            raise ApiError(400, status_body(400, "BadRequest", f'field label not supported: {key.strip()}'))
        reqs.append((_POD_FIELDS[key.strip()], neg, value.strip()))

    def match(pod: dict[str, Any]) -> bool:
        return all((str(pod.get(a, {}).get(b, "")) == v) != neg for (a, b), neg, v in reqs)
    return match
