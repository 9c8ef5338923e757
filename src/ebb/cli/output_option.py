"""One output switch for every command that prints a result: ``-o table|json`` (kubectl's ``-o``).

``-o json`` prints the result as JSON on stdout (one document; errors and warnings stay on stderr);
``-o table``, the default, prints it for people. The older ``--json`` flag of ``explain``,
``bursts``, ``pareto``, ``plan`` and ``probe`` is the same as ``-o json`` and stays for scripts that
use it. ``ebb simulate`` writes files (``--json FILE``, ``-`` for stdout) and ``ebb lint`` has its
``--format human|json|sarif``; ``ebb sweep`` takes the same ``-o table|json``.
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
