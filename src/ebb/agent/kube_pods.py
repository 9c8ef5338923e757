"""The engine pods on the agent's node, from the Kubernetes API (the DaemonSet's discovery).

Two listers, same answer (sorted unique metrics URLs), different reach:

* :class:`EndpointSliceLister` (``--pod-service NAME``; what ``deploy/`` ships) reads the
  ``discovery.k8s.io/v1`` EndpointSlices of one Service and keeps the endpoints whose ``nodeName``
  is this node and whose ``conditions.ready`` is not false (upstream: ready = the pod is Ready and
  not terminating; unset means ready). A slice carries addresses, ports, ``nodeName`` and
  ``targetRef`` only — no spec, no env — so RBAC is ``endpointslices list`` in ``namespace`` and
  the agent's token cannot read a pod. EndpointSlices have no ``spec.nodeName`` field selector
  (upstream indexes only ``metadata.name``/``namespace``): the Service's slices of every node travel
  and the node is filtered here.
* :class:`PodLister` (``--pod-selector K=V``) is described below; it needs ``pods list``, which
  returns whole pods (env included) to whoever holds the token.

Both key an endpoint by (pod uid, port), never by IP: hostNetwork pods on one node share the node's
IP, and with ``port`` a **name** (``--pod-port http``) each pod's own port number is used (the
container port of that name; for slices, the slice port of that name), so two such pods on
different ports are two URLs. Two pods that still resolve to one URL are one socket: it is polled
once, and :attr:`~PodLister.shared` names the pods behind it.

``PodLister(selector="app=vllm", node="node-a", port=8000)`` lists, on each call, the pods of
``namespace`` matching the label ``selector`` with the field selector ``spec.nodeName=NODE`` (the
API server filters: one node's pods travel, not the cluster's) and returns the metrics URL
``http://POD_IP:PORT{metrics_path}`` of every pod that is **Running and Ready**, has a pod IP and
is not terminating, sorted, without duplicates. A pod that is starting, failing its readiness
probe, or draining is left out, so the agent stops polling it (its series leave the buckets;
nothing is filled in for it).

Guarantees:

* The ``kubernetes`` client is imported when a lister is built, not before; without it the
  error is :class:`~ebb.errors.MissingExtraError` with ``pip install 'ebb[k8s]'``.
* Credentials: the in-cluster service account when ``KUBERNETES_SERVICE_HOST`` is set, else the
  kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``); unloadable ones are a ConfigError with the
  fix. RBAC needed: ``pods list`` in ``namespace``.
* Every call is bounded by ``timeout_s`` (5 s) and raises :class:`~ebb.errors.SourceUnavailable`
  (the API answered an error or did not answer) — the caller keeps its current endpoints — or
  nothing. At most :data:`MAX_PODS` pods are read per list (``limit``), more than one node holds.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from collections.abc import Iterable
from typing import Any, Final

from ebb.errors import ConfigError, SourceUnavailable, require_extra

__all__ = ["MAX_PAGES", "MAX_PODS", "MAX_SLICES", "EndpointSliceLister", "PodLister", "parse_port_flag",
           "parse_selector_flag"]

log = logging.getLogger(__name__)

MAX_PODS: Final = 1000
"""Pods read per list call: a node runs at most 110 pods by default (kubelet ``maxPods``)."""
MAX_SLICES: Final = 500
"""EndpointSlices read per page (a slice holds at most 100 endpoints by default)."""
MAX_PAGES: Final = 20
"""Pages read per list at most (10,000 slices): more than that is an error, not a partial answer."""
SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9](?:[a-z0-9-]{0,13}[a-z0-9])?$")  # IANA_SVC_NAME, as Kubernetes
_DNS_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def parse_port_flag(text: str) -> int | str:
    """``--pod-port``: a number in [1, 65535] or a port name (IANA_SVC_NAME: at most 15 of a-z 0-9 -,
    a letter among them); ConfigError otherwise."""
    t = text.strip()
    if t.isdigit():
        if not 0 < int(t) < 65536:
            raise ConfigError(f"--pod-port must be in [1, 65535], got {t}")
        return int(t)
    if not _PORT_NAME.match(t) or "--" in t:
        raise ConfigError(f"--pod-port {text[:80]!r} is neither a port number nor a port name (fix: 8000, or the "
                          "container port's name such as http)")
    return t


def parse_selector_flag(text: str) -> str:
    """``text`` when it is a usable equality label selector (``k=v[,k2=v2]``), else ConfigError."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(p.count("=") < 1 or not p.split("=", 1)[0].strip(" !") for p in parts):
        raise ConfigError(f"--pod-selector {text[:200]!r} is not a label selector (fix: write KEY=VALUE[,KEY=VALUE], "
                          "e.g. app=vllm)")
    return ",".join(parts)


