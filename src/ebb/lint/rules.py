"""The rules of ``ebb lint``. Each rule's ``doc`` is the text of ``docs/lint/<ID>.md``."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebb.lint.core import Document, Finding, Path_, Rule

__all__ = ["ALL_RULES", "rule_by_id", "HPA_SYNC_S", "parse_duration_s", "controller_settings", "ControllerSettings",
           "query_window_s"]

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


@dataclass(frozen=True)
class _Base:
    id: str
    severity: str
    title: str
    why: str
    fix: str
    kinds: tuple[str, ...]

    @property
    def doc(self) -> str:
        return f"# {self.id}: {self.title}\n\nSeverity: {self.severity}\n\n## Why\n\n{self.why}\n\n## Fix\n\n{self.fix}\n"

    def applies_to(self, kind: str) -> bool:
        return kind in self.kinds

    def finding(self, doc: Document, path: Path_, message: str, severity: str | None = None) -> Finding:
        return Finding(self.id, severity or self.severity, message, self.fix, doc.path, doc.line_of(path))


# ------------------------------------------------------------------------------------ DeepSpeed
class ZeroOffload(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        zero = document.get("zero_optimization")
        if not isinstance(zero, dict):
            return
        stage = zero.get("stage")
        if isinstance(stage, bool) or not isinstance(stage, int) or stage < 2:
            return  # "auto" or stage 0/1: not decided by this file
        if zero.get("cpu_offload") is True:
            return  # legacy flag: offloads the optimizer state to pinned CPU memory
        off = zero.get("offload_optimizer")
        device = off.get("device") if isinstance(off, dict) else None
        if device not in ("cpu", "nvme"):
            yield self.finding(document, ("zero_optimization", "stage"),
                               f"ZeRO stage {stage} without optimizer offload (offload_optimizer.device is "
                               f"{device!r}): optimizer state stays in GPU memory")
        elif isinstance(off, dict) and off.get("pin_memory") is not True:
            yield self.finding(document, ("zero_optimization", "offload_optimizer"),
                               f"optimizer offloaded to {device} without pin_memory: true "
                               "(pageable copies are slower)")


class Fp16StaticLossScale(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        fp16 = document.get("fp16")
        if not isinstance(fp16, dict) or fp16.get("enabled") is not True:
            return
        scale = fp16.get("loss_scale", 0)
        if isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale != 0:
            yield self.finding(document, ("fp16", "loss_scale"),
                               f"fp16 with a static loss_scale of {scale:g}: overflows skip steps or "
                               "gradients underflow; use dynamic scaling (loss_scale 0)")


# -------------------------------------------------------------------------------------- Python
def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


class DataLoaderSettings(_Base):
    _gpu = re.compile(r"\bcuda\b|\.to\(\s*device|device\s*=|accelerator")

    def check(self, document: Document) -> Iterator[Finding]:
        if document.tree is None or not self._gpu.search(document.source):
            return
        for node in ast.walk(document.tree):
            if not (isinstance(node, ast.Call) and _call_name(node) == "DataLoader"):
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg is not None}
            if any(k.arg is None for k in node.keywords):
                continue  # **kwargs: the values are not visible here
            problems = []
            nw = kw.get("num_workers")
            if nw is None:
                problems.append("num_workers missing (defaults to 0: loading runs in the training process)")
            elif isinstance(nw, ast.Constant) and nw.value == 0:
                problems.append("num_workers=0 (loading runs in the training process)")
            pm = kw.get("pin_memory")
            if pm is None or (isinstance(pm, ast.Constant) and pm.value is False):
                problems.append("no pin_memory=True (host-to-GPU copies are not asynchronous)")
            if "prefetch_factor" not in kw:
                problems.append("no prefetch_factor")
            if problems:
                yield Finding(self.id, self.severity, "DataLoader: " + "; ".join(problems), self.fix,
                              document.path, node.lineno, node.col_offset + 1)


def _dotted(node: ast.AST) -> str:
    """``torch.cuda.CUDAGraph`` for the attribute chain, ``""`` when the chain does not end in a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


