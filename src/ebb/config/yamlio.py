"""Bounded YAML reading for every YAML file Ebb reads: configs (workloads, gates, triggers) and lint.

YAML from outside is hostile until proven otherwise: ``&a [*a0, *a0, ...]`` nested nine deep (the
"billion laughs") is 500 bytes of text that expands to 10**9 nodes, and ``[[[[...`` a few thousand
deep overflows Python's stack in the composer. :class:`BoundedSafeLoader` is PyYAML's
``SafeLoader`` (nothing is ever executed) with these guarantees, checked while the document is
composed, before any Python value is built:

* **Depth**: at most :data:`MAX_YAML_DEPTH` (64) levels of nesting, counted *through* aliases (an
  alias to a 40-deep node placed 30 deep is 70 deep). The deepest document in the lint corpus
  (217 real Kubernetes, Prometheus and DeepSpeed files) and in ``deploy/`` nests 13. Flow
  collections (``[[[[...``) are refused by the scanner at the 65th ``[``, in about 2 ms.
* **Expanded size**: at most :data:`MAX_YAML_NODES` (1,000,000) nodes per document *after* alias
  expansion. A node's weight is 1 + its children's weights, and an alias weighs what its anchored
  node weighs, so a consumer that walks the value as a tree (lint, ``repr``, a JSON dump) visits at
  most that many nodes; ``ebb lint`` takes about 3 s on one core for a document at the cap. The
  check costs one addition per composed node; a billion-laughs file is refused after composing
  fewer than 100 nodes (about 3 ms; before, ``ebb lint`` ran > 60 s and > 1.3 GB on it).
* **No recursive aliases** (``&a [*a]``): they have no finite expansion.
* **Integers** (``!!int``, implicit or explicit) must fit in int64, [-2**63, 2**63 - 1]: no
  honest config value is larger, and numpy, ``float()`` and ``math`` raise on bigger ones.
* **Malformed tagged scalars** (``!!timestamp 2023-13-45``, ``!!bool maybe``, ``!!int 0x``) are
  a :class:`yaml.constructor.ConstructorError` with the node's line, never the ``ValueError`` /
  ``KeyError`` PyYAML's constructors raise on their own.

Every refusal is a :class:`yaml.MarkedYAMLError` (so it carries the line), and :func:`load_yaml` /
:func:`load_mapping` turn any YAML failure into one single-line :class:`~ebb.errors.ConfigError`
``SOURCE: line N: what (fix: ...)``. :func:`describe` renders a value for an error message in at
most about 80 characters, whatever its size.

The readers of the loaded documents (fleet files, cluster scenarios, ``ebb plan``'s snapshots)
share the key-path checks :func:`known_keys` (a mapping of known keys), :func:`whole_number` and
:func:`finite_value`: each error is one line, ``SOURCE: a.b[2].c: what (fix: ...)``.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ebb.errors import ConfigError

__all__ = [
    "MAX_YAML_DEPTH", "MAX_YAML_NODES", "BoundedSafeLoader", "YamlLimitError", "compose_all",
    "config_error", "describe", "finite_number", "finite_value", "known_keys", "load_mapping", "load_yaml",
    "read_config_text", "whole_number", "yaml_problem",
]

MAX_YAML_DEPTH: Final = 64
"""Nesting levels allowed in one YAML document, counted through aliases."""
MAX_YAML_NODES: Final = 1_000_000
"""Nodes allowed in one YAML document after alias expansion (1 + children, recursively)."""
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_LIMIT_FIX: Final = (f"Ebb reads YAML at most {MAX_YAML_DEPTH} levels deep and {MAX_YAML_NODES:,} nodes "
                     "after alias expansion: flatten the nesting or drop the repeated aliases")


class YamlLimitError(ComposerError):
    """A document past :data:`MAX_YAML_DEPTH`, :data:`MAX_YAML_NODES` or with a recursive alias."""


class BoundedSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the depth, expansion, alias and integer bounds of the module docstring.

    Use it wherever ``Loader=yaml.SafeLoader`` would go (``yaml.load``, ``yaml.compose_all``).
    """

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._depth = 0
        # id(node) -> (expanded weight, height) of every node composed so far in this document;
        # the nodes stay alive (referenced by their parents) until the document is done.
        self._size: dict[int, tuple[int, int]] = {}

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 - PyYAML's name
        # Refuse ``[[[[...`` in the scanner: it looks up to 1,024 characters ahead for a simple key,
        # checking every open flow level at each one, so waiting for the composer's depth check
        # would cost about 0.3 s of scanning per hostile line.
        if self.flow_level >= MAX_YAML_DEPTH:
            raise YamlLimitError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def compose_document(self) -> Node | None:
        self._size = {}
        self._depth = 0
        try:
            return super().compose_document()
        finally:
            self._size = {}

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
            node = super().compose_node(parent, index)  # the anchored node (or an undefined-alias error)
            if node is not None and id(node) not in self._size:
                raise YamlLimitError(None, None, f"alias *{event.anchor} is used inside the node it names "
                                     "(a recursive alias has no finite expansion)", event.start_mark)
            return node
        if self._depth >= MAX_YAML_DEPTH:
            raise YamlLimitError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels",
                                 self.peek_event().start_mark)  # type: ignore[no-untyped-call]
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is None:
            return None
        weight, height = 1, 1
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        for child in children:
            w, h = self._size[id(child)]
            weight += w
            height = max(height, h + 1)
        if weight > MAX_YAML_NODES:
            raise YamlLimitError(None, None, f"expands to more than {MAX_YAML_NODES:,} nodes through aliases "
                                 f"({weight:,} here)", node.start_mark)
        if height > MAX_YAML_DEPTH:
            raise YamlLimitError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels through aliases",
                                 node.start_mark)
        self._size[id(node)] = (weight, height)
        return node

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, KeyError, IndexError, AttributeError, TypeError) as exc:
            # PyYAML's scalar constructors assume an explicit tag's text matches it and raise these
            # on one that does not: int('', 16), datetime(2023, 13, 45), bool_values['maybe'],
            # ''[0] for `!!int ''`, a failed regex match's .groupdict() for `!!timestamp x`.
            what = describe(node.value) if isinstance(node, ScalarNode) else f"a {'mapping' if isinstance(node, MappingNode) else 'sequence'}"
            raise ConstructorError(None, None, f"cannot read {what} as {node.tag}", node.start_mark) from exc

    def construct_yaml_int(self, node: ScalarNode) -> int:
        value = super().construct_yaml_int(node)
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ConstructorError(None, None, f"integer {describe(node.value)} is outside the int64 range "
                                   f"[{_INT64_MIN}, {_INT64_MAX}]", node.start_mark)
        return value


