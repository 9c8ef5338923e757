"""``ebb lint`` rules EBB206–EBB208: how the scalers of a GPU serving fleet are wired.

* EBB206 reads one HPA or KEDA ScaledObject: a ``Pods``/``Object``/``External`` metric name, a
  ``prometheus`` trigger's ``query`` or another trigger's metadata values that name a GPU
  utilisation series (:data:`GPU_UTIL`).
* EBB207 reads the whole run (:func:`scale_owners`, computed once per run): every HPA, every
  ScaledObject, and every Deployment an Ebb controller scales itself (:mod:`ebb.lint.ebb_owners`).
  Two of them on one target is a finding on each HPA/ScaledObject involved; two HPAs/ScaledObjects
  count only when their files are applied together (:meth:`Scaler.applied_with`), an Ebb controller
  anywhere in the run.
* EBB208 reads one ScaledObject: a trigger on Ebb's external scaler (:func:`is_ebb_trigger`) needs
  ``spec.fallback`` with ``behavior: currentReplicasIfHigher`` and the default ``AverageValue`` metric.

Values of the wrong type are unset, never raised on (a linted file is not trusted); every walk is
iterative. The rule instances, with their texts, are registered in :mod:`ebb.lint.rules`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from ebb.lint.core import Document, Finding, Path_
from ebb.lint.core import RuleBase as _Base
from ebb.lint.ebb_owners import EbbTarget, ebb_targets, namespaces_meet

__all__ = ["GPU_UTIL", "EbbScalerFallback", "GpuUtilScaler", "Scaler", "ScaleOwners", "TwoScalers",
           "is_ebb_trigger", "scale_owners"]

GPU_UTIL = re.compile(
    r"dcgm_fi_dev_gpu_util|dcgm_fi_prof_gr_engine_active|utilization[._]gpu|gpu[._-]?util"
    r"|(?:gpu|accelerator)[._|/-]?duty[._]?cycle", re.IGNORECASE)
"""A GPU utilisation series: DCGM's ``DCGM_FI_DEV_GPU_UTIL`` (and renamed copies such as
``dcgm_fi_dev_gpu_util_relabelled``), its profiling twin ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``,
nvidia-smi's ``utilization.gpu`` (``nvidia_smi_utilization_gpu_ratio``), ``gpu_utilization``/
``gpu_util``/``GPUUtilization`` names, and duty cycles (``nvidia_gpu_duty_cycle``, GKE's
``accelerator/duty_cycle``). ``gpu_memory_utilization`` and ``vllm:gpu_cache_usage_perc`` do not match."""

_SERIES = re.compile(r"[A-Za-z0-9_:.|/-]+")  # the whole series name around a GPU_UTIL match
_SOURCE_KEY = {"Pods": "pods", "Object": "object", "External": "external"}
_EBB_ADDRESS = re.compile(r"(?:^|[^a-z0-9])ebb", re.IGNORECASE)
_KEDA_PAUSED = "autoscaling.keda.sh/paused"
_NAMED = 3  # other owners an EBB207 message names before "more"


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_hpa(doc: Document) -> bool:
    return doc.get("kind") == "HorizontalPodAutoscaler" and str(doc.get("apiVersion")).startswith("autoscaling/")


def _is_scaled_object(doc: Document) -> bool:
    return doc.get("kind") == "ScaledObject" and str(doc.get("apiVersion")).startswith("keda.sh/")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _namespace(doc: Document) -> str | None:
    """``metadata.namespace``; None when unset (the object lands in whatever namespace it is applied to)."""
    return _text(doc.get("metadata", "namespace"))


def _label(kind: str, namespace: str | None, name: str) -> str:
    short = "HPA" if kind == "HorizontalPodAutoscaler" else kind
    return f"{short} {namespace + '/' if namespace else ''}{name}"


def _target(doc: Document) -> tuple[str, str] | None:
    """(kind, name) of ``spec.scaleTargetRef``; KEDA defaults the kind to Deployment, and so does this."""
    ref = doc.get("spec", "scaleTargetRef")
    if not isinstance(ref, dict) or _text(ref.get("name")) is None:
        return None
    return _text(ref.get("kind")) or "Deployment", ref["name"]


def _where(doc: Document, path: Path_) -> str:
    return f"{Path(doc.path).name}:{doc.line_of(path)}"


# ------------------------------------------------------------------------------------------ EBB206
def _hpa_metric_names(doc: Document) -> Iterator[tuple[Path_, str]]:
    for i, metric in enumerate(_items(doc.get("spec", "metrics"))):
        key = _SOURCE_KEY.get(str(metric.get("type"))) if isinstance(metric, dict) else None  # str(): unhashable
        source = metric.get(key) if key is not None else None
        if key is None or not isinstance(source, dict):
            continue
        named = source.get("metric")
        if isinstance(named, dict) and _text(named.get("name")):
            yield ("spec", "metrics", i, key, "metric", "name"), named["name"]
        if _text(source.get("metricName")):  # autoscaling/v2beta1
            yield ("spec", "metrics", i, key, "metricName"), source["metricName"]


def _trigger_texts(doc: Document) -> Iterator[tuple[Path_, str]]:
    """A prometheus trigger's ``query`` (its ``metricName`` only names the result); for any other trigger
    every metadata string but addresses (an external, metrics-api or cloud scaler says what it reads in its
    own keys: ``valueLocation``, CloudWatch's ``metricName``, Datadog's ``query``)."""
    for i, trigger in enumerate(_items(doc.get("spec", "triggers"))):
        meta = trigger.get("metadata") if isinstance(trigger, dict) else None
        if not isinstance(meta, dict):
            continue
        base: Path_ = ("spec", "triggers", i, "metadata")
        if trigger.get("type") == "prometheus":
            if _text(meta.get("query")):
                yield base + ("query",), meta["query"]
            continue
        for key, value in meta.items():
            if _text(value) and not key.lower().endswith("address"):
                yield base + (key,), value


class GpuUtilScaler(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        if _is_hpa(document):
            found = _hpa_metric_names(document)
        elif _is_scaled_object(document):
            found = _trigger_texts(document)
        else:
            return
        me = _label(str(document.get("kind")), _namespace(document), str(document.get("metadata", "name")))
        target = _target(document)
        scales = f"{target[0]} {target[1]}" if target else "its target"
        for path, text in found:
            match = GPU_UTIL.search(text)
            if match is None:
                continue
            series = next(w.group(0) for w in _SERIES.finditer(text) if w.start() <= match.start() < w.end())
            yield self.finding(document, path,
                               f"{me} scales {scales} on GPU utilisation ({series}): an LLM server reads "
                               "near 100 % busy with one request in flight (NVIDIA/dcgm-exporter#301), so it says "
                               "nothing about load; scale on the engine's queue, running requests or KV-cache use "
                               "(vllm:num_requests_waiting) or let Ebb decide")


# ------------------------------------------------------------------------------------------ EBB207
@dataclass(frozen=True)
class Scaler:
    """One HPA or ScaledObject as the cluster would hold it (a KEDA-made HPA counts as its ScaledObject)."""

    kind: str  # HorizontalPodAutoscaler | ScaledObject
    namespace: str | None  # None: unset in the file, so any namespace it is applied to
    name: str
    target: tuple[str, str]  # (kind, name)
    where: str  # file:line of its scaleTargetRef
    folder: PurePath  # absolute folder of its file

    def applied_with(self, other: Scaler) -> bool:
        """Files in one folder, or one folder inside the other (a base beside its manifests), are applied
        together; sibling folders (kustomize overlays, one folder per cluster, alternative examples) are not."""
        return self.folder == other.folder or self.folder in other.folder.parents or other.folder in self.folder.parents

    @property
    def label(self) -> str:
        return _label(self.kind, self.namespace, self.name)

    def same_object(self, other: Scaler) -> bool:
        """One object written twice (a base and an overlay, two copies of one chart) is one scaler."""
        return (self.kind, self.name) == (other.kind, other.name) and namespaces_meet(self.namespace, other.namespace)

    def shares_target(self, other: Scaler) -> bool:
        return (self.target == other.target and namespaces_meet(self.namespace, other.namespace)
                and self.applied_with(other))


KedaHpas = dict[str, list[tuple[str | None, str]]]
"""HPA name KEDA makes → (namespace, ScaledObject name) of each ScaledObject that makes it."""


@dataclass(frozen=True)
class ScaleOwners:
    """Every scaler of a run (by target name) and every Deployment an Ebb controller of the run scales
    itself (by Deployment name): a document's check looks up its own target, never the whole run."""

    scalers: dict[str, list[Scaler]]
    keda_hpas: KedaHpas
    ebb: dict[str, list[EbbTarget]]


