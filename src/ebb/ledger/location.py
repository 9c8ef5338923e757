"""Where a ledger lives, parsed once for every store that sits next to it, and how to reach etcd.

:class:`EtcdAuth` carries the TLS and user/password options of an etcd ledger (the CLI flags
``--etcd-ca``, ``--etcd-cert``, ``--etcd-key``, ``--etcd-user``, ``--etcd-password-file`` and the
environment variable ``EBB_ETCD_PASSWORD``). It is plain data: nothing here opens a file except
:meth:`EtcdAuth.from_flags`, which reads the password file once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

from ebb.errors import ConfigError

__all__ = ["Location", "parse_location", "EtcdAuth", "check_auth_fits", "PASSWORD_ENV", "MAX_PASSWORD_BYTES"]

PASSWORD_ENV: Final = "EBB_ETCD_PASSWORD"
"""Environment variable holding the etcd password when no ``--etcd-password-file`` is given."""
MAX_PASSWORD_BYTES: Final = 4096
"""Largest password file read (4 KiB): anything larger is not a password file."""


class Location(NamedTuple):
    """``kind`` etcd (``target`` = gateway URL, ``prefix``), memory, or sqlite (``target`` = path)."""

    kind: Literal["etcd", "memory", "sqlite"]
    target: str
    prefix: str


def parse_location(where: str | os.PathLike[str]) -> Location:
    """``etcd://HOST:PORT[/PREFIX]``, ``etcd+https://…``, ``memory:``, ``sqlite:///PATH`` or a plain path.

    An empty etcd prefix is returned as ``""`` (the store picks its default).
    """
    text = os.fspath(where)
    if text.startswith(("etcd://", "etcd+https://")):
        scheme, rest = text.split("://", 1)
        hostport, _, prefix = rest.partition("/")
        if not hostport:
            raise ConfigError(f"etcd ledger URL needs HOST:PORT, got {text!r} (e.g. etcd://127.0.0.1:2379/ebb)")
        proto = "https" if scheme == "etcd+https" else "http"
        return Location("etcd", f"{proto}://{hostport}", prefix)
    if text == "memory:":
        return Location("memory", "", "")
    if text.startswith("sqlite://"):
        text = text[len("sqlite://"):]
        if not text:
            raise ConfigError(f"sqlite ledger URL needs a path, got {os.fspath(where)!r} (e.g. sqlite:///tmp/l.sqlite)")
    return Location("sqlite", text, "")


@dataclass(frozen=True)
class EtcdAuth:
    """How to authenticate to etcd: TLS files and/or a user with a password.

    * ``ca_file``: PEM bundle of the CA(s) that signed etcd's server certificate (``--etcd-ca``);
      ``None`` uses the system store. Needs an ``etcd+https://`` ledger URL.
    * ``cert_file`` + ``key_file``: the client certificate and its key for etcd's
      ``--client-cert-auth`` (``--etcd-cert`` / ``--etcd-key``); both or neither.
    * ``user`` + ``password``: etcd's own authentication (``--etcd-user``; the password comes from
      ``--etcd-password-file`` or ``EBB_ETCD_PASSWORD``, never from a flag value that ``ps`` would
      show). The password is left out of ``repr``.

    Construction checks only the combinations (:class:`~ebb.errors.ConfigError` naming the flag);
    the gateway checks that the files exist when it is made. ``EtcdAuth()`` (all ``None``) is the
    same as passing no options.
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("ca_file", "cert_file", "key_file", "user", "password"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"EtcdAuth.{name} must be a non-empty string or None, got {value!r}")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("--etcd-cert and --etcd-key go together: give the client certificate and its key")
        if self.user is not None and self.password is None:
            raise ConfigError(f"--etcd-user {self.user!r} needs a password: --etcd-password-file FILE "
                              f"or the environment variable {PASSWORD_ENV}")
        if self.password is not None and self.user is None:
            raise ConfigError(f"an etcd password was given (--etcd-password-file or {PASSWORD_ENV}) "
                              "without --etcd-user NAME")

    @property
    def tls(self) -> bool:
        """True when a CA file or a client certificate is set (the URL must be ``etcd+https://``)."""
        return self.ca_file is not None or self.cert_file is not None

    @property
    def empty(self) -> bool:
        """True when no option is set."""
        return not self.tls and self.user is None

    @classmethod
    def from_flags(cls, *, ca: str | None = None, cert: str | None = None, key: str | None = None,
                   user: str | None = None, password_file: str | None = None,
                   env: Mapping[str, str] | None = None) -> EtcdAuth | None:
        """The options of the CLI flags; ``None`` when none is given.

        The password is the first line of ``password_file`` (a trailing newline is dropped; at most
        :data:`MAX_PASSWORD_BYTES`), else ``env[PASSWORD_ENV]`` (``os.environ`` by default) when
        ``user`` is given. :class:`~ebb.errors.ConfigError` names the flag when a file cannot be read.
        """
        environ = os.environ if env is None else env
        password: str | None = None
        if password_file is not None:
            try:
                with open(password_file, "rb") as fh:
                    raw = fh.read(MAX_PASSWORD_BYTES + 1)
            except OSError as exc:
                raise ConfigError(f"--etcd-password-file {password_file}: cannot read it: "
                                  f"{exc.strerror or exc} (fix: check the path and its permissions)") from exc
            if len(raw) > MAX_PASSWORD_BYTES:
                raise ConfigError(f"--etcd-password-file {password_file}: larger than {MAX_PASSWORD_BYTES} bytes; "
                                  "it should hold only the password")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"--etcd-password-file {password_file}: not UTF-8 text") from exc
            password = text.split("\n", 1)[0].rstrip("\r")
            if not password:
                raise ConfigError(f"--etcd-password-file {password_file}: the first line is empty "
                                  "(fix: write the password on the first line)")
        elif user is not None:
            password = environ.get(PASSWORD_ENV) or None
        if ca is None and cert is None and key is None and user is None and password is None:
            return None
        return cls(ca_file=ca, cert_file=cert, key_file=key, user=user, password=password)


def check_auth_fits(loc: Location, auth: EtcdAuth | None) -> None:
    """ConfigError when etcd options are given for a ledger that is not in etcd (they would do nothing)."""
    if auth is not None and not auth.empty and loc.kind != "etcd":
        raise ConfigError(f"--etcd-ca/--etcd-cert/--etcd-key/--etcd-user apply to etcd ledgers only, but the "
                          f"ledger is {loc.kind} ({loc.target or loc.kind}) (fix: drop them, or pass "
                          "--ledger etcd+https://HOST:PORT/PREFIX)")
