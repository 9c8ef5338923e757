"""The EndpointSlice controller of :class:`ebb.testing.fake_kube.FakeKubeApiServer`, and its list paging.

Stateless like :mod:`ebb.testing.kube_wire`: the fake owns the Services, pods, slices and the
resourceVersion counter and calls these with JSON-shaped ``dict``s. What they guarantee, as
upstream's EndpointSlice controller (``pkg/controller/endpointslice``) and list paging do for the
fields the agent reads:

* :func:`desired_slices` derives the ``discovery.k8s.io/v1`` EndpointSlices of one Service from its
  pods: a pod is an endpoint when its labels match the Service's ``selector``, it has a pod IP and
  its phase is neither ``Succeeded`` nor ``Failed``. Each endpoint carries ``addresses: [podIP]``,
  ``conditions`` (``serving`` = pod Ready, ``terminating`` = has ``deletionTimestamp``, ``ready`` =
  serving and not terminating), ``nodeName`` and ``targetRef`` (kind Pod, name, namespace, uid) and
  nothing of the pod's spec or env. A named ``targetPort`` resolves per pod from its containers'
  ``ports``; a pod without that port name is left out of that port. Endpoints are grouped by address
  family and resolved port list, at most :data:`MAX_ENDPOINTS_PER_SLICE` (100, the controller's
  ``--max-endpoints-per-slice`` default) per slice. Slices carry the labels
  ``kubernetes.io/service-name`` and ``endpointslice.kubernetes.io/managed-by``.
* :func:`page` cuts a list into ``limit``-sized chunks with an opaque ``continue`` token; the fake keeps
  the snapshot the token points into, so the chunks are one consistent list, and a token whose
  snapshot was compacted away answers 410 ``Expired`` with upstream's message.
"""

from __future__ import annotations

import base64
import ipaddress
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ebb.testing.kube_wire import ApiError, parse_selector, status_body

__all__ = ["EXPIRED_MESSAGE", "MANAGED_BY", "MAX_ENDPOINTS_PER_SLICE", "SERVICE_NAME_LABEL", "decode_continue",
           "desired_slices", "encode_continue", "slice_field_selector"]

MAX_ENDPOINTS_PER_SLICE = 100
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice-controller.k8s.io"
EXPIRED_MESSAGE = ("The provided continue parameter is too old to display a consistent list result. You can start a "
                   "new list without the continue parameter.")


def _family(ip: str) -> str | None:
    try:
        return "IPv6" if ipaddress.ip_address(ip).version == 6 else "IPv4"
    except ValueError:
        return None  # upstream never stores a non-IP podIP; a hostile test value is left out


def _resolve(target: int | str, pod: Mapping[str, Any]) -> int | None:
    if isinstance(target, int):
        return target
    for c in pod.get("spec", {}).get("containers", ()):
        for p in c.get("ports", ()):
            if p.get("name") == target:
                return int(p["containerPort"])
    return None


def desired_slices(service: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The EndpointSlices (without name/uid/resourceVersion) the controller would keep for ``service``.

    Order is deterministic (family, ports, then pods by name), so an unchanged input gives equal output."""
    match = parse_selector(",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items()))
    groups: dict[tuple[str, tuple[tuple[str, int], ...]], list[dict[str, Any]]] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        st, md = pod.get("status", {}), pod["metadata"]
        ip = st.get("podIP", "")
        family = _family(ip) if ip else None
        if family is None or st.get("phase") in ("Succeeded", "Failed") or not match(md.get("labels", {})):
            continue
        ports = tuple((p.get("name", ""), r) for p in service["spec"]["ports"]
                      if (r := _resolve(p.get("targetPort", p["port"]), pod)) is not None)
        if not ports:
            continue
        serving = any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions", ()))
        terminating = "deletionTimestamp" in md
        groups.setdefault((family, ports), []).append({
            "addresses": [ip],
            "conditions": {"ready": serving and not terminating, "serving": serving, "terminating": terminating},
            "nodeName": pod["spec"]["nodeName"],
            "targetRef": {"kind": "Pod", "namespace": md["namespace"], "name": md["name"], "uid": md["uid"]},
        })
    out = []
    for (family, ports), eps in sorted(groups.items()):
        for i in range(0, len(eps), MAX_ENDPOINTS_PER_SLICE):
            out.append({
                "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1", "addressType": family,
                "metadata": {"namespace": service["metadata"]["namespace"],
                             "labels": {SERVICE_NAME_LABEL: service["metadata"]["name"],
                                        "endpointslice.kubernetes.io/managed-by": MANAGED_BY},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "controller": True,
                                                  "blockOwnerDeletion": True, "name": service["metadata"]["name"],
                                                  "uid": service["metadata"]["uid"]}]},
                "endpoints": eps[i:i + MAX_ENDPOINTS_PER_SLICE],
                "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports],
            })
    return out


def slice_field_selector(text: str) -> Mapping[str, str]:
    """EndpointSlices index only ``metadata.name`` and ``metadata.namespace`` (``=``/``==``), as upstream;
    any other field answers 400 ``field label not supported``. Returns the required values."""
    out: dict[str, str] = {}
    for term in (t.strip() for t in text.split(",") if t.strip()):
        key, _, value = term.partition("==" if "==" in term else "=")
        if key.strip() not in ("metadata.name", "metadata.namespace") or "!" in key:
            raise ApiError(400, status_body(400, "BadRequest", f"field label not supported: {key.strip(' !')}"))
        out[key.strip()] = value.strip()
    return out


def encode_continue(snapshot: int, offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"s": snapshot, "o": offset}).encode()).decode()


def decode_continue(token: str) -> tuple[int, int]:
    """(snapshot id, offset); 400 for a token the fake did not issue, as upstream answers a malformed one."""
    try:
        d = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(d["s"]), int(d["o"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ApiError(400, status_body(400, "BadRequest", "continue key is not valid: incorrect encoded start "
                                        "resourceVersion (version meta.k8s.io/v1)")) from exc
