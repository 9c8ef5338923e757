"""One output switch for every command that prints a result: ``-o table|json`` (kubectl's ``-o``).

``-o json`` prints the result as JSON on stdout (one document; errors and warnings stay on stderr);
``-o table``, the default, prints it for people. The older ``--json`` flag of ``explain``,
``bursts``, ``pareto``, ``plan`` and ``probe`` is the same as ``-o json`` and stays for scripts that
use it. ``ebb simulate -o json`` prints its scorecards on stdout (as ``--json -``; ``--json FILE``
writes a file), with the table and progress on stderr; ``ebb lint -o human|json|sarif`` is its
``--format``; ``ebb sweep`` takes the same ``-o table|json``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ebb.errors import ConfigError

__all__ = ["OUTPUTS", "OutputOpt", "wants_json"]

OUTPUTS = ("table", "json")

OutputOpt = Annotated[str, typer.Option("--output", "-o", help="table (for people) or json, on stdout.")]


def wants_json(output: str, as_json: bool) -> bool:
    """Whether to print JSON: ``-o json`` or the older ``--json``; any other ``-o`` value is refused."""
    if output not in OUTPUTS:
        raise ConfigError(f"-o {output!r}: choose one of {', '.join(OUTPUTS)} (fix: -o json for a script, "
                          "-o table for people)")
    return as_json or output == "json"
