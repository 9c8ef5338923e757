"""Where a ledger lives, parsed once for every store that sits next to it."""

from __future__ import annotations

import os
from typing import Literal, NamedTuple

from ebb.errors import ConfigError


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