def _url(ip: str, port: int, path: str) -> str:
    host = f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    return f"http://{host}:{port}{path}"


def _check_common(node: str, port: int | str, metrics_path: str) -> None:
    if not node:
        raise ConfigError("--node-name is empty (fix: pass the node through the downward API: "
                          "env NODE_NAME from fieldRef spec.nodeName, then --node-name $NODE_NAME)")
    if isinstance(port, int) and not 0 < port < 65536:
        raise ConfigError(f"--pod-port must be in [1, 65535], got {port}")
    if isinstance(port, str):
        parse_port_flag(port)
    if not metrics_path.startswith("/"):
        raise ConfigError(f"metrics path must start with '/', got {metrics_path[:80]!r}")


def _load_client(k: Any, needs: str) -> Any:
    config = require_extra("kubernetes.config", "k8s")
    cfg = k.Configuration()
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(client_configuration=cfg)
    except (config.ConfigException, OSError, ValueError) as exc:
        where = "the in-cluster service account" if in_cluster else "the kubeconfig ($KUBECONFIG, ~/.kube/config)"
        raise ConfigError(f"cannot load Kubernetes credentials from {where}: {exc} (fix: run the agent in a pod "
                          f"with a service account allowed to {needs}, or set KUBECONFIG)") from exc
    cfg.retries = False
    return k.ApiClient(cfg)


def _urls(found: Iterable[tuple[str, int, str, str]], path: str) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """(sorted unique URLs, {url: pods} for URLs more than one pod resolved to) from (ip, port, pod key, pod name)."""
    by_url: dict[str, dict[tuple[str, int], str]] = {}
    for ip, port, key, name in found:
        try:
            url = _url(ip, port, path)
        except ValueError:  # not an IP address: never put into a URL
            continue
        by_url.setdefault(url, {})[(key, port)] = name
    shared = {u: tuple(sorted(pods.values())) for u, pods in by_url.items() if len(pods) > 1}
    return tuple(sorted(by_url)), shared


class _Shared:
    shared: dict[str, tuple[str, ...]]
    """URLs that more than one pod resolved to in the last call, with those pods' names (one socket:
    polled once). Logged at WARNING when it changes."""

    metrics_path: str
    _owns: bool
    _client: Any

    def _urls(self, found: list[tuple[str, int, str, str]]) -> tuple[str, ...]:
        """The metrics URLs of ``found`` (address, port, key, name), one per socket; pods sharing one
        are noted (:attr:`shared`) and logged at WARNING when that changes."""
        urls, shared = _urls(found, self.metrics_path)
        if shared and shared != self.shared:
            log.warning("pods share one metrics URL (polled once; give each its own port, e.g. --pod-port NAME): %s",
                        "; ".join(f"{u}: {', '.join(p)}" for u, p in sorted(shared.items())))
        self.shared = shared
        return urls

    def close(self) -> None:
        if self._owns:
            self._client.close()


class PodLister(_Shared):
    """Lists the Ready engine pods of one node; see the module docstring. Callable: ``lister()``.

    ``port``: a number, or a container port name resolved per pod (a pod without it is skipped)."""

    def __init__(self, selector: str, node: str, port: int | str, *, namespace: str = "default",
                 metrics_path: str = "/metrics", api_client: Any = None, timeout_s: float = 5.0) -> None:
        _check_common(node, port, metrics_path)
        self.selector = parse_selector_flag(selector)
        self.node, self.port, self.namespace = node, port, namespace
        self.metrics_path, self.timeout_s = metrics_path, timeout_s
        self.shared = {}
        k = require_extra("kubernetes.client", "k8s")
        self._api_error: type[BaseException] = k.exceptions.ApiException
        self._owns = api_client is None
        self._client = api_client if api_client is not None else _load_client(k, "list pods")
        self._core = k.CoreV1Api(self._client)

    def _port_of(self, pod: Any) -> int | None:
        if isinstance(self.port, int):
            return self.port
        for c in (pod.spec.containers if pod.spec else None) or ():
            for p in c.ports or ():
                if p.name == self.port:
                    return int(p.container_port)
        return None

    def __call__(self) -> tuple[str, ...]:
        """The metrics URLs of the Running, Ready pods now (see the module docstring)."""
        try:
            pods = self._core.list_namespaced_pod(
                self.namespace, label_selector=self.selector, field_selector=f"spec.nodeName={self.node}",
                limit=MAX_PODS, _request_timeout=self.timeout_s)
        except self._api_error as exc:
            raise SourceUnavailable(f"listing pods {self.selector!r} on node {self.node!r} in namespace "
                                    f"{self.namespace!r} failed: HTTP {getattr(exc, 'status', '?')} "
                                    f"{getattr(exc, 'reason', '')}".rstrip()) from exc
        except Exception as exc:  # urllib3 / socket errors: the API did not answer
            raise SourceUnavailable(f"the Kubernetes API did not answer a pod list: {type(exc).__name__}: "
                                    f"{str(exc)[:200]}") from exc
        found: list[tuple[str, int, str, str]] = []
        for pod in pods.items or ():
            st, meta = pod.status, pod.metadata
            if st is None or st.phase != "Running" or not st.pod_ip or (meta and meta.deletion_timestamp):
                continue
            if not any(c.type == "Ready" and c.status == "True" for c in st.conditions or ()):
                continue
            port = self._port_of(pod)
            if port is not None:
                name = str(meta.name) if meta else "?"
                found.append((st.pod_ip, port, str(meta.uid or name) if meta else name, name))
        return self._urls(found)


