"""``ebb run --serve-keda`` / ``--hand-off``: refused before anything starts unless they fit together."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import EbbError

runner = CliRunner()
BASE = ["run", "--source", "prometheus", "--prometheus-url", "http://127.0.0.1:1", "--ledger", "memory://"]


@pytest.mark.parametrize(("extra", "says"), [
    (["--serve-keda", ":9090"], "needs --mode act"),
    (["--mode", "act", "--hand-off"], "needs --actuator kubernetes"),
    (["--mode", "act", "--serve-keda", ":9090", "--actuator", "local"], "needs --actuator kubernetes"),
    (["--mode", "act", "--hand-off", "--actuator", "kubernetes", "--deployment", "d", "--tier",
      "asleep:wake_s=2,max=2"], "does not go with --tier"),
    (["--keda-token-file", "/nonexistent"], "need --serve-keda"),
    (["--mode", "act", "--actuator", "kubernetes", "--deployment", "d", "--serve-keda", ":9090",
      "--keda-cert", "/nonexistent/c.pem"], "--keda-cert and --keda-key go together"),
    (["--mode", "act", "--actuator", "kubernetes", "--deployment", "d", "--serve-keda", ":9090",
      "--keda-cert", "/nonexistent/c.pem", "--keda-key", "/nonexistent/k.pem"], "readable PEM"),
    (["--mode", "act", "--actuator", "kubernetes", "--deployment", "d", "--serve-keda", ":9090",
      "--keda-token-file", "/nonexistent/token"], "--keda-token-file"),
])
def test_a_hand_off_that_does_not_fit_is_refused_before_anything_starts(extra: list[str], says: str) -> None:
    res = runner.invoke(app, BASE + extra)
    assert isinstance(res.exception, EbbError), res.output
    assert says in f"{res.output} {res.exception}"
    assert "KEDA external scaler:" not in res.output and "router:" not in res.output


def test_the_refusal_is_one_line_and_exit_2(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "ebb.cli.main", *BASE, "--serve-keda", ":9090"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "fix:" in res.stderr, res.stderr
