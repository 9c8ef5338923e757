"""``ebb`` run in-process as its console script runs it, for the fuzz targets that check the CLI's
one-line errors (imported as ``from in_process import run_ebb``)."""

from __future__ import annotations

import contextlib
import io
import sys

from ebb.cli.main import main


def run_ebb(argv: list[str]) -> tuple[int, str]:
    """``ebb ARGV`` through :func:`ebb.cli.main.main` (``sys.argv`` set, stdout dropped); (exit code, stderr)."""
    err = io.StringIO()
    old_argv = sys.argv
    sys.argv = ["ebb", *argv]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = old_argv
    return code, err.getvalue()
