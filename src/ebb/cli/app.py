"""The shared Typer application object; command modules import it and register themselves.

Conventions every command shares: ``-h`` is ``--help`` (on the app and on every subcommand, through
the context settings subcommands inherit) and ``ebb --version`` prints ``ebb <version>`` from the
installed package's metadata. Colour follows rich, which turns it off when ``NO_COLOR`` is set and
non-empty (https://no-color.org). Shell completion: ``ebb --install-completion`` (bash, zsh, fish,
PowerShell) or ``ebb --show-completion SHELL`` to print the script.

Environment variables: every option of every command can be set as ``EBB_<COMMAND>_<OPTION>`` (upper
case, dashes as underscores: ``EBB_SIMULATE_LEDGER=ebb-ledger.sqlite``, ``EBB_EXPLAIN_LEDGER``), as
click's ``auto_envvar_prefix`` reads them; ``<OPTION>`` is the option's parameter name, which for a
few flags is not its long name (``--prometheus-url`` reads ``EBB_RUN_PROMETHEUS``, ``--format``
``EBB_SIMULATE_FMT``, ``--json`` ``EBB_SIMULATE_JSON_OUT``; docs/config.md lists each). A flag on the
command line wins over the environment. ``ebb run`` and ``ebb simulate`` also read ``--config FILE``,
below both (:mod:`ebb.cli.config_option`). ``EBB_DEBUG=1`` shows tracebacks (``ebb.cli.main``).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version
from typing import Annotated

import typer

from ebb.cli.help_format import EbbTyper

__all__ = ["app", "package_version", "ENV_PREFIX"]

ENV_PREFIX = "EBB"
"""Options read ``EBB_<COMMAND>_<OPTION>`` from the environment (see the module docstring)."""

app = EbbTyper(  # help that reads whole at 80 columns (ebb.cli.help_format)
    name="ebb",
    help="Ebb: safe, SLA-aware elastic scale-down for GPU clusters.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": ENV_PREFIX},
)


def package_version() -> str:
    """The installed ``ebb`` distribution's version (``unknown`` when run from an uninstalled tree)."""
    try:
        return _dist_version("ebb")
    except PackageNotFoundError:  # pragma: no cover - the package is installed wherever the CLI runs
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"ebb {package_version()}")
        raise typer.Exit(0)


@app.callback()
def _root(
    # Never from the environment: an EBB_VERSION set for a build must not turn every command into this.
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          allow_from_autoenv=False, help="Print ebb's version and exit.")] = False,
) -> None:
    # No docstring: the app's help= above is what `ebb -h` shows.
    del version
