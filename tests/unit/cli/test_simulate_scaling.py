"""``--load-scale`` and ``--peak-replicas`` are exclusive, and each is honoured (issue #18 item 1)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ebb.cli.main import app


def _requests(tmp_path: Path, *flags: str) -> int:
    out = tmp_path / f"s{len(list(tmp_path.iterdir()))}.json"
    res = CliRunner().invoke(app, ["simulate", "--trace", "azure-code", "--policy", "static", "--quiet",
                                   "--ledger", "", "--json", str(out), *flags])
    assert res.exit_code == 0, res.output
    return int(json.loads(out.read_text())[0]["requests"])


def test_load_scale_two_doubles_the_load_of_the_trace_as_it_is(tmp_path: Path) -> None:
    base = _requests(tmp_path, "--peak-replicas", "off")
    doubled = _requests(tmp_path, "--load-scale", "2")
    assert abs(doubled - 2 * base) <= 2  # each request copied twice (rounding at most one per end)


def test_load_scale_and_peak_replicas_together_are_refused_naming_both() -> None:
    res = CliRunner().invoke(app, ["simulate", "--trace", "azure-code", "--quiet", "--ledger", "",
                                   "--load-scale", "2", "--peak-replicas", "10"])
    assert res.exit_code != 0
    assert "--load-scale" in str(res.exception) and "--peak-replicas" in str(res.exception)


def test_peak_replicas_accepts_only_a_number_or_off() -> None:
    res = CliRunner().invoke(app, ["simulate", "--trace", "azure-code", "--quiet", "--ledger", "",
                                   "--peak-replicas", "many"])
    assert res.exit_code != 0 and "'off'" in str(res.exception)
