"""``ebb lint`` rules EBB201–EBB205: Kubernetes manifests, Prometheus configs and KEDA ScaledObjects.

* EBB201 resource-only HPAs, EBB202 scale-down stabilization, EBB203 all-namespace affinity,
  EBB204 hard topology spread without a PodDisruptionBudget and EBB205 metric-pipeline lag read
  the parsed YAML; nothing talks to a cluster.
* Cross-file facts come from the run's workspace only: a ``kube-controller-manager`` container's
  HPA flags (first one in file order, for the whole run; upstream defaults otherwise: sync
  15 s, downscale stabilization 300 s), PodDisruptionBudgets in the same namespace, Prometheus
  configs in the same folder. Unset values use upstream defaults: metric resolution 60 s, KEDA
  polling 30 s, Prometheus scrape 60 s.
* Durations parse as Go/Prometheus text (``1m30s`` = 90 s); anything else counts as unset.
  Label selectors follow upstream semantics (an empty selector matches everything; a malformed
  one matches nothing).
* Every rule reads values of any shape: a field of the wrong type (a list where a mapping belongs,
  a mapping as ``kind``) is treated as unset, never raised on — a linted file is not trusted.

The rule instances, with their texts, are registered in :mod:`ebb.lint.rules`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebb.lint.core import Document, Finding, Path_
from ebb.lint.core import RuleBase as _Base

__all__ = ["DOWNSCALE_STABILIZATION_S", "HPA_SYNC_S", "KEDA_POLLING_S", "METRIC_RESOLUTION_S", "PROM_SCRAPE_S",
           "AffinityAllNamespaces", "ControllerSettings", "HpaResourceOnly", "HpaScaleDownStabilization",
           "MetricPipelineMismatch", "SpreadWithoutPdb", "controller_settings", "parse_duration_s",
           "query_window_s", "selector_matches"]

HPA_SYNC_S = 15.0  # kube-controller-manager --horizontal-pod-autoscaler-sync-period default
METRIC_RESOLUTION_S = 60.0  # metrics-server --metric-resolution upstream default
DOWNSCALE_STABILIZATION_S = 300.0  # --horizontal-pod-autoscaler-downscale-stabilization upstream default
KEDA_POLLING_S = 30.0  # ScaledObject spec.pollingInterval default
PROM_SCRAPE_S = 60.0  # Prometheus global.scrape_interval default

_DUR = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def parse_duration_s(text: str) -> float | None:
    """``"1m30s"`` → 90.0; ``None`` for text that is not a Go/Prometheus duration."""
    text = text.strip()
    if not text or _DUR.sub("", text):
        return None
    return sum(float(n) * _UNITS[u] for n, u in _DUR.findall(text))


# ---------------------------------------------------------------------------------- Kubernetes
def _items(value: Any) -> list[Any]:
    """``value`` if it is a list, else no items (a scalar or mapping where a list belongs is unset)."""
    return value if isinstance(value, list) else []


def _words(value: Any) -> list[str]:
    """Command-line words of a container's ``command``/``args``: a list's items, or a string split."""
    if isinstance(value, list):
        return [str(a) for a in value]
    return value.split() if isinstance(value, str) else []


def _is_hpa(doc: Document) -> bool:
    return doc.get("kind") == "HorizontalPodAutoscaler" and str(doc.get("apiVersion")).startswith("autoscaling/")


def _is_scaled_object(doc: Document) -> bool:
    return doc.get("kind") == "ScaledObject" and str(doc.get("apiVersion")).startswith("keda.sh/")


@dataclass(frozen=True)
class ControllerSettings:
    """HPA settings of the kube-controller-manager found in the run (upstream defaults otherwise)."""

    sync_s: float = HPA_SYNC_S
    downscale_s: float = DOWNSCALE_STABILIZATION_S
    source: str | None = None  # file that set at least one of the flags
    downscale_known: bool = False


_SYNC_FLAG = "--horizontal-pod-autoscaler-sync-period"
_DOWN_FLAG = "--horizontal-pod-autoscaler-downscale-stabilization"


def _flag(args: list[str], name: str) -> float | None:
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return parse_duration_s(a.partition("=")[2])
        if a == name and i + 1 < len(args):
            return parse_duration_s(args[i + 1])
    return None


def controller_settings(docs: list[Document]) -> ControllerSettings:
    """Flags of the first container (in file order) whose command/args run ``kube-controller-manager``."""
    for doc in docs:
        if doc.kind != "k8s" or "kube-controller-manager" not in doc.source:
            continue
        for _, value in _walk(doc.data):
            if not isinstance(value, dict):
                continue
            args = _words(value.get("command")) + _words(value.get("args"))
            if not any(a.rsplit("/", 1)[-1] == "kube-controller-manager" for a in args):
                continue
            sync, down = _flag(args, _SYNC_FLAG), _flag(args, _DOWN_FLAG)
            if sync is None and down is None:
                return ControllerSettings(source=doc.path)
            return ControllerSettings(sync if sync else HPA_SYNC_S, DOWNSCALE_STABILIZATION_S if down is None else down,
                                      doc.path, down is not None)
    return ControllerSettings()


def _sync_text(cs: ControllerSettings) -> str:
    return f"HPA sync {cs.sync_s:g} s" + (" (kube-controller-manager flag)" if cs.source and cs.sync_s != HPA_SYNC_S
                                          else "")


_RANGE = re.compile(r"\[\s*([0-9][0-9a-z.]*)\s*(?::\s*([0-9][0-9a-z.]*)\s*)?\]")


def query_window_s(query: str) -> float:
    """The longest PromQL range (``[5m]``) or subquery range plus step (``[10m:1m]``) in ``query``; 0 when none."""
    best = 0.0
    for rng, step in _RANGE.findall(query):
        total = (parse_duration_s(rng) or 0.0) + ((parse_duration_s(step) or 0.0) if step else 0.0)
        best = max(best, total)
    return best


class HpaResourceOnly(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        if not _is_hpa(document):
            return
        metrics = document.get("spec", "metrics")
        if document.get("apiVersion") == "autoscaling/v1" or not metrics:
            yield self.finding(document, ("spec",) if document.get("apiVersion") == "autoscaling/v1" else ("kind",),
                               "HPA scales on average CPU utilisation only (no latency or custom metric)")
            return
        if not isinstance(metrics, list):
            return
        types = {str(m.get("type")) for m in metrics if isinstance(m, dict)}  # str(): a type may be unhashable
        if types and types <= {"Resource", "ContainerResource"}:
            yield self.finding(document, ("spec", "metrics"),
                               "HPA scales on CPU/memory averages only (no latency, Pods, Object or External "
                               "metric): an average hides the peaks that break the SLO")


class HpaScaleDownStabilization(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        if _is_hpa(document):
            base: Path_ = ("spec", "behavior")
        elif _is_scaled_object(document):
            base = ("spec", "advanced", "horizontalPodAutoscalerConfig", "behavior")
        else:
            return
        what = "HPA" if _is_hpa(document) else f"ScaledObject {document.get('metadata', 'name')!s}"
        down = document.get(*base, "scaleDown")
        if isinstance(down, dict) and down.get("selectPolicy") == "Disabled":
            return
        window = down.get("stabilizationWindowSeconds") if isinstance(down, dict) else None
        if window is None:
            cs = controller_settings(document.workspace.documents)
            where = base + ("scaleDown",) if down else ("spec",)
            if not cs.downscale_known:
                yield self.finding(document, where,
                                   f"{what}: no explicit scale-down stabilization window: relies on the controller's "
                                   "--horizontal-pod-autoscaler-downscale-stabilization (300 s upstream, "
                                   "cluster-specific)", severity="info")
            elif cs.downscale_s < METRIC_RESOLUTION_S:
                yield self.finding(document, where,
                                   f"{what}: no explicit scale-down stabilization window and kube-controller-manager "
                                   f"({cs.source}) sets --horizontal-pod-autoscaler-downscale-stabilization to "
                                   f"{cs.downscale_s:g} s, shorter than the {METRIC_RESOLUTION_S:g} s metric "
                                   "resolution: one low sample can remove replicas")
        elif isinstance(window, (int, float)) and window < METRIC_RESOLUTION_S:
            yield self.finding(document, base + ("scaleDown", "stabilizationWindowSeconds"),
                               f"{what}: scale-down stabilization of {window:g} s is shorter than the "
                               f"{METRIC_RESOLUTION_S:g} s metric resolution: one low sample can remove replicas")


def _walk(data: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every (path, value) of ``data`` in document order (pre-order), with an explicit stack: one
    step per node whatever the depth (``yield from`` recursion costs one frame per level per node)."""
    stack: list[tuple[Path_, Any]] = [(path, data)]
    while stack:
        here, value = stack.pop()
        yield here, value
        if isinstance(value, dict):
            stack.extend((here + (k,), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((here + (i,), value[i]) for i in range(len(value) - 1, -1, -1))


class AffinityAllNamespaces(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        for path, value in _walk(document.data):
            if (path and path[-1] == "namespaceSelector" and value == {}
                    and any(p in ("podAffinity", "podAntiAffinity") for p in path)):
                yield self.finding(document, path,
                                   "pod (anti-)affinity term with namespaceSelector: {} matches pods in every "
                                   "namespace")


_WORKLOADS = {"Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job"}


def _pod_labels(doc: Document) -> tuple[dict[str, Any], Path_] | None:
    kind = doc.get("kind")
    tsc: Path_
    if kind == "Pod":
        labels, tsc = doc.get("metadata", "labels"), ("spec", "topologySpreadConstraints")
    elif isinstance(kind, str) and kind in _WORKLOADS:
        labels, tsc = doc.get("spec", "template", "metadata", "labels"), ("spec", "template", "spec",
                                                                           "topologySpreadConstraints")
    else:
        return None
    return (labels if isinstance(labels, dict) else {}), tsc


def selector_matches(selector: Any, labels: dict[str, Any]) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions); empty matches all."""
    if not isinstance(selector, dict):
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, dict) or not isinstance(expressions, list):
        return False  # malformed: the API server would reject it, so it selects nothing
    for k, v in match_labels.items():
        if str(labels.get(k)) != str(v) or k not in labels:
            return False
    for expr in expressions:
        if not isinstance(expr, dict) or not isinstance(expr.get("key"), str):
            return False
        key, op, values = expr["key"], expr.get("operator"), [str(v) for v in _items(expr.get("values"))]
        present = key in labels
        if op == "In" and not (present and str(labels[key]) in values):
            return False
        if op == "NotIn" and present and str(labels[key]) in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _namespace(doc: Document) -> str:
    return str(doc.get("metadata", "namespace") or "default")


class SpreadWithoutPdb(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        found = _pod_labels(document)
        if found is None:
            return
        labels, tsc_path = found
        tsc = document.get(*tsc_path)
        if not isinstance(tsc, list):
            return
        hard = [i for i, c in enumerate(tsc) if isinstance(c, dict) and c.get("whenUnsatisfiable") == "DoNotSchedule"]
        if not hard:
            return
        ns = _namespace(document)
        for other in document.workspace.documents:
            if (other.kind == "k8s" and other.get("kind") == "PodDisruptionBudget" and _namespace(other) == ns
                    and selector_matches(other.get("spec", "selector"), labels)):
                return
        yield self.finding(document, tsc_path + (hard[0], "whenUnsatisfiable"),
                           f"{document.get('kind')} {document.get('metadata', 'name')!s}: topology spread "
                           "with DoNotSchedule and no PodDisruptionBudget selecting its pods: a drain can "
                           "evict replicas that then cannot be rescheduled")


class MetricPipelineMismatch(_Base):
    """Worst-case lag of a metric chain = scrape interval (or metric resolution) + query range/resolution
    + polling interval (KEDA) or sync period (HPA); documented in docs/lint/EBB205.md."""

    def _arg_findings(self, document: Document, cs: ControllerSettings) -> Iterator[Finding]:
        for path, value in _walk(document.data):
            if not (isinstance(value, str) and value.startswith("--metric-resolution")):
                continue
            res = parse_duration_s(value.partition("=")[2])
            if res is not None and res > cs.sync_s:
                n = res / cs.sync_s
                yield self.finding(document, path,
                                   f"metrics-server --metric-resolution={res:g}s vs {_sync_text(cs)}: "
                                   f"the HPA re-reads one stale value {n:g} times; worst-case lag "
                                   f"{res + cs.sync_s:g} s (resolution {res:g} + sync {cs.sync_s:g})")

    def _default_findings(self, document: Document, cs: ControllerSettings) -> Iterator[Finding]:
        for path, value in _walk(document.data):
            if not (isinstance(value, dict) and "metrics-server" in str(value.get("image", ""))):
                continue
            flags = _words(value.get("args")) + _words(value.get("command"))
            if not any(a.startswith("--metric-resolution") for a in flags) and METRIC_RESOLUTION_S > cs.sync_s:
                yield self.finding(document, path + ("image",),
                                   f"metrics-server without --metric-resolution uses the {METRIC_RESOLUTION_S:g} s "
                                   f"default vs {_sync_text(cs)}: the HPA re-reads one stale value "
                                   f"{METRIC_RESOLUTION_S / cs.sync_s:g} times; worst-case lag "
                                   f"{METRIC_RESOLUTION_S + cs.sync_s:g} s (resolution {METRIC_RESOLUTION_S:g} "
                                   f"+ sync {cs.sync_s:g})")

    @staticmethod
    def _same_folder(document: Document) -> list[Document]:
        return [d for d in document.workspace.documents if Path(d.path).parent == Path(document.path).parent]

    def _keda_findings(self, document: Document) -> Iterator[Finding]:
        proms = [d for d in self._same_folder(document) if d.kind == "prometheus"]
        if not proms:
            return
        raw = proms[0].get("global", "scrape_interval")
        scrape = (parse_duration_s(raw) if isinstance(raw, str) else None) or PROM_SCRAPE_S
        polling = document.get("spec", "pollingInterval")
        poll_s = float(polling) if isinstance(polling, (int, float)) and not isinstance(polling, bool) else KEDA_POLLING_S
        for i, trig in enumerate(_items(document.get("spec", "triggers"))):
            if not (isinstance(trig, dict) and trig.get("type") == "prometheus") or poll_s <= 0:
                continue
            if poll_s >= scrape:
                continue
            query = trig.get("metadata", {}).get("query") if isinstance(trig.get("metadata"), dict) else None
            window = query_window_s(query) if isinstance(query, str) else 0.0
            lag = scrape + window + poll_s
            where: Path_ = ("spec", "pollingInterval") if polling is not None else ("spec", "triggers", i, "type")
            yield self.finding(document, where,
                               f"ScaledObject {document.get('metadata', 'name')!s}: KEDA polls the prometheus "
                               f"trigger every {poll_s:g} s{'' if polling is not None else ' (default)'} but "
                               f"Prometheus scrapes every {scrape:g} s ({Path(proms[0].path).name}): "
                               f"{scrape / poll_s:g} polls re-read the same value; worst-case lag {lag:g} s "
                               f"(scrape {scrape:g} + query range {window:g} + polling {poll_s:g})")

    def check(self, document: Document) -> Iterator[Finding]:
        if document.kind == "k8s":
            if _is_scaled_object(document):
                yield from self._keda_findings(document)
                return
            cs = controller_settings(document.workspace.documents)
            yield from self._arg_findings(document, cs)
            yield from self._default_findings(document, cs)
            return
        # Prometheus: a scrape interval longer than the HPA sync period, when the same folder
        # holds an HPA reading a non-resource (adapter/custom) metric.
        uses_custom = any(_is_hpa(d) and any(isinstance(m, dict) and m.get("type") in ("Pods", "Object", "External")
                                             for m in _items(d.get("spec", "metrics")))
                          for d in self._same_folder(document))
        if not uses_custom:
            return
        cs = controller_settings(document.workspace.documents)
        candidates: list[tuple[Path_, Any]] = [(("global", "scrape_interval"), document.get("global", "scrape_interval"))]
        for i, job in enumerate(_items(document.get("scrape_configs"))):
            if isinstance(job, dict):
                candidates.append((("scrape_configs", i, "scrape_interval"), job.get("scrape_interval")))
        for path, value in candidates:
            secs = parse_duration_s(value) if isinstance(value, str) else None
            if secs is not None and secs > cs.sync_s:
                yield self.finding(document, path,
                                   f"Prometheus scrape_interval {secs:g}s vs {_sync_text(cs)}: the HPA "
                                   f"re-reads one stale value {secs / cs.sync_s:g} times; worst-case lag at least "
                                   f"{secs + cs.sync_s:g} s (scrape {secs:g} + sync {cs.sync_s:g}; the adapter "
                                   "query's range adds to it)")