def _keda_hpa_name(doc: Document) -> str:
    configured = doc.get("spec", "advanced", "horizontalPodAutoscalerConfig", "name")
    return _text(configured) or f"keda-hpa-{doc.get('metadata', 'name')}"


def _owning_scaled_object(doc: Document) -> str | None:
    for ref in _items(doc.get("metadata", "ownerReferences")):
        if isinstance(ref, dict) and ref.get("kind") == "ScaledObject" and _text(ref.get("name")):
            return str(ref["name"])
    return None


def _scaler(doc: Document, keda_hpas: KedaHpas) -> Scaler | None:
    """The scaler ``doc`` is: None for a non-scaler, a nameless one, or a paused ScaledObject."""
    target, name, ns = _target(doc), _text(doc.get("metadata", "name")), _namespace(doc)
    if target is None or name is None:
        return None
    where, folder = _where(doc, ("spec", "scaleTargetRef")), PurePath(os.path.abspath(doc.path)).parent
    if _is_scaled_object(doc):
        paused = doc.get("metadata", "annotations", _KEDA_PAUSED)
        return None if str(paused).lower() == "true" else Scaler("ScaledObject", ns, name, target, where, folder)
    if not _is_hpa(doc):
        return None
    owner = _owning_scaled_object(doc) or next(
        (so for so_ns, so in keda_hpas.get(name, []) if namespaces_meet(so_ns, ns)), None)
    if owner:
        return Scaler("ScaledObject", ns, owner, target, where, folder)
    return Scaler("HorizontalPodAutoscaler", ns, name, target, where, folder)


