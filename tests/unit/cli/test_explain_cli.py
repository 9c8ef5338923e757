"""`ebb explain` end to end against an SQLite ledger written by the test."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.explain import format_time, format_ts, latest_run, nearest_ids
from ebb.cli.main import app
from ebb.ledger import SqliteLedger
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.testing.mounts import MountUnavailable, read_only_copy

runner = CliRunner()
T0 = 1_714_564_800_000_000_000  # 2024-05-01T12:00:00Z


def _ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    first = DecisionRecord(
        DecisionId("dec-001"), CycleId("cyc-1"), RunId("run-a"), T0, "chat", "scale_down", 4, 3,
        reasons=("p99 TTFT 120 ms is far under the 400 ms SLO", "in-flight p99 low for 10 min"),
        signals={"p99_ttft_ms": 120.5, "inflight_p99": 3.0, "util": 0.21}, weights={"latency": 0.7, "cost": 0.3},
        victims=("chat-7f9c",), plan={"canary": True, "steps": [{"remove": 1}]},
    )
    held = DecisionRecord(DecisionId("dec-002"), CycleId("cyc-1"), RunId("run-a"), T0, "code", "veto", 2, 2,
                          reasons=("burst detected",), vetoes=("pdb:minAvailable=2",))
    follow = DecisionRecord(DecisionId("dec-101"), CycleId("cyc-2"), RunId("run-a"), T0 + 60_000_000_000, "chat",
                            "scale_down", 3, 2, reasons=("canary passed",), caused_by=(DecisionId("dec-001"),))
    other_run = DecisionRecord(DecisionId("x-1"), CycleId("cyc-9"), RunId("run-b"), T0 + 5, "embed", "hold", 1, 1,
                               caused_by=(DecisionId("gone-7"),))
    with SqliteLedger(path) as led:
        led.append_cycle(CycleRecord(CycleId("cyc-1"), RunId("run-a"), T0, "ebb:slo=400", (first, held),
                                     {"replicas": {"chat": 4, "code": 2}}, fencing_token=3))
        led.append_cycle(CycleRecord(CycleId("cyc-2"), RunId("run-a"), T0 + 60_000_000_000, "ebb:slo=400",
                                     (follow,), {"replicas": {"chat": 3}}))
        led.append_cycle(CycleRecord(CycleId("cyc-9"), RunId("run-b"), T0 + 5, "hpa", (other_run,)))
    return path


def test_explain_prints_time_action_reasons_signals_plan_and_causal_children(tmp_path: Path) -> None:
    r = runner.invoke(app, ["explain", "dec-001", "--ledger", str(_ledger(tmp_path))])
    assert r.exit_code == 0, r.output
    out = r.output
    assert "2024-05-01T12:00:00.000000000Z" in out and "ebb:slo=400" in out
    assert "target      chat" in out and "scale_down  4 → 3 replicas" in out
    assert "p99 TTFT 120 ms is far under the 400 ms SLO" in out
    assert "p99_ttft_ms" in out and "120.5" in out and "util" in out and "0.21" in out
    assert "latency = 0.7" in out and "victims     chat-7f9c" in out and '"canary": true' in out
    assert "(nothing: a root decision)" in out
    assert "dec-101  scale_down chat 3→2  (cycle cyc-2)" in out.split("led to")[1]


def test_explain_shows_vetoes_and_names_parents_missing_from_the_ledger(tmp_path: Path) -> None:
    path = str(_ledger(tmp_path))
    vetoed = runner.invoke(app, ["explain", "dec-002", "--ledger", path])
    assert vetoed.exit_code == 0 and "vetoes      pdb:minAvailable=2" in vetoed.output
    orphan = runner.invoke(app, ["explain", "x-1", "--ledger", path])
    assert orphan.exit_code == 0 and "gone-7  (not in this ledger)" in orphan.output


def test_explain_json_round_trips_the_decision_and_lists_parents_and_children(tmp_path: Path) -> None:
    path = str(_ledger(tmp_path))
    r = runner.invoke(app, ["explain", "dec-101", "--ledger", path, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert DecisionRecord.from_dict(data["decision"]).to_replicas == 2
    assert data["cycle"]["cycle_id"] == "cyc-2" and data["cycle"]["snapshot"] == {"replicas": {"chat": 3}}
    assert data["parents"] == [{"decision_id": "dec-001", "found": True, "cycle_id": "cyc-1", "ts_ns": T0,
                                "target": "chat", "action": "scale_down", "from_replicas": 4, "to_replicas": 3}]
    assert data["children"] == []


def test_an_unknown_id_exits_2_listing_the_nearest_ids_and_how_to_list_them(tmp_path: Path) -> None:
    path = str(_ledger(tmp_path))
    r = runner.invoke(app, ["explain", "dec-00", "--ledger", path])
    assert r.exit_code == 2
    assert "no decision 'dec-00'" in r.output and "dec-001, dec-002" in r.output
    assert f"ebb explain --list --ledger {path}" in r.output
    typo = runner.invoke(app, ["explain", "dec-1x", "--ledger", path])
    assert typo.exit_code == 2 and "Nearest ids: dec-101" in typo.output


def test_list_shows_the_latest_runs_recent_decisions_with_their_policy_or_every_run_on_request(
        tmp_path: Path) -> None:
    path = str(_ledger(tmp_path))
    r = runner.invoke(app, ["explain", "--list", "--ledger", path])
    assert r.exit_code == 0, r.output
    assert "(run run-a; 1 other run: --run RUN or --run all)" in r.output
    assert r.output.index("dec-001") < r.output.index("dec-101") and "x-1" not in r.output
    assert "policy" in r.output.splitlines()[1] and "ebb:slo=400" in r.output
    every = runner.invoke(app, ["explain", "--list", "--run", "all", "--ledger", path])
    assert every.output.index("dec-001") < every.output.index("x-1") < every.output.index("dec-101")
    assert "(2 runs)" in every.output and "hpa" in every.output
    only_b = runner.invoke(app, ["explain", "--list", "--run", "run-b", "--ledger", path])
    assert "x-1" in only_b.output and "dec-001" not in only_b.output
    last = runner.invoke(app, ["explain", "--list", "--limit", "1", "--json", "--ledger", path])
    assert [d["decision_id"] for d in json.loads(last.output)] == ["dec-101"]


def test_a_missing_ledger_file_exits_2_naming_the_path_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nope.sqlite"
    r = runner.invoke(app, ["explain", "dec-001", "--ledger", str(missing)])
    assert r.exit_code == 2 and "nope.sqlite" in r.output
    assert not missing.exists()


def test_explain_without_an_id_or_list_is_a_usage_error(tmp_path: Path) -> None:
    r = runner.invoke(app, ["explain", "--ledger", str(_ledger(tmp_path))])
    assert r.exit_code == 2 and "--list" in r.output


def test_nearest_ids_prefers_prefix_matches_then_the_longest_shared_prefix() -> None:
    known = ["abc-1", "abc-2", "abd-1", "zzz"]
    assert nearest_ids("abc", known) == ["abc-1", "abc-2"]
    assert nearest_ids("abx", known) == ["abc-1", "abc-2", "abd-1"]
    assert nearest_ids("q", known) == []
    assert format_ts(1_500_000_000) == "1970-01-01T00:00:01.500000000Z"


# -- hostile and read-only ledgers (issue 12: M5, L3) ---------------------------------------------------


def _damage(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA ignore_check_constraints=ON")
    conn.execute(sql)
    conn.commit()
    conn.close()


def test_list_on_a_ledger_with_a_malformed_row_shows_the_rest_and_one_warning_line(tmp_path: Path) -> None:
    """sqlite_corrupt.py: before, `negative_to` made `ebb explain --list` exit 1 with a traceback."""
    path = _ledger(tmp_path)
    _damage(path, "UPDATE decisions SET to_replicas = -3 WHERE decision_id = 'dec-002'")
    r = runner.invoke(app, ["explain", "--list", "--ledger", str(path)])
    assert r.exit_code == 0, r.output
    assert "dec-001" in r.stdout and "dec-101" in r.stdout and "dec-002" not in r.stdout
    warning = r.stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("warning: skipped 1 malformed row")
    assert "dec-002" in warning[0] and "to_replicas = -3" in warning[0] and "Traceback" not in r.output


def test_explaining_the_malformed_decision_itself_exits_2_with_one_line(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    _damage(path, "UPDATE decisions SET action = 'explode' WHERE decision_id = 'dec-002'")
    r = runner.invoke(app, ["explain", "dec-002", "--ledger", str(path)])
    assert r.exit_code == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "dec-002" in lines[0] and "explode" in lines[0] and str(path) in lines[0]


def test_a_decision_whose_cycle_row_is_malformed_is_still_explained_with_a_warning(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    _damage(path, "UPDATE cycles SET snapshot = '[]' WHERE cycle_id = 'cyc-1'")
    r = runner.invoke(app, ["explain", "dec-001", "--ledger", str(path)])
    assert r.exit_code == 0 and "decision dec-001" in r.stdout and "scale_down  4 → 3" in r.stdout
    assert r.stderr.count("\n") == 1 and "cyc-1" in r.stderr and "snapshot must be a JSON object" in r.stderr


@pytest.fixture
def read_only_ledger(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "src").mkdir()
    path = _ledger(tmp_path / "src")
    try:
        with read_only_copy([path], tmp_path / "ro") as folder:
            yield folder / path.name
    except MountUnavailable as exc:
        pytest.skip(str(exc))


def test_explain_reads_a_ledger_on_a_read_only_filesystem(read_only_ledger: Path) -> None:
    """Recipe R: before, `unable to open database file`, exit 2."""
    listed = runner.invoke(app, ["explain", "--list", "--ledger", str(read_only_ledger)])
    assert listed.exit_code == 0, listed.output
    assert "3 most recent of 3 decisions" in listed.stdout  # the latest run's (run-a)
    one = runner.invoke(app, ["explain", "dec-101", "--ledger", str(read_only_ledger)])
    assert one.exit_code == 0 and "canary passed" in one.stdout


def test_a_trace_clock_stamp_reads_as_time_from_the_trace_start_and_a_wall_stamp_as_utc() -> None:
    assert format_time(0) == "trace +0:00:00.000"
    assert format_time(3_723_500_000_000) == "trace +1:02:03.500"
    assert format_time((2 * 86_400 + 5) * 1_000_000_000) == "trace +2 d 0:00:05.000"
    assert format_time(T0) == "2024-05-01T12:00:00.000000000Z"


def test_the_latest_run_is_the_one_recorded_last_whatever_its_trace_clock_says() -> None:
    def cyc(run: str, ts_ns: int, recorded: int | None) -> CycleRecord:
        snap = {} if recorded is None else {"recorded_unix_ns": recorded}
        return CycleRecord(CycleId(f"{run}-{ts_ns}"), RunId(run), ts_ns, "ebb", (), snap)

    # Two simulated runs (trace clock from 0): the second was recorded later, though its trace is shorter.
    older, newer = cyc("r-old", 9_000_000_000_000, T0), cyc("r-new", 5_000_000_000, T0 + 1)
    assert latest_run([older, newer]) == latest_run([newer, older]) == "r-new"
    # A live run (wall clock) recorded after both.
    assert latest_run([older, cyc("live", T0 + 10, None), newer]) == "live"
    assert latest_run([]) is None


def test_explain_shows_the_drains_of_a_decisions_victims_and_lists_a_runs_drains(tmp_path: Path) -> None:
    from ebb.model.drains import DrainEnd, DrainStart, DrainStep, drain_cycle

    path = _ledger(tmp_path)
    t = T0 + 1_000_000_000
    drains = [DrainStart(t, t, "chat", "chat-7f9c", "dec-001", "sleep", 120.0),
              DrainStep(t + 200_000_000, t, "chat", "chat-7f9c", "dec-001", 2, 0.2),
              DrainEnd(t + 1_050_000_000, t, "chat", "chat-7f9c", "dec-001", "drained", "slept", 0, 1.05,
                       "sleep level 1"),
              DrainStart(t + 5, t + 5, "chat", "chat-other", "dec-101", "release", 30.0)]
    with SqliteLedger(path) as led:
        for e in drains:
            led.append_cycle(drain_cycle(e, RunId("run-a")))
        led.append_cycle(CycleRecord(CycleId("run-a-drain-bad"), RunId("run-a"), t, "actuator", (),
                                     {"drain": {"v": 1, "kind": "step"}}))
    r = runner.invoke(app, ["explain", "dec-001", "--ledger", str(path)])
    assert r.exit_code == 0, r.output
    block = r.output.split("  drains\n")[1]
    assert "chat-7f9c  drain from 2024-05-01T12:00:01.000000000Z  (decision dec-001)  reason sleep, budget 120 s" \
        in block
    assert "+0.20 s   2 in flight" in block and "+1.05 s   end: drained to zero → slept  (sleep level 1)" in block
    assert "chat-other" not in block  # another decision's drain
    assert "skipped 1 malformed" in r.stderr and "run-a-drain-bad" in r.stderr
    j = runner.invoke(app, ["explain", "dec-001", "--ledger", str(path), "--json"])
    assert [d["kind"] for d in json.loads(j.stdout)["drains"]] == ["start", "step", "end"]
    listed = runner.invoke(app, ["explain", "--drains", "--run", "run-a", "--ledger", str(path)])
    assert listed.exit_code == 0, listed.output
    assert "2 most recent of 2 drains" in listed.stdout and "chat-other" in listed.stdout
    assert "still draining, or its end was not recorded" in listed.stdout
    none = runner.invoke(app, ["explain", "--drains", "--run", "run-b", "--ledger", str(path)])
    assert none.exit_code == 0 and "no drains (run run-b)" in none.stdout
