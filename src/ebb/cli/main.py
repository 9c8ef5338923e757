"""The ``ebb`` command: one Typer app; each subcommand lives in its own module under ``ebb.cli``.

Exit codes: 0 success, 1 findings/failed checks (command-specific), 2 usage or input error.
Errors from :mod:`ebb.errors` are printed as one clear line (no traceback) and exit 2.
"""

from __future__ import annotations

import importlib
import sys

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
    "ebb.cli.sweep",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except EbbError as exc:
        from rich.console import Console
        from rich.markup import escape

        # One line whatever the terminal width (a CI log, a pipe): no wrapping, the text never
        # read as markup (an error quoting "[/path]" would otherwise crash the error printer).
        console = Console(stderr=True, soft_wrap=True)
        text = " ".join(str(exc).splitlines())
        console.print(f"[bold red]error:[/] {escape(text)}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    main()
