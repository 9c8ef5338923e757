"""``ebb sweep --workers``: capped by CPUs and memory with a message; a rerun job says so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.cli.sweep import _progress
from ebb.sim.sweep import JobOutcome, SweepJob
from ebb.sim.sweep_backends import cap_workers, usable_cpus


def test_an_oversized_workers_request_is_lowered_with_a_message(tmp_path: Path) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text("scenarios: [azure-conv]\npolicies: [static]\nknobs: {minutes: 1, peak_replicas: 2}\n")
    res = CliRunner().invoke(app, ["sweep", str(spec), "--workers", "10000", "--out", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    capped, why = cap_workers(10000)
    assert capped <= usable_cpus() and why is not None
    assert f"sweep: --workers 10000 lowered to {capped}: " in res.stderr and "docs/sweep.md" in res.stderr
    # the pool then runs the capped number (no more than the 1 job needs)
    assert re.search(r"1 job on \d+ worker processes", res.stderr), res.stderr
    assert "[1/1]" in res.stderr


def test_help_states_the_cap_formula() -> None:
    res = CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "300"})
    assert res.exit_code == 0
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", res.stdout).split())
    assert "Capped at min(usable CPUs, floor(0.8 x MemAvailable / 256 MiB)), at least 1" in text


def test_a_job_rerun_after_its_worker_died_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    job = SweepJob("azure-conv", "trace", "static", (), 0, "auto", "bundled:azure-conv")
    on_done = _progress(2)
    on_done(JobOutcome(job, {"gpu_hours": 1.0}, None, 1.5, attempts=2))
    on_done(JobOutcome(job, {"gpu_hours": 1.0}, None, 1.5))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("ok in 1.5 s (static); run 2 times: its worker process died")
    assert lines[1].endswith("ok in 1.5 s (static)")
