"""The local actuator's state file: the decision ids it applied and the next worker id, kept across restarts.

:class:`AppliedIds` is what :class:`~ebb.actuate.local.LocalActuator` keeps in its ``state_file``
(none: in memory only). Guarantees:

* **Atomic, before use.** Every change is written at once (write, fsync, rename:
  :func:`~ebb.actuate.local_procs.atomic_write`); :meth:`AppliedIds.reserve` persists the next id
  *before* any worker uses one, so a crash may burn ids, never reuse one.
* **Bounded.** The newest :data:`KEPT_IDS` (10,000) applied decisions are kept, oldest dropped first.
* **Versioned.** The file carries ``version`` (:data:`STATE_VERSION`); another version, unreadable
  JSON or a bad field is an :class:`~ebb.errors.InputError` naming the path and the fix. A file
  without ``next_id`` (written before it was kept) reads as 0.
* A failed write leaves memory as it was and raises :class:`~ebb.errors.PermanentError` naming the file.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Final

from ebb.actuate.base import ActuationResult
from ebb.actuate.local_procs import atomic_write
from ebb.errors import InputError, PermanentError
from ebb.model.ids import DecisionId

__all__ = ["KEPT_IDS", "STATE_VERSION", "AppliedIds"]

KEPT_IDS: Final = 10_000
STATE_VERSION: Final = 1


class AppliedIds:
    """Applied decisions and the next worker id of one actuator (module docstring); not thread-safe."""

    def __init__(self, path: Path | None, target: str) -> None:
        self.path, self.target = path, target
        self.done, self.next_id = self._load()

    def get(self, decision_id: DecisionId) -> ActuationResult | None:
        """The result ``decision_id`` had, when it was applied (and is still kept)."""
        return self.done.get(decision_id)

    def reserve(self, count: int) -> int:
        """The first of ``count`` fresh ids, persisted before any worker uses one."""
        first = self.next_id
        if count <= 0:
            return first
        self.next_id += count
        try:
            self._save()
        except OSError as exc:
            self.next_id = first
            raise PermanentError(f"cannot persist the next worker id to {self.path}: {exc}; "
                                 "make its directory writable") from exc
        return first

    def remember(self, result: ActuationResult) -> None:
        """Keep ``result`` under its decision id (persisted)."""
        self.done[result.decision_id] = result
        while len(self.done) > KEPT_IDS:
            del self.done[next(iter(self.done))]
        try:
            self._save()
        except OSError as exc:
            del self.done[result.decision_id]
            raise PermanentError(f"cannot persist applied decision ids to {self.path}: {exc}; "
                                 "make its directory writable") from exc

    def _load(self) -> tuple[dict[DecisionId, ActuationResult], int]:
        path = self.path
        if path is None or not path.exists():
            return {}, 0
        fix = "delete the file to forget applied decision ids, or point state_file elsewhere"
        try:
            doc = json.loads(path.read_text())
            if doc.get("version") != STATE_VERSION:
                raise InputError(f"unsupported state version {doc.get('version')!r}, want {STATE_VERSION}",
                                 path=str(path), fix=fix)
            next_id = doc.get("next_id", 0)  # absent in files written before it was kept
            if type(next_id) is not int or next_id < 0:  # noqa: E721 - a bool is not an id
                raise InputError(f"next_id must be an integer >= 0, got {next_id!r}", path=str(path), fix=fix)
            return {DecisionId(d["decision_id"]): ActuationResult(
                DecisionId(d["decision_id"]), bool(d["applied"]), int(d["replicas_before"]),
                int(d["replicas_after"]), tuple(d["removed"]), tuple(d["added"])) for d in doc["decisions"]}, next_id
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"cannot read actuator state: {exc}", path=str(path), fix=fix) from exc

    def _save(self) -> None:
        """Write the file atomically; nothing without one. OSError as is."""
        if self.path is None:
            return
        doc = {"version": STATE_VERSION, "target": self.target, "next_id": self.next_id,
               "decisions": [asdict(r) for r in self.done.values()]}
        atomic_write(self.path, json.dumps(doc))
