"""The etcd TLS/auth flags every command that opens a ledger takes, and the one-line malformed-row warning.

``--etcd-ca FILE``, ``--etcd-cert FILE``, ``--etcd-key FILE``, ``--etcd-user NAME`` and
``--etcd-password-file FILE`` (else the password is read from ``EBB_ETCD_PASSWORD``; there is no flag
that takes the password itself, so it never shows in ``ps``). :func:`etcd_auth` turns them into an
:class:`~ebb.ledger.location.EtcdAuth` (``None`` when none is given); giving one with a non-etcd
ledger is a :class:`~ebb.errors.ConfigError` (raised by ``open_ledger``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated

import typer

from ebb.ledger.base import MalformedRow
from ebb.ledger.location import PASSWORD_ENV, EtcdAuth

__all__ = ["EtcdCaOpt", "EtcdCertOpt", "EtcdKeyOpt", "EtcdUserOpt", "EtcdPasswordFileOpt", "etcd_auth",
           "quiet_row_warnings", "skipped_warning"]

EtcdCaOpt = Annotated[str | None, typer.Option(
    "--etcd-ca", metavar="FILE", help="etcd: PEM CA bundle that signed etcd's server certificate (etcd+https://).")]
EtcdCertOpt = Annotated[str | None, typer.Option(
    "--etcd-cert", metavar="FILE", help="etcd: client certificate for etcd's --client-cert-auth (with --etcd-key).")]
EtcdKeyOpt = Annotated[str | None, typer.Option(
    "--etcd-key", metavar="FILE", help="etcd: private key of --etcd-cert.")]
EtcdUserOpt = Annotated[str | None, typer.Option(
    "--etcd-user", metavar="NAME", help="etcd: user for etcd's authentication (password: --etcd-password-file).")]
EtcdPasswordFileOpt = Annotated[str | None, typer.Option(
    "--etcd-password-file", metavar="FILE",
    help=f"etcd: file whose first line is the --etcd-user password (default: ${PASSWORD_ENV}).")]


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
