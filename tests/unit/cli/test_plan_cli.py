"""``ebb plan``: the cycle's plan as a table or JSON; a bad snapshot exits 2 on one line.

The format is tested in tests/unit/sim/test_snapshot.py, the cycle in tests/unit/sim/test_snapshot_plan.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import ConfigError

FLEET = (Path(__file__).resolve().parents[2] / "data" / "plan" / "three-workloads.yaml").read_text()


def _plan(tmp_path: Path, text: str, *extra: str) -> dict[str, object]:
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    res = CliRunner().invoke(app, ["plan", str(f), "--json", *extra])
    assert res.exit_code == 0, res.output
    out: dict[str, object] = json.loads(res.output)
    return out


def _rows(out: dict[str, object]) -> dict[str, dict[str, object]]:
    rows = out["workloads"]
    assert isinstance(rows, list)
    return {r["workload"]: r for r in rows}


def test_the_json_plan_has_a_row_per_workload_in_rank_order_with_grants_and_victims(tmp_path: Path) -> None:
    out = _plan(tmp_path, FLEET)
    rows = _rows(out)
    assert [r["workload"] for r in out["workloads"]] == ["trainer", "recs", "chat"]  # type: ignore[attr-defined]
    assert rows["trainer"]["victims"] == ["tr-1", "tr-0"] and rows["chat"]["victims"] == ["chat-0"]
    assert str(rows["recs"]["rank"]).startswith("vetoed") and rows["recs"]["granted"] == 0
    assert set(rows["chat"]) == {"workload", "namespace", "requested", "granted", "cluster_grant", "victims",
                                 "reclaimed", "rank", "reason", "limits", "skew_before", "skew_after",
                                 "allowed_disruptions"}
    assert out["granted"] == 3 <= out["budget"] and out["pending"] == []  # type: ignore[operator]


def test_the_table_names_victims_and_why(tmp_path: Path) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text(FLEET)
    res = CliRunner().invoke(app, ["plan", str(f)])
    assert res.exit_code == 0, res.output
    assert "3 of 5 requested removals planned" in res.output and "tr-1" in res.output and "vetoed" in res.output


def test_fewer_removals_than_requested_say_which_workloads_got_fewer_and_why(tmp_path: Path) -> None:
    # #35: it said "3 of 3 removal(s) planned" when 5 were requested (3 was the cluster budget).
    f = tmp_path / "fleet.yaml"
    f.write_text(FLEET)
    res = CliRunner().invoke(app, ["plan", str(f)])
    assert res.exit_code == 0, res.output
    assert "3 of 5 requested removals planned in fleet.yaml (cluster budget 3 per cycle" in res.output
    assert "Fewer than requested: recs 0 of 1 (vetoed); chat 1 of 2 (cluster budget 3 per cycle)." in res.output
    f.write_text(FLEET.replace("budget: 3", "budget: 10"))  # the budget no longer binds: chat's PDB does
    res = CliRunner().invoke(app, ["plan", str(f)])
    assert "3 of 5 requested removals planned" in res.output
    assert "chat 1 of 2 (its own limits: pdb" in res.output and "cluster budget 10" not in res.output.split(
        "Fewer than requested")[1]
    assert _plan(tmp_path, FLEET)["requested"] == 5


def test_a_bad_snapshot_is_a_config_error_naming_the_key_path(tmp_path: Path) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text(FLEET.replace("class: offline-training", "class: training"))
    res = CliRunner().invoke(app, ["plan", str(f)])
    assert isinstance(res.exception, ConfigError)
    assert "workloads[1].class" in str(res.exception) and "--workloads" in str(res.exception)


def test_quota_without_a_pod_per_replica_exits_2_on_one_line(tmp_path: Path) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text(FLEET + "quotas:\n  - {namespace: serving, min: {cpu: 1000}}\n")
    res = subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", "plan", str(f)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "no pod 'chat-0'" in res.stderr and "fix:" in res.stderr


PENDING = (Path(__file__).resolve().parents[2] / "data" / "plan" / "pending-quota.yaml").read_text()


def test_pending_verdicts_are_listed_in_the_json_and_the_table(tmp_path: Path) -> None:
    verdicts = {a["pod"]: a for a in _plan(tmp_path, PENDING)["pending"]}  # type: ignore[attr-defined]
    assert [v["verdict"] for v in verdicts.values()] == ["refused", "borrowing", "refused", "admitted"]
    assert set(verdicts["new-g"]) == {"pod", "namespace", "qos", "verdict", "reason"}
    f = tmp_path / "fleet.yaml"
    f.write_text(PENDING)
    res = CliRunner().invoke(app, ["plan", str(f)])
    assert res.exit_code == 0, res.output
    assert "4 pending pods after this cycle" in res.output and "borrowing" in res.output and "refused" in res.output


def test_the_shipped_example_snapshot_plans_a_cycle() -> None:
    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "fleet.yaml"
    res = CliRunner().invoke(app, ["plan", str(example), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["granted"] == 3
    assert {w["workload"]: w["victims"] for w in out["workloads"]} == {
        "trainer": ["tr-1", "tr-0"], "recs": [], "chat": ["chat-0"]}


def test_an_oversized_snapshot_exits_2_on_one_line_naming_the_limit(tmp_path: Path) -> None:
    from ebb.sim.snapshot import MAX_SNAPSHOT_BYTES

    f = tmp_path / "fleet.yaml"
    f.write_text(FLEET + "#" * MAX_SNAPSHOT_BYTES)
    res = subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", "plan", str(f)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert f"over the {MAX_SNAPSHOT_BYTES:,}-byte limit" in res.stderr and "fix:" in res.stderr