def scale_owners(documents: list[Document]) -> ScaleOwners:
    """The run's scalers and Ebb-scaled Deployments (what EBB207 compares), in one pass over ``documents``."""
    keda_hpas: KedaHpas = {}
    for d in documents:
        if d.kind == "k8s" and _is_scaled_object(d):
            keda_hpas.setdefault(_keda_hpa_name(d), []).append((_namespace(d), str(d.get("metadata", "name"))))
    scalers: dict[str, list[Scaler]] = {}
    seen: set[tuple[str, str | None, str, tuple[str, str], PurePath]] = set()
    for d in documents:
        found = _scaler(d, keda_hpas) if d.kind == "k8s" else None
        key = (found.kind, found.namespace, found.name, found.target, found.folder) if found else None
        if found is not None and key not in seen:  # a copy of one object adds nothing to compare
            seen.add((found.kind, found.namespace, found.name, found.target, found.folder))
            scalers.setdefault(found.target[1], []).append(found)
    ebb: dict[str, list[EbbTarget]] = {}
    for target in ebb_targets(documents):
        ebb.setdefault(target.deployment, []).append(target)
    return ScaleOwners(scalers, keda_hpas, ebb)


class TwoScalers(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        if not (_is_hpa(document) or _is_scaled_object(document)):
            return
        owners = document.workspace.derived("EBB207", scale_owners)
        me = _scaler(document, owners.keda_hpas)
        if me is None:
            return
        others: list[Scaler] = []
        for s in owners.scalers.get(me.target[1], []):
            if s.shares_target(me) and not s.same_object(me) and not any(o.same_object(s) for o in others):
                others.append(s)
                if len(others) > _NAMED:
                    break  # enough to name; a hostile run of thousands on one target stays linear
        ebb = [e for e in owners.ebb.get(me.target[1], []) if me.target[0] == "Deployment"
               and namespaces_meet(me.namespace, e.namespace)][:_NAMED + 1]
        if not others and not ebb:
            return
        names = [f"{s.label} ({s.where})" for s in others] + [f"Ebb in act mode ({e.where}, {e.how})" for e in ebb]
        if len(names) > _NAMED:
            names = names[:_NAMED] + ["more"]
        if others:
            why = ("the HPA controller stops every HPA whose pods another HPA also selects (AmbiguousSelector; a "
                   "ScaledObject scales through its own HPA), so nothing scales")
        else:
            why = "Ebb and the HPA overwrite each other's replica count"
        fix = "keep one owner"
        if ebb:
            fix += (" (to keep Ebb's decisions behind KEDA run it with --serve-keda HOST:PORT, behind an HPA with "
                    "--hand-off: Ebb decides, the HPA applies)")
        path: Path_ = ("spec", "scaleTargetRef", "name")
        so = "does" if len(names) == 1 else "do"
        yield self.finding(document, path, f"{me.label} scales {me.target[0]} {me.target[1]}, and so {so} "
                                           f"{', '.join(names)}: {why}; {fix}")


# ------------------------------------------------------------------------------------------ EBB208
def is_ebb_trigger(trigger: Any) -> bool:
    """A KEDA trigger on Ebb's external scaler: ``external``/``external-push`` whose ``scalerAddress``
    has a word starting ``ebb`` (``ebb-keda.ebb-system.svc:9090``) or whose metadata has ``workloadClass``
    (a key only Ebb's scaler documents)."""
    if not isinstance(trigger, dict) or trigger.get("type") not in ("external", "external-push"):
        return False
    meta = trigger.get("metadata")
    if not isinstance(meta, dict):
        return False
    address = meta.get("scalerAddress")
    return (isinstance(address, str) and _EBB_ADDRESS.search(address) is not None) or "workloadClass" in meta


_BEHAVIOR_EFFECT = {
    "static": "moves the fleet to fallback.replicas ({replicas}) whatever runs, a scale-down when more run",
    "currentReplicasIfLower": "moves the fleet to the lower of its size and fallback.replicas ({replicas}), a "
                              "scale-down when more run",
    "currentReplicas": "holds the fleet's size but never lifts it to fallback.replicas ({replicas}) from below",
}
KEDA_MAX_REPLICAS = 100  # ScaledObject spec.maxReplicaCount default


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class EbbScalerFallback(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        if not _is_scaled_object(document):
            return
        triggers = [(i, t) for i, t in enumerate(_items(document.get("spec", "triggers"))) if is_ebb_trigger(t)]
        if not triggers:
            return
        me = _label("ScaledObject", _namespace(document), str(document.get("metadata", "name")))
        first = triggers[0][0]
        fallback = document.get("spec", "fallback")
        if not isinstance(fallback, dict):
            yield self.finding(document, ("spec", "triggers", first, "type"),
                               f"{me} reads Ebb's external scaler with no spec.fallback: while Ebb is unreachable "
                               "KEDA hands the HPA no metric and nothing follows the load; add fallback "
                               "{failureThreshold: 3, replicas: N, behavior: currentReplicasIfHigher}")
        elif fallback.get("failureThreshold") is None or fallback.get("replicas") is None:
            missing = " and ".join(k for k in ("failureThreshold", "replicas") if fallback.get(k) is None)
            yield self.finding(document, ("spec", "fallback"),
                               f"{me}: spec.fallback has no {missing}, which KEDA requires; set both and "
                               "behavior: currentReplicasIfHigher")
        elif fallback.get("behavior") != "currentReplicasIfHigher":
            yield from self._behavior(document, me, fallback)
        for i, trigger in triggers:
            metric_type = trigger.get("metricType")
            if metric_type is not None and metric_type != "AverageValue":
                yield self.finding(document, ("spec", "triggers", i, "metricType"),
                                   f"{me}: Ebb's external scaler answers its replicas against a target of 1 as an "
                                   f"AverageValue metric; with metricType {metric_type} the HPA no longer applies that "
                                   "number and KEDA skips the fallback; remove metricType")

    def _behavior(self, document: Document, me: str, fallback: dict[str, Any]) -> Iterator[Finding]:
        """A fallback whose behavior is not currentReplicasIfHigher: a warning when an outage can remove
        replicas, info for ``currentReplicas`` (it never removes any), silent when ``fallback.replicas``
        is at least ``maxReplicaCount`` (the fleet can only grow to it)."""
        raw = fallback.get("behavior")
        behavior = "static" if raw is None else str(raw)
        replicas, ceiling = _count(fallback.get("replicas")), _count(document.get("spec", "maxReplicaCount"))
        if behavior in ("static", "currentReplicasIfLower") and replicas is not None and replicas >= (
                ceiling or KEDA_MAX_REPLICAS):
            return
        effect = _BEHAVIOR_EFFECT.get(behavior, "is not a behavior KEDA knows").format(replicas=fallback.get("replicas"))
        shown = "static (the default)" if raw is None else behavior
        yield self.finding(document, ("spec", "fallback", "behavior") if raw is not None else ("spec", "fallback"),
                           f"{me}: during an Ebb outage fallback.behavior {shown} {effect}; set behavior: "
                           "currentReplicasIfHigher (KEDA >= 2.17) so an outage never removes replicas and lifts "
                           "the fleet to fallback.replicas", severity="info" if behavior == "currentReplicas" else None)
