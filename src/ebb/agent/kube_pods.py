"""The engine pods on the agent's node, from the Kubernetes API (the DaemonSet's discovery).

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
import os
from typing import Any, Final

from ebb.errors import ConfigError, SourceUnavailable, require_extra

__all__ = ["MAX_PODS", "PodLister", "parse_selector_flag"]

MAX_PODS: Final = 1000
"""Pods read per list call: a node runs at most 110 pods by default (kubelet ``maxPods``)."""


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


class PodLister:
    """Lists the Ready engine pods of one node; see the module docstring. Callable: ``lister()``."""

    def __init__(self, selector: str, node: str, port: int, *, namespace: str = "default",
                 metrics_path: str = "/metrics", api_client: Any = None, timeout_s: float = 5.0) -> None:
        if not node:
            raise ConfigError("--node-name is empty (fix: pass the node through the downward API: "
                              "env NODE_NAME from fieldRef spec.nodeName, then --node-name $NODE_NAME)")
        if not 0 < port < 65536:
            raise ConfigError(f"--pod-port must be in [1, 65535], got {port}")
        if not metrics_path.startswith("/"):
            raise ConfigError(f"metrics path must start with '/', got {metrics_path[:80]!r}")
        self.selector = parse_selector_flag(selector)
        self.node, self.port, self.namespace = node, port, namespace
        self.metrics_path, self.timeout_s = metrics_path, timeout_s
        k = require_extra("kubernetes.client", "k8s")
        self._api_error: type[BaseException] = k.exceptions.ApiException
        self._owns = api_client is None
        self._client = api_client if api_client is not None else self._load(k)
        self._core = k.CoreV1Api(self._client)

    @staticmethod
    def _load(k: Any) -> Any:
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
                              "with a service account allowed to list pods, or set KUBECONFIG)") from exc
        cfg.retries = False
        return k.ApiClient(cfg)

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
        urls: set[str] = set()
        for pod in pods.items or ():
            st, meta = pod.status, pod.metadata
            if st is None or st.phase != "Running" or not st.pod_ip or (meta and meta.deletion_timestamp):
                continue
            if not any(c.type == "Ready" and c.status == "True" for c in st.conditions or ()):
                continue
            try:
                urls.add(_url(st.pod_ip, self.port, self.metrics_path))
            except ValueError:  # not an IP address: never put into a URL
                continue
        return tuple(sorted(urls))

    def close(self) -> None:
        if self._owns:
            self._client.close()
