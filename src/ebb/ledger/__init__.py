"""The decision ledger: an append-only store of cycles, decisions, reasons and state snapshots.

Every backend implements :class:`Ledger` (see :mod:`ebb.ledger.base` for the guarantees):
:class:`SqliteLedger` (default, one file), :class:`EtcdLedger` (``pip install 'ebb[etcd]'``) and
:class:`MemoryLedger` (tests). :func:`open_ledger` picks one from a path or URL.

This package is an adapter: it imports :mod:`ebb.model` and :mod:`ebb.errors` only.
"""

from __future__ import annotations

import os

from ebb.errors import ConfigError
from ebb.ledger.base import Ledger
from ebb.ledger.etcd import EtcdLedger
from ebb.ledger.memory import MemoryLedger
from ebb.ledger.sqlite import DEFAULT_PATH, SqliteLedger

__all__ = ["Ledger", "MemoryLedger", "SqliteLedger", "EtcdLedger", "open_ledger", "DEFAULT_PATH"]


def open_ledger(where: str | os.PathLike[str], *, create: bool = True) -> Ledger:
    """Open a ledger from a location.

    * ``etcd://HOST:PORT[/PREFIX]`` or ``etcd+https://...`` → :class:`EtcdLedger` (prefix default ``ebb/ledger``)
    * ``memory:`` → a fresh :class:`MemoryLedger`
    * ``sqlite:///PATH`` or any other string → :class:`SqliteLedger` at that path
      (``create=False`` refuses a missing file).
    """
    text = os.fspath(where)
    if text.startswith(("etcd://", "etcd+https://")):
        scheme, rest = text.split("://", 1)
        hostport, _, prefix = rest.partition("/")
        if not hostport:
            raise ConfigError(f"etcd ledger URL needs HOST:PORT, got {text!r} (e.g. etcd://127.0.0.1:2379/ebb)")
        proto = "https" if scheme == "etcd+https" else "http"
        return EtcdLedger(f"{proto}://{hostport}", prefix=prefix or "ebb/ledger")
    if text == "memory:":
        return MemoryLedger()
    if text.startswith("sqlite://"):
        text = text[len("sqlite://"):]
        if not text:
            raise ConfigError(f"sqlite ledger URL needs a path, got {os.fspath(where)!r} (e.g. sqlite:///tmp/l.sqlite)")
    return SqliteLedger(text, create=create)