class EagerInferenceLoop(_Base):
    """A decode/inference loop in a file that never compiles the model nor captures CUDA graphs."""

    _graphs = {"torch.compile", "torch.cuda.graph", "torch.cuda.graphs", "torch.cuda.CUDAGraph",
               "torch.cuda.make_graphed_callables"}
    _graph_imports = {("torch", "compile"), ("torch.cuda", "graph"), ("torch.cuda", "graphs"),
                      ("torch.cuda", "CUDAGraph"), ("torch.cuda", "make_graphed_callables"),
                      ("torch.cuda.graphs", "CUDAGraph"), ("torch.cuda.graphs", "graph"),
                      ("torch.cuda.graphs", "make_graphed_callables")}
    _no_grad = {"torch.no_grad", "torch.inference_mode", "no_grad", "inference_mode"}
    _model_name = re.compile(r"^(model|.*_model|llm|net)$", re.IGNORECASE)
    _loaders = {"from_pretrained", "eval", "load"}
    _training = {"backward", "zero_grad"}

    def _uses_graphs_or_compile(self, tree: ast.Module) -> bool:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _dotted(node) in self._graphs:
                return True
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                if any((node.module, a.name) in self._graph_imports for a in node.names):
                    return True
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
                    and _dotted(node.func.value) not in ("re", "regex", "")):
                return True  # nn.Module.compile() (torch >= 2.2) on a model object
        return False

    def _model_names(self, tree: ast.Module) -> set[str]:
        """Names bound from an expression that calls ``from_pretrained``, ``eval`` or ``load`` (``.to(...)`` may follow)."""
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if any(isinstance(c, ast.Call) and _call_name(c) in self._loaders for c in ast.walk(node.value)):
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return names

    def _is_no_grad(self, expr: ast.AST) -> bool:
        target = expr.func if isinstance(expr, ast.Call) else expr
        return _dotted(target) in self._no_grad

    @staticmethod
    def _body_nodes(loop: ast.AST) -> Iterator[ast.AST]:
        """Every node inside the loop, not descending into nested function or class bodies."""
        stack = list(ast.iter_child_nodes(loop))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            yield node
            stack.extend(ast.iter_child_nodes(node))

    def _model_call(self, node: ast.AST, models: set[str], no_grad: bool) -> str | None:
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "generate":
            return f"{_dotted(func) or '.generate'}(...)"
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name and (self._model_name.match(name) or (no_grad and name in models)):
            return f"{_dotted(func) or name}(...)"
        return None

    def check(self, document: Document) -> Iterator[Finding]:
        tree = document.tree
        if tree is None or not re.search(r"\b(torch|transformers)\b", document.source):
            return
        if self._uses_graphs_or_compile(tree):
            return
        models = self._model_names(tree)
        hits: list[tuple[ast.stmt, str, bool]] = []

        def visit(node: ast.AST, no_grad: bool) -> None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                no_grad = no_grad or any(self._is_no_grad(d) for d in node.decorator_list)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                no_grad = no_grad or any(self._is_no_grad(i.context_expr) for i in node.items)
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                call = self._loop_call(node, models, no_grad)
                if call is not None:
                    hits.append((node, call, no_grad))
            for child in ast.iter_child_nodes(node):
                visit(child, no_grad)

        visit(tree, False)
        # report the innermost qualifying loop only: the outer loop repeats the hot one
        hit_nodes = {id(n) for n, _, _ in hits}
        for loop, call, no_grad in hits:
            if any(id(inner) in hit_nodes for inner in self._body_nodes(loop)):
                continue
            where = " under torch.no_grad()/inference_mode()" if no_grad else ""
            yield Finding(self.id, self.severity,
                          f"inference loop calls {call}{where} in a file with no torch.compile or CUDA graphs: "
                          "every step pays eager kernel-launch overhead", self.fix,
                          document.path, loop.lineno, loop.col_offset + 1)

    def _loop_call(self, loop: ast.AST, models: set[str], no_grad: bool) -> str | None:
        found: str | None = None
        for node in self._body_nodes(loop):
            if isinstance(node, ast.Call) and _call_name(node) in self._training:
                return None  # a training loop: backward()/zero_grad() in the same loop
            if found is None:
                inner_no_grad = no_grad or (isinstance(node, (ast.With, ast.AsyncWith))
                                            and any(self._is_no_grad(i.context_expr) for i in node.items))
                if inner_no_grad and not no_grad:
                    for sub in ast.walk(node):
                        found = found or self._model_call(sub, models, True)
                found = found or self._model_call(node, models, no_grad)
        return found


