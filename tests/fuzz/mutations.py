"""The mutation engine the fuzz targets share (imported as ``from mutations import ...``).

Two kinds of edits, each a plain function of Hypothesis' ``draw`` so a target's ``@st.composite``
strategy calls it with its own seeds, tokens and hostile values (those stay in the target's file):

* **Byte or text level** — :func:`mutate` applies 1 to ``most`` edits to a ``bytes`` or ``str`` seed;
  each edit draws an op (an index into the target's list), a place ``i`` in ``0..len(data)``, then
  whatever the op draws. The ops: :func:`overwrite` one unit, :func:`insert` a token,
  :func:`delete_run`, :func:`duplicate` a slice, :func:`truncate`, :func:`nest` (an opener by the
  thousand), :func:`replace` (e.g. LF to CRLF) and :func:`append` (a token repeated). An op with
  nothing to act on at ``i`` (overwriting past the end) returns None and the list's **last** op is
  applied instead, so that one must always apply (the targets end with :func:`append`).
* **Document level** — :func:`paths` lists the places in a parsed JSON/YAML document (iteratively:
  documents may nest 900 deep), :func:`at` walks to one, and :func:`mutate_tree` swaps values for
  hostile ones, drops keys and adds keys. :func:`nested` and :func:`laughs` build the deep and the
  exponential (billion laughs) documents the readers must refuse.

Draws happen in a fixed order, so with ``derandomize=True`` a target's inputs depend only on its own
seeds, tokens, ops and settings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hypothesis import strategies as st

T = TypeVar("T", bytes, str)
Op = Callable[[st.DrawFn, T, int], T | None]
"""``op(draw, data, i)``: ``data`` edited at place ``i``, or None when the op cannot act there."""


def mutate(draw: st.DrawFn, data: T, ops: Sequence[Op[T]], *, most: int = 6) -> T:
    """``data`` after 1 to ``most`` edits, each by an op of ``ops`` at a drawn place (see the module)."""
    for _ in range(draw(st.integers(1, most))):
        op = draw(st.integers(0, len(ops) - 1))
        i = draw(st.integers(0, len(data)))
        edited = ops[op](draw, data, i)
        if edited is None:
            edited = ops[-1](draw, data, i)
            assert edited is not None, "the last op must always apply"
        data = edited
    return data


def overwrite(unit: Callable[[int], T], top: int) -> Op[T]:
    """Replace the unit at ``i`` by ``unit(n)``, ``n`` drawn in ``0..top``; None past the end."""
    def op(draw: st.DrawFn, data: T, i: int) -> T | None:
        return data[:i] + unit(draw(st.integers(0, top))) + data[i + 1:] if i < len(data) else None
    return op


def byte(n: int) -> bytes:
    """The byte ``n``: the ``unit`` of :func:`overwrite` for bytes (``chr`` is the one for text)."""
    return bytes((n,))


def insert(tokens: Sequence[T]) -> Op[T]:
    """Insert one of ``tokens`` at ``i``."""
    def op(draw: st.DrawFn, data: T, i: int) -> T:
        return data[:i] + draw(st.sampled_from(tokens)) + data[i:]
    return op


def delete_run(longest: int = 64) -> Op[T]:
    """Delete 1 to ``longest`` units from ``i``."""
    def op(draw: st.DrawFn, data: T, i: int) -> T:
        return data[:i] + data[i + draw(st.integers(1, longest)):]
    return op


def duplicate(longest: int = 200) -> Op[T]:
    """Insert at ``i`` a copy of 1 to ``longest`` units from a drawn place."""
    def op(draw: st.DrawFn, data: T, i: int) -> T:
        j = draw(st.integers(0, len(data)))
        return data[:i] + data[j:j + draw(st.integers(1, longest))] + data[i:]
    return op


def truncate() -> Op[T]:
    """Cut the data at ``i``."""
    def op(draw: st.DrawFn, data: T, i: int) -> T:
        return data[:i]
    return op


def nest(sizes: Sequence[int], openers: Sequence[T]) -> Op[T]:
    """Insert at ``i`` one of ``openers`` repeated one of ``sizes`` times (never closed)."""
    def op(draw: st.DrawFn, data: T, i: int) -> T:
        n = draw(st.sampled_from(sizes))
        return data[:i] + draw(st.sampled_from(openers)) * n + data[i:]
    return op


def replace(old: T, new: T, count: int) -> Op[T]:
    """Replace the first ``count`` ``old`` by ``new`` (e.g. LF line ends by CRLF); draws nothing."""
    def op(draw: st.DrawFn, data: T, i: int) -> T:
        return data.replace(old, new, count)
    return op


def append(tokens: Sequence[T], most: int = 5) -> Op[T]:
    """Append one of ``tokens`` repeated 1 to ``most`` times; always applies (a last op)."""
    def op(draw: st.DrawFn, data: T, i: int) -> T:
        return data + draw(st.sampled_from(tokens)) * draw(st.integers(1, most))
    return op


# -- documents ------------------------------------------------------------------------------------
def paths(doc: Any, *, depth: int | None = None, items: int | None = None, sort: bool = True) -> list[tuple[Any, ...]]:
    """Every place in ``doc`` as a key/index path (``()`` is the document itself), walked without
    recursion; not below ``depth`` levels, only the first ``items`` of each list; sorted by ``repr``
    unless ``sort=False`` (then in walk order)."""
    out: list[tuple[Any, ...]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(doc, ())]
    while stack:
        node, prefix = stack.pop()
        out.append(prefix)
        if depth is not None and len(prefix) >= depth:
            continue
        if isinstance(node, dict):
            stack += [(v, (*prefix, k)) for k, v in node.items()]
        elif isinstance(node, list):
            stack += [(v, (*prefix, i)) for i, v in enumerate(node[:items])]
    return sorted(out, key=repr) if sort else out


def at(doc: Any, path: tuple[Any, ...]) -> Any:
    """The value at ``path`` in ``doc``."""
    for step in path:
        doc = doc[step]
    return doc


def mutate_tree(draw: st.DrawFn, doc: Any, values: st.SearchStrategy[Any], keys: st.SearchStrategy[Any], *,
                most: int = 3, depth: int | None = None, items: int | None = None, sort: bool = True) -> Any:
    """``doc`` (changed in place) after 1 to ``most`` edits at places drawn from :func:`paths` (``depth``,
    ``items``, ``sort`` as there): the document itself replaced by a drawn value, or, at a key or index,
    the value replaced (twice as likely), the key dropped, or a key drawn from ``keys`` added (the
    last two in mappings only; in a list they replace too)."""
    for _ in range(draw(st.integers(1, most))):
        path = draw(st.sampled_from(paths(doc, depth=depth, items=items, sort=sort)))
        if not path:
            doc = draw(values)
            continue
        parent = at(doc, path[:-1])
        action = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if action == "drop" and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif action == "add" and isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
        else:
            parent[path[-1]] = draw(values)
    return doc


def nested(depth: int, leaf: Any = 0) -> Any:
    """``leaf`` inside ``depth`` levels of alternating ``{"k": ...}`` and ``[...]``."""
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def laughs(levels: int, fan_out: int, prefix: str = "", sep: str = ", ") -> str:
    """A billion-laughs YAML document after ``prefix``: ``levels`` anchored lists of ``fan_out``
    aliases of the previous one (``fan_out ** levels`` nodes once expanded), items joined by ``sep``."""
    lines = ["a0: &a0 [" + sep.join(['"lol"'] * fan_out) + "]"]
    lines += [f"a{i}: &a{i} [" + sep.join([f"*a{i - 1}"] * fan_out) + "]" for i in range(1, levels)]
    return prefix + "\n".join(lines) + "\n"
