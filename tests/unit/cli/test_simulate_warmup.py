"""``ebb simulate --warmup-s``: the scorecard says it was used, bad values are one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from ebb.cli.main import app

CLUSTER = """
name: one-service
duration_s: 600
warmup_s: 120
zones: {a: 8, b: 8}
services:
  - {name: code, namespace: shop, class: order-fulfilment, arrivals: {bundled: azure-code},
     capacity_rps: 3, service_ms: 500, slo_ms: 2000, max_replicas: 8, cold_start_s: 30}
"""


def _ebb(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd, check=False)


def _counts(tmp_path: Path) -> Path:
    counts = tmp_path / "counts.txt"
    counts.write_text("# bin_s=1\n" + "\n".join(str(3 + (i // 60) % 4) for i in range(600)) + "\n")
    return counts


def test_the_json_the_table_and_the_report_say_a_warm_up_was_used(tmp_path: Path) -> None:
    out, rep = tmp_path / "s.json", tmp_path / "r.html"
    res = CliRunner().invoke(app, ["simulate", "--trace", str(_counts(tmp_path)), "--peak-replicas", "4", "--quiet",
                                   "--policy", "static,oracle", "--warmup-s", "150", "--json", str(out),
                                   "--report", str(rep)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert [c["warmup_s"] for c in json.loads(out.read_text())] == [150.0, 150.0]
    assert "first 2 min 30 s warm-up, not scored" in res.output
    assert "first 150 s fed every policy but are not scored" in rep.read_text()


def test_print_config_shows_the_warm_up_under_model(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["simulate", "--warmup-s", "90", "--print-config"])
    assert res.exit_code == 0, res.output
    assert "warmup_s: 90.0" in res.output.split("model:")[1].split("fault:")[0]


def test_a_negative_warm_up_is_one_line_naming_the_flag_and_exit_2() -> None:
    res = _ebb("simulate", "--warmup-s", "-5", "--quiet")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and "--warmup-s -5.0" in line and "fix:" in line


def test_a_warm_up_as_long_as_the_trace_is_one_line_naming_the_flag_and_exit_2(tmp_path: Path) -> None:
    res = _ebb("simulate", "--trace", str(_counts(tmp_path)), "--warmup-s", "600", "--policy", "static", "--quiet")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--warmup-s 600: the trace lasts 600 s" in res.stderr and "fix: a --warmup-s below 600" in res.stderr


def test_a_cluster_scenario_s_warm_up_is_scored_after_and_the_flag_replaces_it(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CLUSTER, encoding="utf-8")
    res = _ebb("simulate", "--cluster", "c.yaml", "--policy", "hpa:target=0.7", "--json", "a.json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "first 120 s warm-up, not scored" in res.stdout
    res = _ebb("simulate", "--cluster", "c.yaml", "--policy", "hpa:target=0.7", "--warmup-s", "300", "--json",
               "b.json", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    scenario, flag = (json.loads((tmp_path / f).read_text())["runs"][0] for f in ("a.json", "b.json"))
    assert (scenario["warmup_s"], flag["warmup_s"]) == (120, 300)
    assert flag["per_service"][0]["requests"] < scenario["per_service"][0]["requests"]
    res = _ebb("simulate", "--cluster", "c.yaml", "--warmup-s", "600", "--quiet", cwd=tmp_path)
    assert res.returncode == 2 and "--warmup-s 600: the trace lasts 600 s" in res.stderr
