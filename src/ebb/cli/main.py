"""The ``ebb`` command: one Typer app; each subcommand lives in its own module under ``ebb.cli``.

Exit codes: 0 success, 1 findings/failed checks (command-specific), 2 usage or input error.
Errors from :mod:`ebb.errors` are printed as one clear line (no traceback) and exit 2; so is any other
exception (a bug), as ``internal error: TYPE: MESSAGE`` (``EBB_DEBUG=1`` shows the traceback). Ctrl-C exits 130.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from ebb.cli.app import app
from ebb.errors import EbbError

# Each module registers its commands on ``app`` when imported.
_COMMAND_MODULES = (
    "ebb.cli.simulate",
    "ebb.cli.bursts",
    "ebb.cli.analyze",
    "ebb.cli.pareto",
    "ebb.cli.plan",
    "ebb.cli.explain",
    "ebb.cli.review",
    "ebb.cli.lint",
    "ebb.cli.agent",
    "ebb.cli.probe",
    "ebb.cli.run",
    "ebb.cli.demo",
    "ebb.cli.sweep",
    "ebb.cli.shadow",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name)


DEBUG_ENV = "EBB_DEBUG"
"""Set to 1 to see the traceback behind an error (internal or not) as well as its one line."""

_MAX_INTERNAL_CHARS = 300


def _one_line(text: str) -> None:
    from rich.console import Console
    from rich.markup import escape

    # One line whatever the terminal width (a CI log, a pipe): no wrapping, the text never
    # read as markup (an error quoting "[/path]" would otherwise crash the error printer).
    console = Console(stderr=True, soft_wrap=True)
    console.print(f"[bold red]error:[/] {escape(' '.join(text.splitlines()))}", highlight=False)


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def main() -> None:
    """Console-script entry point: exit 2 with one ``error:`` line for every failure, never a traceback
    (unless ``EBB_DEBUG=1``); 130 on Ctrl-C."""
    try:
        app()
    except EbbError as exc:
        if _debug():
            traceback.print_exc()
        _one_line(str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 -- a bug: still one line, with how to see more
        if _debug():
            traceback.print_exc()
        msg = " ".join(str(exc).split())
        if len(msg) > _MAX_INTERNAL_CHARS:
            msg = msg[:_MAX_INTERNAL_CHARS] + " …"
        _one_line(f"internal error: {type(exc).__name__}: {msg} "
                  f"(set {DEBUG_ENV}=1 for the traceback; please report it)")
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    main()
