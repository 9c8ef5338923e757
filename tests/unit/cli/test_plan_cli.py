"""``ebb plan``: a cluster snapshot in, the L2 rank, the L3 budget split and the victims out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import ConfigError

FLEET = """\
budget: 3
workloads:
  - name: chat
    class: order-fulfilment
    namespace: serving
    remove: 2
    pdb: {max_unavailable: 1}
    signals: {latency_p99_ms: 310, success_ratio: 0.9999, staleness_s: 0.5}
    replicas:
      - {id: chat-0, zone: a, load: 0.2}
      - {id: chat-1, zone: b, load: 0.1}
      - {id: chat-2, zone: a, load: 0.7}
  - name: trainer
    class: offline-training
    namespace: batch
    remove: 2
    signals: {utilisation_ratio: 0.2, staleness_s: 0.5}
    replicas:
      - {id: tr-0, zone: a, load: 0.3}
      - {id: tr-1, zone: b, load: 0.1, ready: false}
      - {id: tr-2, zone: a, load: 0.5}
      - {id: tr-3, zone: b, load: 0.2}
  - name: recs
    class: realtime-recommendation
    remove: 1
    replicas:
      - {id: recs-0, zone: a, load: 0.1}
      - {id: recs-1, zone: b, load: 0.1}
"""


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


def test_the_budget_goes_in_rank_order_within_each_pdb_and_unknown_signals_veto(tmp_path: Path) -> None:
    out = _plan(tmp_path, FLEET)
    rows = _rows(out)
    assert [r["workload"] for r in out["workloads"]] == ["trainer", "recs", "chat"]  # type: ignore[attr-defined]
    # trainer ranks first (weight 0.10): the not-ready tr-1 (zone b) goes first; the least loaded
    # tr-3 (also b) would leave a=2, b=0 (skew 2 > maxSkew 1), so tr-0 (zone a) goes next.
    assert rows["trainer"]["granted"] == 2 and rows["trainer"]["victims"] == ["tr-1", "tr-0"]
    # recs (weight 0.25) ranks before chat (0.65) but is vetoed, so chat gets the last unit of
    # budget, which its PDB (maxUnavailable 1) also allows; chat-1 is least loaded but the only
    # replica in zone b, so chat-0 goes to keep the skew within 1.
    assert rows["chat"]["granted"] == 1 and rows["chat"]["victims"] == ["chat-0"]
    # recs has no signals in the snapshot: unknown P95 and staleness veto it (fail safe).
    assert rows["recs"]["granted"] == 0 and str(rows["recs"]["rank"]).startswith("vetoed")
    assert out["granted"] == 3 <= out["budget"]  # type: ignore[operator]


def test_quota_reclaims_the_borrower_first_without_changing_the_count(tmp_path: Path) -> None:
    fleet = """\
budget: 1
workloads:
  - name: chat
    class: order-fulfilment
    namespace: serving
    remove: 1
    signals: {latency_p99_ms: 100, success_ratio: 1.0, staleness_s: 0.1}
    replicas:
      - {id: chat-0, zone: a, load: 0.1}
      - {id: chat-1, zone: a, load: 0.9}
quotas:
  - {namespace: serving, min: {nvidia.com/gpu: 1000}, max: {nvidia.com/gpu: 2000}}
pods:
  - {name: chat-0, namespace: serving, priority: 10, created_s: 1,
     requests: {nvidia.com/gpu: 1000, cpu: 1000, memory: 1000}, limits: {cpu: 1000, memory: 1000}}
  - {name: chat-1, namespace: serving, priority: 0, created_s: 2,
     requests: {nvidia.com/gpu: 1000, cpu: 1000, memory: 1000}, limits: {cpu: 1000, memory: 1000}}
"""
    without = _rows(_plan(tmp_path, fleet.split("quotas:")[0]))["chat"]
    with_quota = _rows(_plan(tmp_path, fleet))["chat"]
    assert without["victims"] == ["chat-0"]  # least loaded
    # chat-1 (priority 0) does not fit under min once chat-0 (priority 10) holds it: it borrows.
    assert with_quota["victims"] == ["chat-1"] and with_quota["reclaimed"] == ["chat-1"]
    assert with_quota["granted"] == without["granted"] == 1


def test_the_table_names_victims_and_why(tmp_path: Path) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text(FLEET)
    res = CliRunner().invoke(app, ["plan", str(f)])
    assert res.exit_code == 0, res.output
    assert "3 of 3 removal(s)" in res.output and "tr-1" in res.output and "vetoed" in res.output


def test_a_bad_snapshot_names_the_key_path_and_the_fix(tmp_path: Path) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text(FLEET.replace("class: offline-training", "class: training"))
    res = CliRunner().invoke(app, ["plan", str(f)])
    assert isinstance(res.exception, ConfigError)
    assert "workloads[1].class" in str(res.exception) and "--workloads" in str(res.exception)
    f.write_text(FLEET.replace("{id: tr-0, zone: a, load: 0.3}", "{id: tr-0, load: 0.3}"))
    res = CliRunner().invoke(app, ["plan", str(f)])
    assert isinstance(res.exception, ConfigError) and "workloads[1].replicas[0].zone: missing" in str(res.exception)


def test_quota_without_a_pod_per_replica_exits_2_on_one_line(tmp_path: Path) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text(FLEET + "quotas:\n  - {namespace: serving, min: {cpu: 1000}}\n")
    res = subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", "plan", str(f)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "no pod 'chat-0'" in res.stderr and "fix:" in res.stderr


PENDING = """\
budget: 1
workloads:
  - name: chat
    class: order-fulfilment
    namespace: serving
    remove: 1
    signals: {latency_p99_ms: 100, success_ratio: 1.0, staleness_s: 0.1}
    replicas:
      - {id: chat-0, zone: a, load: 0.1}
      - {id: chat-1, zone: a, load: 0.9}
