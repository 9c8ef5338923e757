"""What a compensation log stores and promises: :class:`ReviewItem` and :class:`CompensationLog`.

A :class:`ReviewItem` is one root event waiting for (or done with) manual review; its id is the
root ``event_id``. Decoding (:meth:`ReviewItem.from_dict`, :meth:`ReviewItem.from_json`) checks
every field before an item exists — ``event_id`` non-empty text, ``reason`` and ``note`` text
(valid Unicode; SQLite text that is not UTF-8 arrives as
:class:`~ebb.ledger.sqlite_store.NotUtf8` and is refused), ``ts`` a finite number of seconds,
``status`` ``pending`` or ``resolved``, ``retries`` an integer >= 0, JSON at most 64 levels deep —
and raises :class:`~ebb.errors.InputError` naming the row, the field and the fix, so a malformed
stored item is never returned as an item. :class:`CompensationLog` is the protocol every log of
:mod:`ebb.ledger.review_logs` implements (see :mod:`ebb.ledger.review` for how
:func:`~ebb.ledger.review.compensate` uses it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, cast, runtime_checkable

from ebb.errors import InputError, PermanentError
from ebb.gates.rollback import CompensationStep
from ebb.ledger.base import MalformedRow
from ebb.ledger.sqlite import ROW_FIX as SQLITE_ROW_FIX
from ebb.ledger.sqlite_store import NotUtf8
from ebb.untrusted import checked_int, loads_json

__all__ = ["CompensationLog", "ReviewItem", "ReviewItemNotFound", "ReviewItems", "ReviewStatus", "not_found",
           "sorted_items"]

ReviewStatus = Literal["pending", "resolved"]


class ReviewItemNotFound(PermanentError):
    """No review item with this id."""


@dataclass(frozen=True, slots=True)
class ReviewItem:
    """One root event waiting for (or done with) manual review. ``retries`` counts :meth:`retry` calls."""

    event_id: str
    reason: str
    ts: float
    status: ReviewStatus = "pending"
    note: str = ""
    retries: int = 0

    def to_json(self) -> str:
        return json.dumps({"event_id": self.event_id, "reason": self.reason, "ts": self.ts,
                           "status": self.status, "note": self.note, "retries": self.retries},
                          sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: object, *, where: str | None = None, fix: str | None = None) -> ReviewItem:
        """The item in ``data`` (a parsed JSON object or a row's columns by name); any bad value raises
        :class:`~ebb.errors.InputError` naming ``where`` (the row), the field and ``fix``."""
        try:
            return _decode_item(data)
        except ValueError as exc:
            ident = data.get("event_id") if isinstance(data, dict) else None
            name = f" {ident!r:.60}" if isinstance(ident, str) and ident else ""
            raise InputError(f"malformed review item{name}: {exc}", path=where,
                             fix=fix or SQLITE_ROW_FIX) from exc

    @classmethod
    def from_json(cls, raw: str | bytes, *, where: str | None = None, fix: str | None = None) -> ReviewItem:
        """Parse :meth:`to_json` output; any bad text raises :class:`~ebb.errors.InputError` (see
        :meth:`from_dict`)."""
        try:
            data = loads_json(raw)
        except (ValueError, RecursionError) as exc:
            raise InputError(f"malformed review item: not valid JSON ({exc}): {raw[:60]!r}", path=where,
                             fix=fix or SQLITE_ROW_FIX) from exc
        return cls.from_dict(data, where=where, fix=fix)


_STATUSES: Final = ("pending", "resolved")


def _decode_item(data: object) -> ReviewItem:
    """ValueError naming the first bad field of a review item."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")

    def get(key: str) -> Any:
        if key not in data:
            raise ValueError(f"missing field {key!r}")
        return data[key]

    def text(key: str, *, empty: bool = True) -> str:
        value = get(key)
        if not isinstance(value, str) or (not empty and not value):
            what = "text that is not UTF-8" if isinstance(value, NotUtf8) else f"{type(value).__name__} {value!r:.40}"
            raise ValueError(f"{key} must be a {'non-empty ' if not empty else ''}string, got {what}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{key} holds text that is not valid Unicode") from None
        return value

    event_id, reason, note = text("event_id", empty=False), text("reason"), text("note")
    ts = get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise ValueError(f"ts must be a number of seconds, got {type(ts).__name__} {ts!r:.40}")
    try:
        ts_s = float(ts)
    except OverflowError:
        raise ValueError("ts is an integer past the float range") from None
    if not math.isfinite(ts_s):
        raise ValueError(f"ts must be finite, got {ts!r}")
    status = get("status")
    if status not in _STATUSES:
        raise ValueError(f"status must be pending or resolved, got {status!r:.40}")
    retries = checked_int(get("retries"), "retries", lo=0)
    return ReviewItem(event_id, reason, ts_s, cast(ReviewStatus, status), note, retries)


ReviewItems = list[ReviewItem]  # alias: the log classes have a method named ``list``


@runtime_checkable
class CompensationLog(Protocol):
    """Done-steps record and manual review queue; see the module docstring."""

    def done_ids(self, among: Iterable[str] | None = None) -> set[str]:
        """Event ids whose compensation step is recorded done (only those in ``among`` when given)."""
        ...

    def mark_done(self, step: CompensationStep, ts: float) -> bool:
        """Record ``step`` done; ``True`` if newly recorded, ``False`` if it already was."""
        ...

    def enqueue(self, event_id: str, reason: str, ts: float) -> ReviewItem:
        """Put ``event_id`` in the queue as pending (re-opens an existing item with the new reason)."""
        ...

    def list(self, status: ReviewStatus | None = None) -> ReviewItems:
        """Items ordered by ``(ts, event_id)``, optionally of one status; malformed items are skipped
        (logged, in :attr:`skipped`)."""
        ...

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        """The items the most recent :meth:`list` call skipped because they are malformed."""
        ...

    def show(self, item_id: str) -> ReviewItem | None:
        """The item, or ``None``."""
        ...

    def resolve(self, item_id: str, note: str = "") -> ReviewItem:
        """Mark resolved with ``note``; :class:`ReviewItemNotFound` if unknown."""
        ...

    def retry(self, item_id: str) -> ReviewItem:
        """Mark pending again (``retries`` + 1); :class:`ReviewItemNotFound` if unknown."""
        ...

    def close(self) -> None:
        """Release the store; closing twice is allowed."""
        ...


def not_found(item_id: str) -> ReviewItemNotFound:
    """The error for an unknown ``item_id``, with the command that shows the queue."""
    return ReviewItemNotFound(f"no review item {item_id!r}; `ebb review list` shows the queue")


def sorted_items(items: Iterable[ReviewItem], status: ReviewStatus | None) -> list[ReviewItem]:
    """``items`` of ``status`` (all when None), ordered by ``(ts, event_id)``."""
    return sorted((i for i in items if status is None or i.status == status), key=lambda i: (i.ts, i.event_id))
