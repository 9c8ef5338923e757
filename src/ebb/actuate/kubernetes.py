"""Kubernetes actuator: one Deployment scaled through its ``/scale`` subresource (extra ``k8s``).

Guarantees, beyond those of :mod:`ebb.actuate.base`:

* **Never a blind overwrite.** Every write to the Deployment carries the ``resourceVersion`` just
  read as a precondition. On 409 Conflict the actuator re-reads: if ``spec.replicas`` is still the
  value this decision started from (``from``), it retries with the new resourceVersion (at most
  ``max_retries`` times); if another writer (an HPA, a human) changed it, the decision is
  **superseded**: ``apply`` returns ``applied=False`` with ``replicas_after`` = the replicas now,
  :meth:`KubernetesActuator.reason` says ``superseded: ...``, the deletion costs it set are taken
  back, and nothing is overwritten. (Not an error: the next cycle decides again on fresh state.)
* **Scale-in the way the ReplicaSet controller expects.** Victims (named ones first, then newest)
  get ``controller.kubernetes.io/pod-deletion-cost`` = -1000 + rank *before* ``spec.replicas`` is
  lowered, so the ReplicaSet controller deletes them; each pod then terminates gracefully. Costs
  this actuator set earlier on pods that are not victims now are removed. ``removed`` is the
  upstream ranking's prediction (not-Ready pods first, then lowest cost, then newest): the pods are
  gone when ``state()`` no longer lists them. Pods are never deleted directly; :meth:`evict` goes
  through the Eviction API, so PodDisruptionBudgets apply (blocked → ``Eviction(evicted=False)``).
* **At most once per decision id, across restarts.** Besides the in-memory outcome map, each
  decision writes the Deployment annotations ``ebb.dev/last-decision-id`` and
  ``ebb.dev/last-decision-replicas`` (``"5->3"``). Write order: (1) victims' deletion costs,
  (2) the annotations (precondition: the resourceVersion read), (3) ``/scale`` (precondition: the
  resourceVersion (2) returned), (4) an Event. A crash after (1) leaves only preference costs
  (taken back by the next scale-in). After (2): a retry of the same id — by a new actuator too —
  finds the annotation with ``spec.replicas == from`` and finishes the decision; with
  ``spec.replicas == to`` it reports "already applied"; anything else is superseded. After (3) the
  decision is complete (only its Event may be missing). A different id simply overwrites (2).
* **Throttled and retried.** A client-side token bucket (``qps``, ``burst``) sits in front of
  every API call. 429 → wait ``max(Retry-After, backoff)`` with exponential backoff
  (``backoff_s·2^k``, ≤ 30 s, jittered), 5xx and connection errors likewise; after ``max_retries``
  retries → :class:`~ebb.errors.TransientError`. 401/403/404/422 → :class:`~ebb.errors.PermanentError`
  naming the object and the fix. (Implemented in :mod:`ebb.actuate.kube_client`.)
* **Events never change behaviour.** One Kubernetes Event (``EbbScaleDown``/``EbbScaleUp``) per
  applied decision, named after the decision id (a repeat is a harmless 409); failure is logged.

* **An asleep tier when given one** (``tier``; :class:`~ebb.actuate.base.SleepingActuator`): victims
  leave the Service by a label, drain, and sleep through their engine (vLLM ``POST /sleep``) while
  staying pods of the Deployment (``/scale`` = running + asleep); scale-ups wake them first; releases
  go through deletion cost and ``/scale`` — :mod:`ebb.actuate.kube_tier`, which also tells each drain
  (start, in-flight steps, end) to :meth:`KubernetesActuator.observe_drains`'s observer. ``tier=None``
  (the default) is everything above, unchanged: no background thread, no engine call, no drain record.
* **A hand-off when given a board** (``handoff``; :mod:`ebb.decide.handoff`): step (3) hands the
  count to the board instead of writing ``/scale``, and ``state()`` reports a pending hand-off as
  ``spec.replicas``; an HPA or KEDA ScaledObject applies the number. Everything else is unchanged.

State reads ``/scale`` and lists pods by its selector; terminating pods (``deletionTimestamp``)
count as ``draining``. Zones come from each node's ``topology.kubernetes.io/zone`` label (cached
for the actuator's life). API calls used — and all that ``deploy/rbac.yaml`` grants: deployments
get/patch, deployments/scale get/patch, pods list/patch, pods/eviction create, nodes get, events
create. Tested against :class:`ebb.testing.fake_kube.FakeKubeApiServer`, not a real API server.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from ebb.actuate.base import ActuationResult, FleetState, ReplicaState
from ebb.decide.handoff import HandoffBoard
from ebb.actuate.kube_client import MAX_BACKOFF_S as MAX_BACKOFF_S  # re-export: public here before the split
from ebb.actuate.kube_client import DECISION_ANNOTATION as DECISION_ANNOTATION  # public here too
from ebb.actuate.kube_client import DECISION_REPLICAS_ANNOTATION as DECISION_REPLICAS_ANNOTATION
from ebb.actuate.kube_client import DELETION_COST_ANNOTATION as DELETION_COST_ANNOTATION
from ebb.actuate.kube_client import ApiCaller, KubeDeployment, KubePod, RateLimiter, WriteConflict
from ebb.actuate.kube_tier import KubeTier, TierSettings
from ebb.config.tiers import SleepTier
from ebb.errors import ConfigError, PermanentError, TransientError, require_extra
from ebb.model.drains import DrainObserver
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.observation import ScaleRequest

__all__ = ["DECISION_ANNOTATION", "DECISION_REPLICAS_ANNOTATION", "DELETION_COST_ANNOTATION",
           "Eviction", "KubernetesActuator", "RateLimiter", "load_api_client"]

log = logging.getLogger(__name__)

VICTIM_ANNOTATION = "ebb.dev/victim-of"
"""Marks the pods whose deletion cost this actuator set (value: the decision id)."""
ZONE_LABEL = "topology.kubernetes.io/zone"
VICTIM_COST_BASE = -1000
"""Victim of rank r gets cost -1000 + r: below the default 0, and ordered among themselves."""
_MERGE_PATCH = "application/merge-patch+json"
_INSTALL = "pip install 'ebb[k8s]'"


@dataclass(frozen=True)
class Eviction:
    """The answer to :meth:`KubernetesActuator.evict`; truthy when the pod is on its way out."""

    pod: str
    evicted: bool
    reason: str

    def __bool__(self) -> bool:
        return self.evicted


def format_selector(match_labels: Mapping[str, str] | None, expressions: list[Any] | None) -> str:
    """A ``LabelSelector`` as the ``labelSelector`` query string (``k=v,k in (a,b),!k``)."""
    parts = [f"{k}={v}" for k, v in sorted((match_labels or {}).items())]
    for e in expressions or []:
        values = ",".join(sorted(e.values or []))
        parts.append({"In": f"{e.key} in ({values})", "NotIn": f"{e.key} notin ({values})",
                      "Exists": e.key, "DoesNotExist": f"!{e.key}"}.get(e.operator, f"{e.key}"))
    return ",".join(parts)


def _unix(ts: datetime | None) -> float | None:
    return None if ts is None else ts.timestamp()


class KubernetesActuator:
    """Scales ``namespace/deployment``. See the module docstring for guarantees and write order."""

    def __init__(self, namespace: str, deployment: str, *, api_client: Any = None, kubeconfig: str | None = None,
                 in_cluster: bool = False, qps: float = 5.0, burst: int = 10, max_retries: int = 5,
                 backoff_s: float = 0.2, controller_name: str = "ebb", request_timeout_s: float = 10.0,
                 clock: Callable[[], float] | None = None, sleep: Callable[[float], None] | None = None,
                 rng: random.Random | None = None, tier: SleepTier | None = None,
                 tier_settings: TierSettings | None = None, handoff: HandoffBoard | None = None) -> None:
        if not namespace or not deployment:
            raise ConfigError(f"kubernetes actuator needs a namespace and a deployment, got "
                              f"{namespace!r}/{deployment!r} (fix: pass --namespace and --deployment)")
        if max_retries < 0 or backoff_s < 0 or qps <= 0 or burst < 1:
            raise ConfigError(f"bad kubernetes client limits qps={qps!r} burst={burst!r} max_retries="
                              f"{max_retries!r} backoff_s={backoff_s!r} (fix: qps > 0, burst >= 1, retries >= 0)")
        self._k = require_extra("kubernetes.client", "k8s")
        self._urllib3 = require_extra("urllib3", "k8s")
        self.namespace, self.deployment = namespace, deployment
        self.target = f"{namespace}/{deployment}"
        self._owns_client = api_client is None
        self._api = api_client if api_client is not None else self._load_client(kubeconfig, in_cluster)
        self._apps = self._k.AppsV1Api(self._api)
        self._core = self._k.CoreV1Api(self._api)
        self._clock = clock or time.monotonic
        self._sleep = sleep or time.sleep
        self._rng = rng or random.Random()
        self._max_retries, self._backoff_s = max_retries, backoff_s
        self._calls = ApiCaller(api_client=self._api, target=self.target,
                                limiter=RateLimiter(qps, burst, clock=self._clock, sleep=self._sleep),
                                max_retries=max_retries, backoff_s=backoff_s, sleep=self._sleep, rng=self._rng,
                                api_error=self._k.exceptions.ApiException,
                                transport_errors=(self._urllib3.exceptions.HTTPError, OSError))
        self._timeout = request_timeout_s
        self.controller_name = controller_name
        self._lock = threading.RLock()
        self._ids: dict[str, ReplicaId] = {}
        self._zones: dict[str, str] = {}
        self._done: dict[DecisionId, ActuationResult] = {}
        self._reasons: dict[DecisionId, str] = {}
        if tier_settings is not None and tier is not None and tier_settings.tier != tier:
            raise ConfigError(f"{self.target}: tier {tier.describe()} differs from the tier settings' "
                              f"{tier_settings.tier.describe()} (fix: pass one of them)")
        if handoff is not None and (tier is not None or tier_settings is not None):
            raise ConfigError(f"{self.target}: a hand-off to an HPA/KEDA cannot keep an asleep tier (the tier's "
                              "/scale counts sleeping pods, which the HPA would see as running) (fix: drop --tier, "
                              "or let Ebb write /scale itself with --mode act and no --serve-keda/--hand-off)")
        self.handoff = handoff
        """Hand-off mode (:mod:`ebb.decide.handoff`): the decided count goes to this board, not ``/scale``."""
        self.tier: SleepTier | None = tier or (tier_settings.tier if tier_settings is not None else None)
        """The asleep tier (:class:`~ebb.actuate.base.SleepingActuator`); None: no pod ever sleeps."""
        self._tier: KubeTier | None = None
        if self.tier is not None:
            self._tier = KubeTier(_TierOps(self), tier_settings or TierSettings(self.tier))

    @staticmethod
    def _load_client(kubeconfig: str | None, in_cluster: bool) -> Any:
        return load_api_client(kubeconfig, in_cluster)

    def close(self) -> None:
        """Stop the asleep tier's thread (a wake in progress is waited for), then close the API client
        if this actuator created it."""
        if self._tier is not None:
            self._tier.close()
        if self._owns_client:
            self._api.close()

    def __enter__(self) -> KubernetesActuator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reason(self, decision_id: DecisionId) -> str | None:
        """Why ``decision_id`` ended as it did (``applied``, ``no change``, ``superseded: ...``)."""
        with self._lock:
            return self._reasons.get(decision_id)

    # -- reads -------------------------------------------------------------------------------------
    def _read_deployment(self) -> KubeDeployment:
        d = self._calls.call(f"read deployment {self.target}", lambda: self._apps.read_namespaced_deployment(
            self.deployment, self.namespace, _request_timeout=self._timeout))
        sel = d.spec.selector
        replicas = int(d.spec.replicas if d.spec.replicas is not None else 1)
        if self.handoff is not None:  # a pending hand-off is the spec this decision starts from
            replicas = self.handoff.spec_seen(self.target, replicas)
        return KubeDeployment(replicas, d.metadata.resource_version,
                           d.metadata.uid or "", format_selector(sel.match_labels, sel.match_expressions),
                           dict(d.metadata.annotations or {}))

    def _pods(self, selector: str) -> list[KubePod]:
        if not selector:
            raise PermanentError(f"deployment {self.target} has an empty selector (fix: give it spec.selector)")
        items = self._calls.call(f"list pods of {self.target}", lambda: self._core.list_namespaced_pod(
            self.namespace, label_selector=selector, _request_timeout=self._timeout)).items
        out = []
        for p in items:
            if (p.status.phase if p.status else None) in ("Succeeded", "Failed"):
                continue
            ready = next((c for c in (p.status.conditions or []) if c.type == "Ready" and c.status == "True"), None)
            created = _unix(p.metadata.creation_timestamp) or 0.0
            ready_s = None if ready is None else (_unix(ready.last_transition_time) or created)
            out.append(KubePod(p.metadata.name, created, ready_s, (p.spec.node_name or "") if p.spec else "",
                            p.metadata.deletion_timestamp is not None, dict(p.metadata.annotations or {}),
                            (p.status.pod_ip or "") if p.status else "", dict(p.metadata.labels or {})))
        return out

    def _replica_id(self, name: str) -> ReplicaId:
        if name not in self._ids:
            self._ids[name] = ReplicaId(len(self._ids))
        return self._ids[name]

    def _zone(self, node: str) -> str:
        if not node:
            return ""
        if node not in self._zones:
            def not_found(exc: Any) -> str | None:
                return "" if exc.status == 404 else None
            got = self._calls.call(f"read node {node}",
                                   lambda: self._core.read_node(node, _request_timeout=self._timeout),
                                   intercept=not_found)
            self._zones[node] = "" if isinstance(got, str) else (got.metadata.labels or {}).get(ZONE_LABEL, "")
        return self._zones[node]

    def state(self) -> FleetState:
        with self._lock:
            scale = self._calls.call(f"read scale of {self.target}",
                                     lambda: self._apps.read_namespaced_deployment_scale(
                                         self.deployment, self.namespace, _request_timeout=self._timeout))
            pods = self._pods(scale.status.selector if scale.status else "")
            spec = scale.spec.replicas if scale.spec and scale.spec.replicas is not None else 0
            if self.handoff is not None:
                spec = self.handoff.spec_seen(self.target, int(spec))
            if self._tier is not None:
                return self._tier.state(int(spec), pods)
            live = sorted((p for p in pods if not p.terminating), key=lambda p: (p.created_s, p.name))
            replicas = tuple(ReplicaState(self._replica_id(p.name), p.name, p.created_s, p.ready_s, self._zone(p.node))
                             for p in live)
            return FleetState(self.target, int(spec), replicas, draining=len(pods) - len(live))

    # -- apply ------------------------------------------------------------------------------------
    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        if request.replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {request.replicas!r}")
        with self._lock:
            if decision_id in self._done:
                return replace(self._done[decision_id], applied=False)
            if self._tier is not None:
                return self._tier.apply(decision_id, request)
            expected: int | None = None
            marked: list[str] = []
            want = request.replicas
            removed: tuple[str, ...] = ()
            existing: set[str] = set()
            for _ in range(self._max_retries + 1):
                dep = self._read_deployment()
                if expected is None:
                    expected = dep.replicas
                elif dep.replicas == want and dep.annotations.get(DECISION_ANNOTATION) == decision_id:
                    # our own /scale write landed but its answer was lost (the retry then got 409)
                    return self._applied(decision_id, dep, expected, want, removed, existing)
                elif dep.replicas != expected:
                    return self._superseded(decision_id, expected, dep.replicas, marked)
                prior = self._recorded(decision_id, dep)
                if prior is not None:
                    return prior
                if want == dep.replicas:
                    return self._finish(ActuationResult(decision_id, False, want, want), "no change")
                try:
                    if want < dep.replicas:
                        removed, marked = self._mark_victims(decision_id, dep, want, request)
                    else:
                        existing = {p.name for p in self._pods(dep.selector)}
                    rv = self._write_intent(decision_id, dep, want)
                    self._patch_scale(want, rv)
                except WriteConflict:
                    log.info("decision %s: %s changed under us (409); re-reading", decision_id, self.target)
                    continue
                return self._applied(decision_id, dep, dep.replicas, want, removed, existing)
            raise TransientError(f"decision {decision_id}: {self.target} kept changing (409 Conflict "
                                 f"{self._max_retries + 1} times); retry later", retry_after_s=self._backoff_s)

    def _applied(self, decision_id: DecisionId, dep: KubeDeployment, before: int, want: int,
                 removed: tuple[str, ...], existing: set[str]) -> ActuationResult:
        added = self._added(dep.selector, existing) if want > before else ()
        result = ActuationResult(decision_id, True, before, want, removed, added)
        self._emit_event(decision_id, dep, result)
        return self._finish(result, "applied")

    def _added(self, selector: str, existing: set[str]) -> tuple[str, ...]:
        """Pods the ReplicaSet controller has created since the patch, oldest first. Upstream creates
        them asynchronously, so this may list fewer than were requested; a failed read lists none."""
        try:
            pods = self._pods(selector)
        except (PermanentError, TransientError) as exc:
            log.warning("scaled %s up but could not list the new pods: %s", self.target, exc)
            return ()
        return tuple(p.name for p in sorted(pods, key=lambda p: (p.created_s, p.name))
                     if p.name not in existing and not p.terminating)

    def _finish(self, result: ActuationResult, reason: str) -> ActuationResult:
        self._done[result.decision_id] = result
        self._reasons[result.decision_id] = reason
        return result

    def _recorded(self, decision_id: DecisionId, dep: KubeDeployment) -> ActuationResult | None:
        """What the annotation says a previous actuator did with this id (None: carry on)."""
        if dep.annotations.get(DECISION_ANNOTATION) != decision_id:
            return None
        frm, _, to = dep.annotations.get(DECISION_REPLICAS_ANNOTATION, "").partition("->")
        if not (frm.isdigit() and to.isdigit()):
            return None
        if dep.replicas == int(to):
            return self._finish(ActuationResult(decision_id, False, int(frm), int(to)), "already applied")
        if dep.replicas == int(frm):
            return None  # intent written, /scale not yet: finish the decision
        return self._superseded(decision_id, int(frm), dep.replicas, [])

    def _superseded(self, decision_id: DecisionId, expected: int, now: int, marked: list[str]) -> ActuationResult:
        why = f"superseded: spec.replicas of {self.target} changed from {expected} to {now} by another writer"
        log.warning("decision %s %s; not overwriting", decision_id, why)
        for name in marked:  # take back the preference we expressed for this decision
            try:
                self._patch_pod(name, {DELETION_COST_ANNOTATION: None, VICTIM_ANNOTATION: None})
            except (WriteConflict, PermanentError, TransientError) as exc:
                log.warning("could not clear deletion cost on %s: %s", name, exc)
        return self._finish(ActuationResult(decision_id, False, expected, now), why)

    def _patch_pod(self, name: str, annotations: Mapping[str, str | None],
                   labels: Mapping[str, str | None] | None = None) -> None:
        """Merge ``annotations`` (and ``labels``) into a pod; a pod that is already gone needs no preference."""
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if labels:
            meta["labels"] = dict(labels)
        body = {"metadata": meta}
        self._calls.call(f"patch pod {self.namespace}/{name}", lambda: self._core.patch_namespaced_pod(
            name, self.namespace, body, _content_type=_MERGE_PATCH, _request_timeout=self._timeout),
            intercept=lambda exc: "gone" if exc.status == 404 else None)

    def _mark_victims(self, decision_id: DecisionId, dep: KubeDeployment, want: int,
                      request: ScaleRequest) -> tuple[tuple[str, ...], list[str]]:
        """Set deletion costs on the victims; return (predicted removals, pods marked now)."""
        live = [p for p in self._pods(dep.selector) if not p.terminating]
        by_name = {p.name: p for p in live}
        names = {rid: name for name, rid in self._ids.items()}
        named = list(dict.fromkeys(n for v in request.victims if (n := names.get(v)) in by_name))
        newest = [p.name for p in sorted(live, key=lambda p: (p.created_s, p.name), reverse=True)
                  if p.name not in named]
        chosen = (named + newest)[: max(0, len(live) - want)]
        costs = {name: str(VICTIM_COST_BASE + rank) for rank, name in enumerate(chosen)}
        marked = []
        for p in live:
            if p.name in costs:
                if p.annotations.get(DELETION_COST_ANNOTATION) != costs[p.name]:
                    self._patch_pod(p.name, {DELETION_COST_ANNOTATION: costs[p.name], VICTIM_ANNOTATION: decision_id})
                    marked.append(p.name)
            elif VICTIM_ANNOTATION in p.annotations:  # a stale preference from an earlier decision
                self._patch_pod(p.name, {DELETION_COST_ANNOTATION: None, VICTIM_ANNOTATION: None})
        # upstream ranking: not Ready first, then lowest deletion cost, then newest
        ranked = sorted(sorted(live, key=lambda p: (p.created_s, p.name), reverse=True),
                        key=lambda p: (p.ready_s is not None, int(costs.get(p.name, p.cost))))
        return tuple(p.name for p in ranked[: max(0, len(live) - want)]), marked

    def _write_intent(self, decision_id: DecisionId, dep: KubeDeployment, want: int, what: str | None = None) -> str:
        """Annotate the Deployment with the decision (``what``: the replicas text, ``FROM->TO`` by default)."""
        body = {"metadata": {"resourceVersion": dep.resource_version, "annotations": {
            DECISION_ANNOTATION: decision_id,
            DECISION_REPLICAS_ANNOTATION: what if what is not None else f"{dep.replicas}->{want}"}}}
        out = self._calls.call(f"annotate deployment {self.target}", lambda: self._apps.patch_namespaced_deployment(
            self.deployment, self.namespace, body, _content_type=_MERGE_PATCH, _request_timeout=self._timeout))
        return str(out.metadata.resource_version)

    def _patch_scale(self, want: int, resource_version: str) -> None:
        if self.handoff is not None:  # the HPA writes /scale (module docstring: hand-off)
            self.handoff.hand_off(self.target, want)
            return
        body = {"metadata": {"resourceVersion": resource_version}, "spec": {"replicas": want}}
        self._calls.call(f"patch scale of {self.target}", lambda: self._apps.patch_namespaced_deployment_scale(
            self.deployment, self.namespace, body, _content_type=_MERGE_PATCH, _request_timeout=self._timeout))

    def _emit_event(self, decision_id: DecisionId, dep: KubeDeployment, result: ActuationResult) -> None:
        k = self._k
        down = result.replicas_after < result.replicas_before
        now = datetime.now(timezone.utc)
        message = f"decision {decision_id}: replicas {result.replicas_before}->{result.replicas_after}"
        if result.removed:
            message += f"; removing {', '.join(result.removed)}"
        digest = hashlib.sha256(str(decision_id).encode()).hexdigest()[:16]
        event = k.CoreV1Event(
            metadata=k.V1ObjectMeta(name=f"{self.deployment}.ebb-{digest}", namespace=self.namespace),
            involved_object=k.V1ObjectReference(api_version="apps/v1", kind="Deployment", name=self.deployment,
                                                namespace=self.namespace, uid=dep.uid or None),
            reason="EbbScaleDown" if down else "EbbScaleUp", message=message, type="Normal",
            source=k.V1EventSource(component=self.controller_name), first_timestamp=now, last_timestamp=now,
            count=1, reporting_component=self.controller_name)
        try:
            self._calls.call(f"create event for {self.target}", lambda: self._core.create_namespaced_event(
                self.namespace, event, _request_timeout=self._timeout), retries=0)
        except (WriteConflict, PermanentError, TransientError) as exc:
            log.warning("decision %s applied but its Event was not recorded: %s", decision_id, exc)

    # -- asleep tier --------------------------------------------------------------------------------
    def keep_asleep(self, keep: int | None) -> tuple[str, ...]:
        """Release the oldest sleepers until at most ``keep`` sleep (None: only the TTL decides); the
        names released (each: deletion cost -2000, then ``/scale`` - 1; :mod:`ebb.actuate.kube_tier`).
        Always () without a tier."""
        return self._tier.keep_asleep(keep) if self._tier is not None else ()

    def observe_drains(self, observer: DrainObserver | None) -> None:
        """The tier's drain records go to ``observer`` (:class:`~ebb.actuate.base.ReportsDrains`); none without a tier."""
        if self._tier is not None:
            self._tier.drains.observer = observer

    # -- eviction ---------------------------------------------------------------------------------
    def evict(self, pod_name: str) -> Eviction:
        """Evict one pod through the Eviction API (policy/v1). A PodDisruptionBudget that would be
        violated → ``Eviction(evicted=False, reason=...)``; the pod is never deleted directly."""
        body = self._k.V1Eviction(api_version="policy/v1", kind="Eviction",
                                  metadata=self._k.V1ObjectMeta(name=pod_name, namespace=self.namespace))

        def refused(exc: Any) -> Eviction | None:
            if exc.status == 404:
                return Eviction(pod_name, True, "pod not found: already gone")
            if exc.status != 429:
                return None
            try:
                status = json.loads(exc.body or "{}")
            except ValueError:
                return None
            causes = (status.get("details") or {}).get("causes") or []
            budget = [c.get("message", "") for c in causes if c.get("reason") == "DisruptionBudget"]
            if not budget:
                return None  # API throttling, not a budget: retried like any 429
            return Eviction(pod_name, False, "; ".join([status.get("message", "")] + budget))

        with self._lock:
            return self._calls.call(f"evict pod {self.namespace}/{pod_name}", lambda: self._evicted(pod_name, body),
                                    intercept=refused)

    def _evicted(self, pod_name: str, body: Any) -> Eviction:
        self._core.create_namespaced_pod_eviction(pod_name, self.namespace, body, _request_timeout=self._timeout)
        return Eviction(pod_name, True, "evicted")


