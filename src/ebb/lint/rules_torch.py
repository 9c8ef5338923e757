"""``ebb lint`` rules EBB103 (DataLoader settings) and EBB104 (eager inference loops) on PyTorch scripts.

Python source is read with :mod:`ast` only: nothing is imported or run. A setting a call leaves out
takes PyTorch's default from :data:`ebb.lint.defaults.TORCH_DATALOADER_DEFAULTS` (file and commit
recorded there). Every check stays silent where the file does not decide the question (``**kwargs``
calls, values that are expressions, scripts with no CUDA use, files that train, compile or capture
CUDA graphs) rather than guess. Both walks use explicit stacks (``ast.walk`` or a list), never
recursion, so a file nested as deep as the parser allows costs no Python stack.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ebb.lint.core import Document, Finding
from ebb.lint.core import RuleBase as _Base

__all__ = ["DataLoaderSettings", "EagerInferenceLoop"]


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _literal(node: ast.expr | None) -> object:
    """The value of a literal keyword argument; ``_UNKNOWN`` for an expression (``args.workers``)."""
    if node is None:
        return _ABSENT
    return node.value if isinstance(node, ast.Constant) else _UNKNOWN


_ABSENT = object()
_UNKNOWN = object()


class DataLoaderSettings(_Base):
    """``DataLoader(...)`` calls in a GPU script whose literal arguments (or PyTorch's defaults for
    absent ones) load in the training process or copy from pageable memory.

    Reported: ``num_workers`` absent or a literal 0; ``pin_memory`` absent or literal ``False``;
    ``prefetch_factor`` given with a literal ``num_workers=0`` (a ``ValueError`` since PyTorch 2.0).
    Never reported: a missing ``prefetch_factor`` (PyTorch prefetches 2 batches per worker by default),
    values that are expressions (``num_workers=args.workers``) and calls with ``**kwargs``.
    """

    _gpu = re.compile(r"\bcuda\b|\.to\(\s*device|device\s*=|accelerator")

    def check(self, document: Document) -> Iterator[Finding]:
        if document.tree is None or not self._gpu.search(document.source):
            return
        for node in ast.walk(document.tree):
            if not (isinstance(node, ast.Call) and _call_name(node) == "DataLoader"):
                continue
            if any(k.arg is None for k in node.keywords):
                continue  # **kwargs: the values are not visible here
            kw = {k.arg: k.value for k in node.keywords if k.arg is not None}
            problems = self._problems(_literal(kw.get("num_workers")), _literal(kw.get("pin_memory")),
                                      _literal(kw.get("prefetch_factor")), len(node.args))
            if problems:
                yield Finding(self.id, self.severity, "DataLoader: " + "; ".join(problems), self.fix,
                              document.path, node.lineno, node.col_offset + 1)

    @staticmethod
    def _problems(workers: object, pin: object, prefetch: object, positional: int) -> list[str]:
        # DataLoader's positional order: dataset, batch_size, shuffle, sampler, batch_sampler,
        # num_workers (6th), collate_fn, pin_memory (8th); a value given by position is not read here.
        workers = _UNKNOWN if positional > 5 else workers
        pin = _UNKNOWN if positional > 7 else pin
        problems = []
        if workers is _ABSENT:
            problems.append("num_workers missing (PyTorch default 0: loading runs in the training process)")
        elif workers == 0 and not isinstance(workers, bool):
            problems.append("num_workers=0 (loading runs in the training process)")
        if pin is _ABSENT or pin is False:
            problems.append("no pin_memory=True (PyTorch default False: host-to-GPU copies are not asynchronous)")
        if workers == 0 and prefetch is not _ABSENT and prefetch is not None:
            problems.append("prefetch_factor with num_workers=0 (PyTorch >= 2.0 raises ValueError)")
        return problems


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
    """A decode/inference loop in an inference entry script that never compiles the model nor
    captures CUDA graphs.

    A file is an inference entry script when it never trains: no ``.backward(...)``, ``.zero_grad(...)``,
    ``<optimizer>.step()`` nor ``.train()`` call anywhere in it (a validation loop inside a training
    script runs once per epoch and is not the hot path). In such a file a ``for``/``while`` loop is
    reported when it calls ``.generate(...)``, or, under ``torch.no_grad()``/``inference_mode()``,
    calls a model: a name or attribute that names a model (``model``, ``llm``, ``net``, ``lm``,
    ``<noun>_model``, ``<noun>_net``, never a helper such as ``save_model``/``build_model``), its
    ``.forward(...)``, or a name bound from ``from_pretrained(...)``/``.eval()``/``load(...)``/
    ``pipeline(...)`` (tokenizers and processors excluded).
    """

    _graphs = {"torch.compile", "torch.cuda.graph", "torch.cuda.graphs", "torch.cuda.CUDAGraph",
               "torch.cuda.make_graphed_callables"}
    _graph_attrs = {name.rsplit(".", 1)[-1] for name in _graphs}
    _graph_imports = {("torch", "compile"), ("torch.cuda", "graph"), ("torch.cuda", "graphs"),
                      ("torch.cuda", "CUDAGraph"), ("torch.cuda", "make_graphed_callables"),
                      ("torch.cuda.graphs", "CUDAGraph"), ("torch.cuda.graphs", "graph"),
                      ("torch.cuda.graphs", "make_graphed_callables")}
    _no_grad = {"torch.no_grad", "torch.inference_mode", "no_grad", "inference_mode"}
    _model_name = re.compile(r"^(model|llm|lm|net|(?P<head>[a-z0-9]+)(_[a-z0-9]+)*_(model|net|lm))$", re.IGNORECASE)
    # The first word of a helper's name is a verb: `save_model(...)` stores a model, it is not one.
    _verbs = frozenset((
        "add apply build calc check clone compile compute configure convert copy count create delete download "
        "dump eval evaluate export fetch freeze from get has init is load log make merge parse patch prepare "
        "print push quantize read register remove replace reset restore resume run save select set setup show "
        "sync test to train unwrap update upload validate wrap write").split())
    _loaders = {"from_pretrained", "eval", "load", "pipeline"}
    _not_models = re.compile(r"token|processor|extractor|config", re.IGNORECASE)
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
                calls = [c for c in ast.walk(node.value) if isinstance(c, ast.Call)]
                if any(_call_name(c) in self._loaders for c in calls) and not any(
                        self._not_models.search(_dotted(c.func)) for c in calls):
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

    def _is_model_name(self, name: str) -> bool:
        m = self._model_name.match(name)
        return m is not None and (m.group("head") or "").lower() not in self._verbs

    def _model_call(self, node: ast.AST, models: set[str], no_grad: bool) -> str | None:
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "generate":
            return f"{_dotted(func) or '.generate'}(...)"
        if not no_grad:
            return None  # outside no_grad/inference_mode only .generate(...) is surely inference
        if isinstance(func, ast.Name) and (self._is_model_name(func.id) or func.id in models):
            return f"{func.id}(...)"
        if isinstance(func, ast.Attribute):
            receiver = func.value
            owner = receiver.attr if isinstance(receiver, ast.Attribute) else \
                receiver.id if isinstance(receiver, ast.Name) else ""
            if self._is_model_name(func.attr) or (
                    func.attr == "forward" and (self._is_model_name(owner) or owner in models)):
                return f"{_dotted(func) or func.attr}(...)"
        return None

    def _trains(self, tree: ast.Module) -> bool:
        """True when the file calls backward/zero_grad, an optimizer's step() or ``.train()``."""
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node)
            if name in self._training:
                return True
            if isinstance(node.func, ast.Attribute) and name in ("step", "train") and not node.args:
                owner = node.func.value
                owner_name = owner.attr if isinstance(owner, ast.Attribute) else \
                    owner.id if isinstance(owner, ast.Name) else ""
                if name == "train" or "optim" in owner_name.lower():
                    return True
        return False

    def check(self, document: Document) -> Iterator[Finding]:
        tree = document.tree
        if tree is None or not re.search(r"\b(torch|transformers)\b", document.source):
            return
        if self._uses_graphs_or_compile(tree) or self._trains(tree):
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
