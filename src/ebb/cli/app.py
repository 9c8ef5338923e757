"""The shared Typer application object; command modules import it and register themselves."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="ebb",
    help="Ebb: safe, SLA-aware elastic scale-down for GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
