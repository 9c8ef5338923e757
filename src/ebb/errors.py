"""Ebb's one error tree, classified by what the caller should do next.

::

    EbbError                      base of everything Ebb raises on purpose
    ├── PermanentError            retrying the same call will fail the same way: fix the input
    │   ├── ConfigError           bad flag, spec, YAML or JSON (names the key and the fix)
    │   ├── InputError            bad data file (names file, line and the fix)
    │   │   └── TraceFormatError  a trace that cannot be parsed as the asked/detected format
    │   ├── MissingExtraError     an optional dependency is not installed (says which extra)
    │   └── LedgerConflict        a different record was appended under an id the ledger already holds
    └── TransientError            the outside world failed; retry after ``retry_after_s``
        ├── SourceUnavailable     a metric source (Prometheus, NVML, agent) did not answer
        └── NotLeader             this controller's leadership (fencing token) is no longer current:
                                  nothing was written; act again only after winning a new election

Library errors are wrapped in one of these with the original chained as ``__cause__``.
Bad arguments to pure functions raise :class:`ValueError` quoting the value received.
"""

from __future__ import annotations

__all__ = [
    "EbbError",
    "PermanentError",
    "ConfigError",
    "InputError",
    "TraceFormatError",
    "MissingExtraError",
    "LedgerConflict",
    "TransientError",
    "SourceUnavailable",
    "NotLeader",
    "require_extra",
]

import importlib
from types import ModuleType


class EbbError(Exception):
    """Base class: every error Ebb raises deliberately."""


class PermanentError(EbbError):
    """Retrying will not help; the message says what to change."""


class ConfigError(PermanentError):
    """A configuration value, CLI flag or policy spec is invalid."""


MAX_MESSAGE_CHARS = 400
"""Longest ``InputError`` message kept whole; a longer one (a reader quoting a huge hostile value)
keeps its first and last 200 characters, so the path, line and fix always fit on one short line."""


class InputError(PermanentError):
    """An input file is malformed. ``path`` and ``line`` (1-based, when known) locate it."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 fix: str | None = None) -> None:
        self.path = path
        self.line = line
        self.fix = fix
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        if len(message) > MAX_MESSAGE_CHARS:  # a quoted input can be megabytes: keep its head and tail
            cut = MAX_MESSAGE_CHARS // 2
            message = f"{message[:cut]} …[{len(message) - 2 * cut:,} characters cut]… {message[-cut:]}"
        text = f"{where}{message}"
        if fix:
            text += f" (fix: {fix})"
        # One line, always: a quoted input may hold line breaks, and the CLI promises one line.
        super().__init__(" ".join(text.splitlines()) if "\n" in text or "\r" in text else text)


class TraceFormatError(InputError):
    """A trace file does not match the requested or detected format."""


class MissingExtraError(PermanentError):
    """An optional dependency is missing; the message carries the pip command that installs it."""


class LedgerConflict(PermanentError):
    """A cycle or decision id is already in the decision ledger with different content.

    Re-appending an identical cycle is a no-op; this is raised only when the content differs,
    so retrying cannot help: the writer must use fresh ids.
    """


class TransientError(EbbError):
    """The outside world failed; the same call may succeed after ``retry_after_s`` seconds."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class SourceUnavailable(TransientError):
    """A metric source did not answer (connection refused, timeout, 5xx)."""


class NotLeader(TransientError):
    """A write carried a fencing token that is no longer the current leader's; nothing was written.

    Not permanent: the caller should become a follower and retry only once it leads again
    (with the new, higher token).
    """


def require_extra(module: str, extra: str) -> ModuleType:
    """Import ``module`` lazily, or raise :class:`MissingExtraError` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"optional dependency {module!r} is not installed; install it with: pip install 'ebb[{extra}]'"
        ) from exc
