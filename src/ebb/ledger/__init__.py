"""The decision ledger: an append-only store of cycles, decisions, reasons and state snapshots.

Every backend implements :class:`Ledger` (see :mod:`ebb.ledger.base` for the guarantees):
:class:`SqliteLedger` (default, one file), :class:`EtcdLedger` (``pip install 'ebb[etcd]'``) and
:class:`MemoryLedger` (tests). :func:`open_ledger` picks one from a path or URL.

This package is an adapter: it imports :mod:`ebb.model` and :mod:`ebb.errors`, and the pure
compensation order of :mod:`ebb.gates.rollback` (review queue).

:class:`LeaderElector` campaigns on etcd; its :class:`Fence` (token = the election key's create
revision) is checked inside the ledger's own write transaction, so a deposed leader cannot write.
"""

from __future__ import annotations

import os

from ebb.ledger.base import Fence, Ledger
from ebb.ledger.election import LeaderElector
from ebb.ledger.etcd import EtcdLedger
from ebb.ledger.location import parse_location
from ebb.ledger.memory import MemoryLedger
from ebb.ledger.sqlite import DEFAULT_PATH, SqliteLedger

__all__ = ["Fence", "LeaderElector", "Ledger", "MemoryLedger", "SqliteLedger", "EtcdLedger", "open_ledger",
           "DEFAULT_PATH"]


def open_ledger(where: str | os.PathLike[str], *, create: bool = True) -> Ledger:
    """Open a ledger from a location.

    * ``etcd://HOST:PORT[/PREFIX]`` or ``etcd+https://...`` → :class:`EtcdLedger` (prefix default ``ebb/ledger``)
    * ``memory:`` → a fresh :class:`MemoryLedger`
    * ``sqlite:///PATH`` or any other string → :class:`SqliteLedger` at that path
      (``create=False`` refuses a missing file).
    """
    loc = parse_location(where)
    if loc.kind == "etcd":
        return EtcdLedger(loc.target, prefix=loc.prefix or "ebb/ledger")
    if loc.kind == "memory":
        return MemoryLedger()
    return SqliteLedger(loc.target, create=create)
