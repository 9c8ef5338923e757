"""The etcd TLS/auth flags every command that opens a ledger takes, and the one-line malformed-row warning.

``--etcd-ca FILE``, ``--etcd-cert FILE``, ``--etcd-key FILE``, ``--etcd-user NAME`` and
``--etcd-password-file FILE`` (else the password is read from ``EBB_ETCD_PASSWORD``; there is no flag
that takes the password itself, so it never shows in ``ps``); their help is the docstrings of
:class:`~ebb.config.ledger_settings.EtcdAuthSettings` (the ``ledger:`` section of ``ebb run`` and
``ebb simulate``'s ``--config``). :func:`etcd_auth` turns them into an
:class:`~ebb.ledger.location.EtcdAuth` (``None`` when none is given); giving one with a non-etcd
ledger is a :class:`~ebb.errors.ConfigError` (raised by ``open_ledger``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from ebb.config.ledger_settings import EtcdAuthSettings
from ebb.config.settings_file import field_help
from ebb.ledger.base import MalformedRow
from ebb.ledger.location import EtcdAuth

__all__ = ["EtcdCaOpt", "EtcdCertOpt", "EtcdKeyOpt", "EtcdUserOpt", "EtcdPasswordFileOpt", "etcd_auth", "etcd_option",
           "quiet_row_warnings", "skipped_warning"]

_ETCD_FLAGS = {"etcd_ca": "FILE", "etcd_cert": "FILE", "etcd_key": "FILE", "etcd_user": "NAME",
               "etcd_password_file": "FILE"}


def etcd_option(key: str, rich_help_panel: str | None = None) -> Any:
    """The ``typer.Option`` of etcd setting ``key`` (``etcd_ca`` → ``--etcd-ca``), its help from
    :class:`~ebb.config.ledger_settings.EtcdAuthSettings`' docstring, in ``rich_help_panel`` if given."""
    return typer.Option("--" + key.replace("_", "-"), metavar=_ETCD_FLAGS[key],
                        help=field_help(EtcdAuthSettings, key), rich_help_panel=rich_help_panel)


EtcdCaOpt = Annotated[str | None, etcd_option("etcd_ca")]
EtcdCertOpt = Annotated[str | None, etcd_option("etcd_cert")]
EtcdKeyOpt = Annotated[str | None, etcd_option("etcd_key")]
EtcdUserOpt = Annotated[str | None, etcd_option("etcd_user")]
EtcdPasswordFileOpt = Annotated[str | None, etcd_option("etcd_password_file")]


def etcd_auth(ca: str | None, cert: str | None, key: str | None, user: str | None,
              password_file: str | None) -> EtcdAuth | None:
    """The flags as :class:`EtcdAuth`, or ``None`` when none is given (ConfigError naming a bad flag)."""
    return EtcdAuth.from_flags(ca=ca, cert=cert, key=key, user=user, password_file=password_file)


@contextmanager
def quiet_row_warnings() -> Iterator[None]:
    """Silence the ledger's per-row WARNINGs for a command that prints its own one-line summary."""
    logger = logging.getLogger("ebb.ledger")
    handler = logging.NullHandler()
    old = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.propagate = old
        logger.removeHandler(handler)


def skipped_warning(where: str, rows: Sequence[MalformedRow]) -> str | None:
    """One line saying which malformed rows a listing skipped (the first one's error in full), or None."""
    if not rows:
        return None
    unique = list(dict.fromkeys(rows))
    first = " ".join(unique[0].error.split())
    more = f" (and {len(unique) - 1} more)" if len(unique) > 1 else ""
    return (f"warning: skipped {len(unique)} malformed row{'s' if len(unique) != 1 else ''} in {where} "
            f"(everything else is shown); first: {first}{more}")