BoundedSafeLoader.add_constructor("tag:yaml.org,2002:int", BoundedSafeLoader.construct_yaml_int)


class _Short(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int over 4,300 digits raises ValueError (Python >= 3.11); never build one.
        return repr(x) if x.bit_length() <= 64 else f"<a {x.bit_length()}-bit integer>"


_SHORT = _Short()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = _SHORT.maxset = 6


def describe(value: Any) -> str:
    """``repr(value)`` in at most 80 characters (3 levels, 6 items, 60-character strings, then cut);
    never raises, even for an int of 5,000 digits (whose ``repr`` Python refuses)."""
    text = _SHORT.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float; None for bools, non-numbers, NaN, ±inf and ints past float range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:  # an int above ~1.8e308 (only when the caller did not use the loader)
        return None
    return x if math.isfinite(x) else None


def yaml_problem(exc: yaml.YAMLError) -> tuple[int | None, str]:
    """The 1-based line (when PyYAML knows it) and a one-line description of a YAML error."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        parts = [str(p) for p in (exc.context, exc.problem) if p]
        text = "; ".join(parts) or type(exc).__name__
        line = mark.line + 1 if mark is not None else None
    else:
        text, line = str(exc), None
    return line, " ".join(text.split())


def compose_all(text: str) -> Iterator[Node]:
    """The documents of ``text`` as node trees, each bounded as the module docstring says.

    Raises :class:`yaml.YAMLError` (with a line) for broken or over-limit YAML.
    """
    for node in yaml.compose_all(text, Loader=BoundedSafeLoader):
        if node is not None:
            yield node


def config_error(source: str, key: str, msg: str, fix: str) -> ConfigError:
    """``source: key: msg (fix: fix)`` — every config error reads the same way."""
    return ConfigError(f"{source}: {key}: {msg} (fix: {fix})")


def known_keys(source: str, where: str, raw: Any, allowed: Collection[str], hint: str) -> dict[Any, Any]:
    """``raw`` when it is a mapping whose keys are all in ``allowed``; else the ConfigError
    ``where: expected a mapping`` (fix: ``hint``) or ``where.KEY: unknown key`` (fix: the allowed keys).
    ``where`` ``<top>`` names an unknown key alone (a top-level key)."""
    if not isinstance(raw, dict):
        raise config_error(source, where, f"expected a mapping, got {describe(raw)}", hint)
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        key = unknown[0][:60] if where == "<top>" else f"{where}.{unknown[0][:60]}"
        names = allowed if isinstance(allowed, (list, tuple)) else sorted(allowed)
        raise config_error(source, key, "unknown key", f"use only {', '.join(names)}")
    return raw


def whole_number(source: str, key: str, raw: Any, lo: int, hi: int | None = None, *, fix: str | None = None) -> int:
    """``raw`` when it is an integer (not a boolean) in ``[lo, hi]`` (no upper bound when ``hi`` is None);
    else the ConfigError ``key: expected an integer >= lo and <= hi, got ...`` (fix: ``fix``, or the range)."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < lo or (hi is not None and raw > hi):
        bound = f">= {lo:,}" + ("" if hi is None else f" and <= {hi:,}")
        raise config_error(source, key, f"expected an integer {bound}, got {describe(raw)}",
                           fix or f"write a whole number {bound}")
    return raw


def finite_value(source: str, key: str, raw: Any, lo: float = -math.inf, hi: float = math.inf, *,
                 fix: str = "write a plain number") -> float:
    """``raw`` as a finite float in ``[lo, hi]``; else the ConfigError ``key: expected a finite number``
    (NaN, infinities, booleans and text included) or ``key: expected a number >= lo ...`` (fix: ``fix``)."""
    x = finite_number(raw)
    if x is None:
        raise config_error(source, key, f"expected a finite number, got {describe(raw)}", fix)
    if not lo <= x <= hi:
        bound = " and ".join(b for b in (f">= {lo:g}" if lo > -math.inf else "",
                                         f"<= {hi:g}" if hi < math.inf else "") if b)
        raise config_error(source, key, f"expected a number {bound}, got {x:g}", fix)
    return x


def read_config_text(path: Path, what: str) -> str:
    """The UTF-8 text of config file ``path``; one-line :class:`ConfigError` naming it when it cannot be
    read or is not UTF-8 (``what`` says which file, e.g. ``"workload class file"``)."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc} (fix: check the path)") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: {what} is not UTF-8 text (byte {exc.start}: {exc.reason}) "
                          "(fix: save the file as UTF-8)") from exc


def load_yaml(text: str, source: str) -> Any:
    """One YAML document as Python values, bounded as the module docstring says.

    Broken or over-limit YAML raises one single-line :class:`ConfigError` naming ``source``, the
    line and the fix.
    """
    try:
        return yaml.load(text, Loader=BoundedSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except YamlLimitError as exc:
        line, what = yaml_problem(exc)
        raise config_error(source, f"line {line}" if line else "document", what, _LIMIT_FIX) from exc
    except ConstructorError as exc:
        line, what = yaml_problem(exc)
        raise config_error(source, f"line {line}" if line else "document", f"bad YAML value: {what}",
                           "write plain values: integers within int64, valid dates, no custom tags") from exc
    except yaml.YAMLError as exc:
        line, what = yaml_problem(exc)
        raise config_error(source, f"line {line}" if line else "document", f"broken YAML: {what}",
                           "fix the YAML syntax") from exc


def load_mapping(text: str, source: str, shape_hint: str) -> dict[Any, Any]:
    """Parse YAML ``text`` that must be a mapping (see :func:`load_yaml`); errors name the line."""
    doc = load_yaml(text, source)
    if not isinstance(doc, dict):
        raise config_error(source, "<top>", f"expected a mapping, got {type(doc).__name__}", shape_hint)
    return doc