class EndpointSliceLister(_Shared):
    """The ready endpoints of Service ``service`` on ``node``, from its EndpointSlices (module docstring).

    ``port``: the endpoint port number, or the name of the slice port (the Service port's name).
    Callable: ``lister()``; every call is one list (paged by :data:`MAX_SLICES`, at most
    :data:`MAX_PAGES` pages; an expired ``continue`` token restarts the list once) bounded by
    ``timeout_s`` per request, raising :class:`~ebb.errors.SourceUnavailable` or returning the URLs."""

    def __init__(self, service: str, node: str, port: int | str, *, namespace: str = "default",
                 metrics_path: str = "/metrics", api_client: Any = None, timeout_s: float = 5.0) -> None:
        _check_common(node, port, metrics_path)
        if not _DNS_LABEL.match(service):
            raise ConfigError(f"--pod-service {service[:80]!r} is not a Service name (fix: the name of the Service "
                              "that selects the engine pods, e.g. vllm)")
        self.service, self.node, self.port, self.namespace = service, node, port, namespace
        self.metrics_path, self.timeout_s = metrics_path, timeout_s
        self.shared = {}
        k = require_extra("kubernetes.client", "k8s")
        self._api_error: type[BaseException] = k.exceptions.ApiException
        self._owns = api_client is None
        self._client = api_client if api_client is not None else _load_client(k, "list endpointslices")
        self._api = k.DiscoveryV1Api(self._client)

    def _list(self) -> list[Any]:
        items: list[Any] = []
        token: str | None = None
        for _ in range(MAX_PAGES):
            kw: dict[str, Any] = {"_continue": token} if token else {}
            page = self._api.list_namespaced_endpoint_slice(
                self.namespace, label_selector=f"{SERVICE_NAME_LABEL}={self.service}", limit=MAX_SLICES,
                _request_timeout=self.timeout_s, **kw)
            items += page.items or ()
            token = page.metadata._continue if page.metadata else None
            if not token:
                return items
        raise SourceUnavailable(f"Service {self.service!r} in {self.namespace!r} has more than "
                                f"{MAX_PAGES * MAX_SLICES} EndpointSlices; not read")

    def _call(self, what: str) -> list[Any]:
        try:
            try:
                return self._list()
            except self._api_error as exc:
                if getattr(exc, "status", None) != 410:
                    raise
                return self._list()  # the continue token expired mid-list: one fresh, consistent list
        except self._api_error as exc:
            raise SourceUnavailable(f"{what} failed: HTTP {getattr(exc, 'status', '?')} "
                                    f"{getattr(exc, 'reason', '')}".rstrip()) from exc
        except SourceUnavailable:
            raise
        except Exception as exc:  # urllib3 / socket errors: the API did not answer
            raise SourceUnavailable(f"the Kubernetes API did not answer an EndpointSlice list: "
                                    f"{type(exc).__name__}: {str(exc)[:200]}") from exc

    def __call__(self) -> tuple[str, ...]:
        """The metrics URLs of this node's ready endpoints now (see the class docstring)."""
        slices = self._call(f"listing the EndpointSlices of Service {self.service!r} in namespace "
                            f"{self.namespace!r}")
        found: list[tuple[str, int, str, str]] = []
        for sl in slices:
            if sl.address_type not in ("IPv4", "IPv6"):  # FQDN slices name hosts, not pods
                continue
            ports = [int(p.port) for p in sl.ports or () if p.port is not None
                     and (p.port == self.port if isinstance(self.port, int) else p.name == self.port)]
            for ep in sl.endpoints or ():
                cond, ref = ep.conditions, ep.target_ref
                # upstream: an unset ready means ready; serving-but-terminating pods are draining
                if ep.node_name != self.node or (cond is not None and cond.ready is False) or not ep.addresses:
                    continue
                if ref is None or ref.kind != "Pod":
                    continue
                for port in ports:
                    found.append((ep.addresses[0], port, str(ref.uid or ref.name), str(ref.name)))
        return self._urls(found)
