"""The tracing seam decision code may use without importing telemetry: :class:`Spans`.

A policy opens one span per layer around the layer's real work (``with spans.layer("ebb.l1"): ...``)
and sets the layer's result on it. The live controller passes its cycle span
(:class:`ebb.telemetry.tracing.CycleSpan` satisfies :class:`Spans`); the simulator passes
:data:`NO_SPANS`, whose methods do nothing and allocate nothing. Guarantees every implementation
gives: ``layer`` and ``set`` never raise and never change what the policy decides (telemetry never
changes behaviour).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType
from typing import Final, Protocol

__all__ = ["NO_SPANS", "NoSpans", "SpanNote", "Spans"]


class SpanNote(Protocol):
    """An open span: attributes can be set on it (keys verbatim, ``"ebb.l2.weight"``)."""

    def set(self, **attrs: object) -> None: ...


class Spans(Protocol):
    """Opens child spans of the current cycle."""

    def layer(self, name: str, **attrs: object) -> AbstractContextManager[SpanNote]: ...


class NoSpans:
    """A :class:`Spans` (and its :class:`SpanNote`) that records nothing: the simulator's, and a
    follower's read. One shared instance, :data:`NO_SPANS`."""

    __slots__ = ()

    def layer(self, name: str, **attrs: object) -> NoSpans:
        return self

    def set(self, **attrs: object) -> None:
        return None

    def __enter__(self) -> NoSpans:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


NO_SPANS: Final = NoSpans()