# ---------------------------------------------------------------------------------- Kubernetes
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
            raw = [value.get("command"), value.get("args")]
            args: list[str] = []
            for r in raw:
                if isinstance(r, list):
                    args.extend(str(a) for a in r)
                elif isinstance(r, str):
                    args.extend(r.split())
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
        types = {m.get("type") for m in metrics if isinstance(m, dict)}
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
    yield path, data
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _walk(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _walk(v, path + (i,))


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
    if kind == "Pod":
        return doc.get("metadata", "labels") or {}, ("spec", "topologySpreadConstraints")
    if kind in _WORKLOADS:
        return doc.get("spec", "template", "metadata", "labels") or {}, ("spec", "template", "spec",
                                                                          "topologySpreadConstraints")
    return None


def selector_matches(selector: Any, labels: dict[str, Any]) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions); empty matches all."""
    if not isinstance(selector, dict):
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if str(labels.get(k)) != str(v) or k not in labels:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in expr.get("values") or []]
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
            flags = [str(a) for a in (value.get("args") or []) + (value.get("command") or [])]
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
        for i, trig in enumerate(document.get("spec", "triggers") or []):
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
                                             for m in (d.get("spec", "metrics") or []))
                          for d in self._same_folder(document))
        if not uses_custom:
            return
        cs = controller_settings(document.workspace.documents)
        candidates: list[tuple[Path_, Any]] = [(("global", "scrape_interval"), document.get("global", "scrape_interval"))]
        for i, job in enumerate(document.get("scrape_configs") or []):
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


ALL_RULES: tuple[Rule, ...] = (
    ZeroOffload(
        "EBB101", "warning", "DeepSpeed ZeRO stage 2/3 without optimizer CPU offload, or offload without pin_memory",
        "ZeRO 2/3 partitions optimizer state but keeps it on the GPU. When a job is memory-bound, offloading the "
        "optimizer to CPU frees GPU memory (the design note measured -42 % GPU memory for -8 % speed on A100), "
        "which lets a job fit fewer or smaller GPUs. Offload without `pin_memory: true` copies through pageable "
        "memory and loses much of the speed. Stage \"auto\" and stage 0/1 are not checked; the legacy "
        "`cpu_offload: true` counts as offloaded.",
        "Set `zero_optimization.offload_optimizer = {\"device\": \"cpu\", \"pin_memory\": true}` when the job is "
        "memory-bound; suppress with `# ebb: ignore[EBB101]` (YAML) or `.ebb-lint.yaml` when it is not.",
        ("deepspeed",)),
    Fp16StaticLossScale(
        "EBB102", "warning", "fp16 enabled without dynamic loss scaling",
        "With `fp16.enabled: true` a non-zero `loss_scale` fixes the scale: too high overflows and skips steps, "
        "too low underflows gradients. `loss_scale: 0` (the default) enables dynamic scaling.",
        "Set `fp16.loss_scale: 0` (dynamic) with `loss_scale_window: 1000`, or use bf16 where supported.",
        ("deepspeed",)),
    DataLoaderSettings(
        "EBB103", "warning", "PyTorch DataLoader without workers, pinned memory or prefetching in a GPU script",
        "In a script that trains on a GPU, `num_workers=0` (the default) loads batches in the training process and "
        "starves the GPU; without `pin_memory=True` host-to-device copies cannot overlap compute; "
        "`prefetch_factor` keeps batches ready. Calls that pass `**kwargs` are skipped. A script counts as GPU "
        "training when it mentions `cuda`, `.to(device`, `device=` or `accelerator`.",
        "Use `DataLoader(..., num_workers=4, pin_memory=True, prefetch_factor=2)` as a starting point.",
        ("python",)),
    EagerInferenceLoop(
        "EBB104", "info", "Hot inference loop with no torch.compile or CUDA graphs",
        "A loop that calls a model step after step (a `for`/`while` loop calling `.generate(...)`, or a model "
        "under `torch.no_grad()`/`torch.inference_mode()`) runs eagerly when the file never uses "
        "`torch.compile(...)` nor CUDA graphs (`torch.cuda.graph`/`graphs`, `torch.cuda.CUDAGraph`, "
        "`torch.cuda.make_graphed_callables`): every step launches each kernel from Python, and at small "
        "batch that launch overhead, not the GPU math, sets the step time. Our H200 measurement "
        "(`shared/data/gpu/h200-serving`, eager bf16 3.2 B-parameter decoder, no CUDA graphs) shows a decode step "
        "at a median of 3.6-7.4 ms for every batch from 1 to 64, with no upward trend. A call counts as a model "
        "call when it is `.generate(...)`, or calls a name `model`, `*_model`, `llm` or `net`, or (under no_grad/"
        "inference_mode) a name assigned from an expression calling `from_pretrained(...)`, `.eval()` or `load(...)`. Loops that also call "
        "`.backward()` or `.zero_grad()` are training loops and are skipped. Only the innermost qualifying loop is "
        "reported. Severity is info: the file is read with `ast` only, so compilation done in another module "
        "(or a serving engine that captures graphs itself) cannot be seen, and large-batch offline jobs are "
        "compute-bound and gain little.",
        "Compile the step (`model = torch.compile(model, mode=\"reduce-overhead\")`, which uses CUDA graphs), or "
        "capture a fixed-shape decode step with `torch.cuda.graph`/`torch.cuda.make_graphed_callables`; if the "
        "model is compiled elsewhere, suppress with `# ebb: ignore[EBB104]` on the loop line.",
        ("python",)),
    HpaResourceOnly(
        "EBB201", "warning", "HPA scales on CPU/memory averages only",
        "An HPA whose only metrics are `Resource` (CPU/memory utilisation averaged over pods) cannot see "
        "latency or queue depth; averages hide the peaks that break the SLO and make scale-down misjudge load. "
        "`autoscaling/v1` HPAs and v2 HPAs without metrics scale on CPU only.",
        "Add a latency or queue metric (`type: Pods`, `Object` or `External`, e.g. via prometheus-adapter) next "
        "to the resource metric.",
        ("k8s",)),
    HpaScaleDownStabilization(
        "EBB202", "warning", "HPA scale-down stabilization missing or shorter than the metric resolution",
        "The HPA re-evaluates every 15 s but metrics-server resolves usage every 60 s by default. A scale-down "
        "stabilization window shorter than that lets one low sample remove replicas. Without an explicit window "
        "the cluster flag `--horizontal-pod-autoscaler-downscale-stabilization` (300 s upstream) applies; that "
        "case is reported as info. When a linted file runs `kube-controller-manager` (a container whose command "
        "or args contain it, e.g. the static Pod manifest) and sets that flag, its value (Go duration, e.g. "
        "`5m0s`) is used instead: below 60 s the implicit case is a warning, otherwise it is not reported. The "
        "first such container in file order counts, for every file of the run. KEDA `ScaledObject`s "
        "(`keda.sh/v1alpha1`) are checked the same way at "
        "`spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds`, which KEDA "
        "copies into the HPA it creates.",
        "Set `spec.behavior.scaleDown.stabilizationWindowSeconds` (ScaledObject: "
        "`spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds`) to at least "
        "60 (the metric resolution), typically 300.",
        ("k8s",)),
    AffinityAllNamespaces(
        "EBB203", "warning", "Pod (anti-)affinity term with namespaceSelector: {}",
        "In a pod affinity or anti-affinity term an empty `namespaceSelector: {}` selects every namespace "
        "(upstream semantics; a null selector with no `namespaces` means the pod's own namespace). Unrelated "
        "workloads with the same labels then repel or attract the pods, wasting nodes.",
        "Remove `namespaceSelector: {}` or list the namespaces explicitly under `namespaces:`.",
        ("k8s",)),
    SpreadWithoutPdb(
        "EBB204", "warning", "topologySpreadConstraints with DoNotSchedule and no PodDisruptionBudget",
        "A hard spread constraint (`whenUnsatisfiable: DoNotSchedule`) can leave evicted pods Pending during a "
        "node drain or scale-down; without a PodDisruptionBudget selecting the workload's pods (same namespace, "
        "in the same set of linted files) nothing limits how many are evicted at once.",
        "Add a PodDisruptionBudget whose selector matches the pod template labels, or use "
        "`whenUnsatisfiable: ScheduleAnyway`.",
        ("k8s",)),
    MetricPipelineMismatch(
        "EBB205", "warning", "Metric pipeline resolution vs HPA sync period mismatch",
        "The HPA syncs every 15 s (`--horizontal-pod-autoscaler-sync-period`; when a linted file runs "
        "`kube-controller-manager` with that flag, its value is used instead — first such container in file "
        "order, for the whole run). If metrics-server's `--metric-resolution` (or the Prometheus `scrape_interval` "
        "feeding a custom-metric HPA) is longer, the HPA re-reads one stale value resolution/sync times "
        "(60 s / 15 s = 4) and reacts late. A metrics-server container without the flag uses the 60 s default. "
        "Prometheus files are checked only when the same folder holds an HPA with a Pods/Object/External metric. "
        "A KEDA `ScaledObject` (`keda.sh/v1alpha1`) with a `prometheus` trigger is checked when the same folder "
        "holds a Prometheus config: a `pollingInterval` (default 30 s) shorter than the global `scrape_interval` "
        "(default 1m) re-reads the same value scrape/polling times.\n\n"
        "Each message gives the chain's worst-case lag, the time from a load change to the scaler acting on it: "
        "lag = scrape interval (or metric resolution) + query range/resolution + polling interval (KEDA) or sync "
        "period (HPA). The query range is the longest PromQL range in the trigger's `query` (`[2m]` counts 120 s; "
        "a subquery `[10m:1m]` counts range plus step); for an HPA fed by metrics-server it is 0, and for an HPA "
        "fed by an adapter the query is not visible, so its lag is a lower bound (\"at least\").",
        "Align the pipeline: `--metric-resolution=15s`, `scrape_interval: 15s`, a KEDA `pollingInterval` no "
        "shorter than the scrape interval, or lengthen the HPA sync period.",
        ("k8s", "prometheus")),
)


def rule_by_id(rule_id: str) -> Rule | None:
    for r in ALL_RULES:
        if r.id == rule_id.upper():
            return r
    return None

