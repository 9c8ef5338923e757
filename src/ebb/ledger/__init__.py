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

import logging

from ebb.errors import TransientError
from ebb.ledger.base import Fence, Ledger, MalformedRow
from ebb.ledger.election import LeaderElector
from ebb.ledger.etcd import EtcdLedger
from ebb.ledger.location import EtcdAuth, check_auth_fits, parse_location
from ebb.ledger.memory import MemoryLedger
from ebb.ledger.sqlite import DEFAULT_PATH, SqliteLedger

__all__ = ["EtcdAuth", "Fence", "LeaderElector", "Ledger", "MalformedRow", "MemoryLedger", "SqliteLedger",
           "EtcdLedger", "open_ledger", "DEFAULT_PATH"]

log = logging.getLogger(__name__)


def open_ledger(where: str | os.PathLike[str], *, create: bool = True, read_only: bool = False,
                writer: bool = False, etcd_auth: EtcdAuth | None = None) -> Ledger:
    """Open a ledger from a location.

    * ``etcd://HOST:PORT[/PREFIX]`` or ``etcd+https://...`` → :class:`EtcdLedger` (prefix default
      ``ebb/ledger``), with ``etcd_auth`` (TLS files, user and password). With ``writer=True`` one read
      is sent at once, so a TLS or authentication problem raises :class:`~ebb.errors.ConfigError` here
      (an etcd that does not answer yet is only logged: the controller retries).
    * ``memory:`` → a fresh :class:`MemoryLedger`
    * ``sqlite:///PATH`` or any other string → :class:`SqliteLedger` at that path (``create=False``
      refuses a missing file; ``read_only=True`` writes nothing, for ``ebb explain``/``ebb review``;
      ``writer=True`` takes the one-controller lock, ``SqliteLedger(exclusive=True)``: a second
      controller on the file is refused with :class:`~ebb.errors.ConfigError`).
    """
    loc = parse_location(where)
    check_auth_fits(loc, etcd_auth)
    if loc.kind == "etcd":
        led = EtcdLedger(loc.target, prefix=loc.prefix or "ebb/ledger", auth=etcd_auth)
        if writer:
            try:
                led.check()
            except TransientError as exc:
                log.warning("ledger: %s; the controller retries every cycle", exc)
            except BaseException:
                led.close()
                raise
        return led
    if loc.kind == "memory":
        return MemoryLedger()
    return SqliteLedger(loc.target, create=create and not read_only, read_only=read_only, exclusive=writer)
