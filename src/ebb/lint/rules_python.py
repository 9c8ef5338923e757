"""``ebb lint`` rules EBB101–EBB104: DeepSpeed configs and PyTorch scripts, and the rule base class.

* EBB101 ZeRO stage 2/3 without optimizer offload (or offload without pinned memory) and EBB102
  static fp16 loss scale read the parsed DeepSpeed JSON; EBB103 DataLoader settings and EBB104
  eager inference loops read Python source with :mod:`ast` only — nothing is imported or run.
* Every check is a generator of :class:`~ebb.lint.core.Finding` and stays silent where the file
  does not decide the question (ZeRO stage ``"auto"`` or 0/1, ``**kwargs`` calls, scripts with no
  CUDA use, files that compile or capture CUDA graphs) rather than guess.
* :class:`_Base` is the frozen rule record (id, severity, title, why, fix, document kinds) both
  rule families extend; its ``doc`` is the text of ``docs/lint/<ID>.md``.

The rule instances, with their texts, are registered in :mod:`ebb.lint.rules`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ebb.lint.core import Document, Finding, RuleBase as _Base

__all__ = ["DataLoaderSettings", "EagerInferenceLoop", "Fp16StaticLossScale", "ZeroOffload"]


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
    _graph_attrs = {name.rsplit(".", 1)[-1] for name in _graphs}
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
            # Only chains that end in a graph/compile name are spelled out: _dotted walks the whole
            # chain, so calling it on every link of a long a.b.c... would be quadratic.
            if isinstance(node, ast.Attribute) and node.attr in self._graph_attrs and _dotted(node) in self._graphs:
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

        # Pre-order walk with an explicit stack (no recursion: the tree is as deep as the parser
        # allows, about 1,000 levels), carrying whether a no_grad/inference_mode scope encloses it.
        stack: list[tuple[ast.AST, bool]] = [(tree, False)]
        while stack:
            node, no_grad = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                no_grad = no_grad or any(self._is_no_grad(d) for d in node.decorator_list)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                no_grad = no_grad or any(self._is_no_grad(i.context_expr) for i in node.items)
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                call = self._loop_call(node, models, no_grad)
                if call is not None:
                    hits.append((node, call, no_grad))
            stack.extend((child, no_grad) for child in reversed(list(ast.iter_child_nodes(node))))
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
