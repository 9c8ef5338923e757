"""Validate first: the flag checks every command runs before it does any work.

Each helper raises :class:`~ebb.errors.ConfigError` (a bad flag value) or
:class:`~ebb.errors.InputError` (a path that cannot be used) whose one line names the flag, the value
received and the fix; ``ebb``'s ``main()`` prints it as ``error: ...`` and exits 2. A helper returns
the value it checked, so a command can write ``x = positive("--x", x)``.
The number checks are :mod:`ebb.config.settings_checks`' (the settings dataclasses run them too).

Why before any work: a bad value found after a 10-minute simulation (an unwritable ``--report``)
wastes the run, and some values never fail at all (a 0 s sync period steps time by zero: a hang).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Final

from rich.console import Console

from ebb.config.settings_checks import at_least, finite, in_range, int_in_range, non_negative, positive
from ebb.errors import InputError

__all__ = [
    "at_least",
    "finite",
    "in_range",
    "int_in_range",
    "non_negative",
    "positive",
    "sqlite_ledger_path",
    "writable_file",
]


def writable_file(flag: str, path: str | os.PathLike[str]) -> Path:
    """A file path the command can write later: its directory exists and is writable, and the path
    is not a directory nor an existing read-only file. Nothing is created."""
    p = Path(path)
    where = os.fspath(path)
    if flag == "--json" and p == STDOUT:
        return p  # standard output (see STDOUT)
    if p.is_dir():
        raise InputError(f"{flag} is a directory", path=where, fix=f"give {flag} a file name inside it")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{flag}: directory {os.fspath(parent)!r} does not exist", path=where,
                         fix=f"create it first (mkdir -p {os.fspath(parent)}) or choose another {flag}")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise InputError(f"{flag}: the file is not writable", path=where,
                             fix=f"check its permissions or choose another {flag}")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{flag}: directory {os.fspath(parent)!r} is not writable", path=where,
                         fix=f"choose another {flag}")
    return p


_SQLITE_MAGIC = b"SQLite format 3\x00"


def sqlite_ledger_path(flag: str, path: str) -> Path:
    """:func:`writable_file`, and an existing non-empty file must be an SQLite database."""
    p = writable_file(flag, path)
    if p.is_file() and p.stat().st_size > 0:
        try:
            with p.open("rb") as fh:
                head = fh.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise InputError(f"{flag}: cannot read the ledger: {exc.strerror}", path=path,
                             fix="check its permissions") from exc
        if head != _SQLITE_MAGIC:
            raise InputError(f"{flag}: not an SQLite ledger (the file exists with other content)", path=path,
                             fix=f"choose a new file for {flag}, or '' to record nothing")
    return p


STDOUT: Final = Path("-")
"""``--json -``: the JSON goes to standard output (and the human output to stderr), as kubectl's ``-o json``."""


def human_console(json_out: Path | None) -> Console:
    """Where a command's human output goes: stderr when ``--json -`` puts the JSON on stdout (a pipe
    then reads JSON only), else stdout; off a terminal 150 columns wide, so a log keeps whole rows."""
    to_err = json_out == STDOUT
    tty = (sys.stderr if to_err else sys.stdout).isatty()
    return Console(stderr=to_err) if tty else Console(stderr=to_err, width=150)


def write_scorecards(path: Path, data: object) -> None:
    """Write ``data`` as indented JSON to ``path`` (checked earlier by :func:`writable_file`), or to
    standard output when ``path`` is :data:`STDOUT` (``-``); a write that still fails (disk full,
    permissions changed) is one InputError naming the file."""
    if path == STDOUT:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        sys.stdout.flush()
        return
    try:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write the JSON scorecard: {exc.strerror}", path=str(path)) from exc