quotas:
  - {namespace: serving, min: {nvidia.com/gpu: 1000}, max: {nvidia.com/gpu: 2000}}
pods:
  - {name: chat-0, namespace: serving, requests: {nvidia.com/gpu: 1000}}
  - {name: chat-1, namespace: serving, requests: {nvidia.com/gpu: 1000}}
pending:
  - {name: new-b, namespace: serving, requests: {nvidia.com/gpu: 1000, cpu: 500}}
  - {name: new-g, namespace: serving, requests: {nvidia.com/gpu: 1000, cpu: 1000, memory: 1000},
     limits: {nvidia.com/gpu: 1000, cpu: 1000, memory: 1000}}
  - {name: new-g2, namespace: serving, requests: {nvidia.com/gpu: 1000, cpu: 1000, memory: 1000},
     limits: {nvidia.com/gpu: 1000, cpu: 1000, memory: 1000}}
  - {name: other, namespace: elsewhere, requests: {nvidia.com/gpu: 8000}}
"""


def test_pending_pods_get_a_quota_verdict_after_the_cycles_victims_leave(tmp_path: Path) -> None:
    out = _plan(tmp_path, PENDING)
    verdicts = {a["pod"]: a for a in out["pending"]}  # type: ignore[attr-defined]
    # One of two GPUs leaves this cycle: 1000 in use, min 1000, max 2000.
    g, g2, b = verdicts["new-g"], verdicts["new-g2"], verdicts["new-b"]
    assert (g["qos"], g["verdict"]) == ("Guaranteed", "borrowing") and "2000 > min 1000" in g["reason"]
    # new-g took the elastic share up to max: the next Guaranteed pod hits the hard cap.
    assert g2["verdict"] == "refused" and "hard cap" in g2["reason"]
    # listed first, a Burstable pod may not borrow (default quota_policy) though max has room
    assert (b["qos"], b["verdict"]) == ("Burstable", "refused") and "only within min" in b["reason"]
    assert verdicts["other"]["verdict"] == "admitted" and "no quota" in verdicts["other"]["reason"]
    # without the cycle's removal, 2000 of 2000 are in use: the first pod is refused too
    assert _plan(tmp_path, PENDING.replace("remove: 1", "remove: 0"))["pending"][0]["verdict"] == "refused"  # type: ignore[index]


def test_quota_policy_can_let_burstable_pods_borrow_and_the_table_shows_verdicts(tmp_path: Path) -> None:
    text = PENDING + "quota_policy: {burstable_may_borrow: true, guaranteed_may_borrow: false}\n"
    verdicts = {a["pod"]: a["verdict"] for a in _plan(tmp_path, text)["pending"]}  # type: ignore[attr-defined]
    assert verdicts == {"new-g": "refused", "new-g2": "refused", "new-b": "borrowing", "other": "admitted"}
    f = tmp_path / "fleet.yaml"
    f.write_text(PENDING)
    res = CliRunner().invoke(app, ["plan", str(f)])
    assert res.exit_code == 0, res.output
    assert "4 pending pod(s)" in res.output and "borrowing" in res.output and "refused" in res.output


def test_without_pending_pods_the_json_lists_none(tmp_path: Path) -> None:
    assert _plan(tmp_path, FLEET)["pending"] == []


def test_bad_pending_entries_name_the_key_path(tmp_path: Path) -> None:
    f = tmp_path / "fleet.yaml"
    for text, where in (
        (FLEET + "pending:\n  - {name: x}\n", "pending: pending pods without quotas"),
        (PENDING.replace("name: new-b", "name: chat-0"), "pending[0].name"),
        (PENDING + "quota_policy: {burstable_may_borrow: 1}\n", "quota_policy.burstable_may_borrow"),
        (PENDING + "quota_policy: {bursty: true}\n", "quota_policy.bursty: unknown key"),
        (FLEET + "quota_policy: {}\n", "quota_policy: quota_policy without quotas"),
    ):
        f.write_text(text)
        res = CliRunner().invoke(app, ["plan", str(f)])
        assert isinstance(res.exception, ConfigError), res.output
        assert where in str(res.exception)


def test_the_shipped_example_snapshot_plans_a_cycle() -> None:
    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "fleet.yaml"
    res = CliRunner().invoke(app, ["plan", str(example), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["granted"] == 3
    assert {w["workload"]: w["victims"] for w in out["workloads"]} == {
        "trainer": ["tr-1", "tr-0"], "recs": [], "chat": ["chat-0"]}