class _TierOps:
    """The actuator's API calls and lock, as :class:`~ebb.actuate.kube_tier.TierOps` names them."""

    def __init__(self, a: KubernetesActuator) -> None:
        self._a = a
        self.target = a.target
        self.lock: AbstractContextManager[Any] = a._lock
        self.max_retries, self.backoff_s = a._max_retries, a._backoff_s

    def clock(self) -> float:
        return self._a._clock()

    def read_deployment(self) -> KubeDeployment:
        return self._a._read_deployment()

    def pods(self, selector: str) -> list[KubePod]:
        return self._a._pods(selector)

    def patch_pod(self, name: str, annotations: Mapping[str, str | None],
                  labels: Mapping[str, str | None] | None = None) -> None:
        self._a._patch_pod(name, annotations, labels)

    def patch_scale(self, want: int, resource_version: str) -> None:
        self._a._patch_scale(want, resource_version)

    def write_intent(self, decision_id: DecisionId, dep: KubeDeployment, what: str) -> None:
        self._a._write_intent(decision_id, dep, dep.replicas, what)

    def added(self, selector: str, existing: set[str]) -> tuple[str, ...]:
        return self._a._added(selector, existing)

    def emit_event(self, decision_id: DecisionId, dep: KubeDeployment, result: ActuationResult) -> None:
        self._a._emit_event(decision_id, dep, result)

    def finish(self, result: ActuationResult, reason: str) -> ActuationResult:
        return self._a._finish(result, reason)

    def replica_id(self, name: str) -> ReplicaId:
        return self._a._replica_id(name)

    def replica_names(self) -> dict[ReplicaId, str]:
        return {rid: name for name, rid in self._a._ids.items()}

    def zone(self, node: str) -> str:
        return self._a._zone(node)


def load_api_client(kubeconfig: str | None = None, in_cluster: bool = False) -> Any:
    """A ``kubernetes.client.ApiClient`` from a kubeconfig (default ``~/.kube/config``) or the pod's
    service account, with the client's own retries off (the actuator's backoff is the only retry
    policy). Several actuators may share one (``ebb run --workloads``); the caller closes it.
    :class:`~ebb.errors.ConfigError` naming the source when the credentials cannot be loaded."""
    k = require_extra("kubernetes.client", "k8s")
    config = require_extra("kubernetes.config", "k8s")
    cfg = k.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except (config.ConfigException, OSError, ValueError) as exc:
        where = "in-cluster service account" if in_cluster else (kubeconfig or "~/.kube/config")
        raise ConfigError(f"cannot load Kubernetes credentials from {where}: {exc} (fix: pass a valid "
                          "--kubeconfig, or run in a pod with a service account and --in-cluster)") from exc
    cfg.retries = False  # the actuator's own backoff is the only retry policy
    return k.ApiClient(cfg)
