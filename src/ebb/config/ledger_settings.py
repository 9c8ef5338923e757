"""The etcd TLS and authentication settings every command that opens a ledger shares.

:class:`EtcdAuthSettings` is the ``ledger:`` section's etcd half in ``ebb run`` and ``ebb simulate``
(:mod:`ebb.config.run_settings`, :mod:`ebb.config.simulate_settings` extend it) and the source of
the ``--etcd-*`` flags' help in every command (:mod:`ebb.cli.ledger_options`). It holds file
paths only: the password itself is never a setting (``ps`` would show a flag, a config file is
often world-readable), and the ledger layer reads the files when the ledger opens
(``ebb.ledger.location.EtcdAuth.from_flags``), checking the combinations there.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EtcdAuthSettings"]


@dataclass(frozen=True)
class EtcdAuthSettings:
    """TLS files and a user for an etcd ledger; all unset (the default) is plain, anonymous etcd."""

    etcd_ca: str | None = None
    """etcd: PEM CA bundle that signed etcd's server certificate (etcd+https://).

    A file path. Unset: the system's trust store checks etcd's certificate. Needs an
    ``etcd+https://`` ledger URL (TLS to etcd is asked for by the URL, not by this file)."""
    etcd_cert: str | None = None
    """etcd: client certificate for etcd's --client-cert-auth (with --etcd-key).

    A PEM file path, unset by default; the certificate and its key go together (both or neither)."""
    etcd_key: str | None = None
    """etcd: private key of --etcd-cert.

    A PEM file path, unset by default; mount it from a Secret, readable by Ebb only."""
    etcd_user: str | None = None
    """etcd: user for etcd's authentication (password: --etcd-password-file).

    Unset by default (etcd without authentication). The password comes from
    ``etcd_password_file`` or the environment variable ``EBB_ETCD_PASSWORD``, never from a value
    on the command line or in this file."""
    etcd_password_file: str | None = None
    """etcd: file whose first line is the --etcd-user password (default: $EBB_ETCD_PASSWORD).

    A file path (at most 4 KiB; a trailing newline is dropped). Unset: ``$EBB_ETCD_PASSWORD`` is
    the password when ``etcd_user`` is set."""
