"""One L2 → L3 cycle over a snapshot: the budget in rank order within each PDB, quota reclaim, pending verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.config.workloads import default_workload_classes
from ebb.errors import ConfigError
from ebb.sim.snapshot import ClusterSnapshot, load_snapshot
from ebb.sim.snapshot_plan import SnapshotPlan, plan_snapshot

CLASSES = default_workload_classes()

FLEET = (Path(__file__).resolve().parents[2] / "data" / "plan" / "three-workloads.yaml").read_text()

PENDING = (Path(__file__).resolve().parents[2] / "data" / "plan" / "pending-quota.yaml").read_text()


def _snapshot(tmp_path: Path, text: str) -> ClusterSnapshot:
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    return load_snapshot(f, CLASSES)


def _plan(tmp_path: Path, text: str) -> SnapshotPlan:
    return plan_snapshot(_snapshot(tmp_path, text), CLASSES)


def test_the_budget_goes_in_rank_order_within_each_pdb_and_unknown_signals_veto(tmp_path: Path) -> None:
    cycle = _plan(tmp_path, FLEET)
    assert [g.workload for g in cycle.cluster.grants] == ["trainer", "recs", "chat"]
    # trainer ranks first (weight 0.10): the not-ready tr-1 (zone b) goes first; the least loaded
    # tr-3 (also b) would leave a=2, b=0 (skew 2 > maxSkew 1), so tr-0 (zone a) goes next.
    assert cycle.victims["trainer"].victim_ids == ("tr-1", "tr-0")
    # recs (weight 0.25) ranks before chat (0.65) but is vetoed, so chat gets the last unit of
    # budget, which its PDB (maxUnavailable 1) also allows; chat-1 is least loaded but the only
    # replica in zone b, so chat-0 goes to keep the skew within 1.
    assert cycle.victims["chat"].victim_ids == ("chat-0",)
    # recs has no signals in the snapshot: unknown P95 and staleness veto it (fail safe).
    assert cycle.victims["recs"].granted == 0 and cycle.ranks["recs"].startswith("vetoed")
    granted = [v.granted for v in cycle.victims.values()]
    assert sum(granted) == 3 <= cycle.cluster.budget and cycle.pending == ()


def test_every_workload_gets_at_most_its_ask_and_as_many_victims_as_granted(tmp_path: Path) -> None:
    for budget in range(0, 7):
        cycle = _plan(tmp_path, FLEET.replace("budget: 3", f"budget: {budget}"))
        assert sum(v.granted for v in cycle.victims.values()) <= budget
        for g in cycle.cluster.grants:
            v = cycle.victims[g.workload]
            assert v.granted <= g.granted <= g.requested and len(v.victims) == v.granted


def test_quota_reclaims_the_borrower_first_without_changing_the_count(tmp_path: Path) -> None:
    fleet = PENDING.split("pending:")[0].replace(
        "requests: {nvidia.com/gpu: 1000}}\n  - {name: chat-1",
        "priority: 10, created_s: 1, requests: {nvidia.com/gpu: 1000}}\n  - {name: chat-1")
    without = _plan(tmp_path, fleet.split("quotas:")[0]).victims["chat"]
    with_quota = _plan(tmp_path, fleet).victims["chat"]
    assert without.victim_ids == ("chat-0",)  # least loaded
    # chat-1 (priority 0) does not fit under min once chat-0 (priority 10) holds it: it borrows.
    assert with_quota.victim_ids == ("chat-1",) and with_quota.reclaimed == ("chat-1",)
    assert with_quota.granted == without.granted == 1


def test_pending_pods_get_a_quota_verdict_after_the_cycles_victims_leave(tmp_path: Path) -> None:
    verdicts = {a.pod: a for a in _plan(tmp_path, PENDING).pending}
    # One of two GPUs leaves this cycle: 1000 in use, min 1000, max 2000.
    g, g2, b = verdicts["new-g"], verdicts["new-g2"], verdicts["new-b"]
    assert (g.qos, g.verdict) == ("Guaranteed", "borrowing") and "2000 > min 1000" in g.reason
    # new-g took the elastic share up to max: the next Guaranteed pod hits the hard cap.
    assert g2.verdict == "refused" and "hard cap" in g2.reason
    # listed first, a Burstable pod may not borrow (default quota_policy) though max has room
    assert (b.qos, b.verdict) == ("Burstable", "refused") and "only within min" in b.reason
    assert verdicts["other"].verdict == "admitted" and "no quota" in verdicts["other"].reason
    # without the cycle's removal, 2000 of 2000 are in use: the first pod is refused too
    assert _plan(tmp_path, PENDING.replace("remove: 1", "remove: 0")).pending[0].verdict == "refused"


def test_the_quota_policy_can_let_burstable_pods_borrow(tmp_path: Path) -> None:
    text = PENDING + "quota_policy: {burstable_may_borrow: true, guaranteed_may_borrow: false}\n"
    verdicts = {a.pod: a.verdict for a in _plan(tmp_path, text).pending}
    assert verdicts == {"new-g": "refused", "new-g2": "refused", "new-b": "borrowing", "other": "admitted"}


@pytest.mark.parametrize("quota, why", [
    ("{namespace: serving, min: {nvidia.com/gpu: 3000}, max: {nvidia.com/gpu: 2000}}", "exceeds"),
    ("{namespace: serving, min: {disk: 1}}", "unknown resource 'disk'"),
])
def test_a_quota_the_quota_model_refuses_names_its_key_path(tmp_path: Path, quota: str, why: str) -> None:
    text = PENDING.replace("{namespace: serving, min: {nvidia.com/gpu: 1000}, max: {nvidia.com/gpu: 2000}}", quota)
    with pytest.raises(ConfigError) as exc:
        _plan(tmp_path, text)
    assert f"{tmp_path / 'fleet.yaml'}: quotas[0]:" in str(exc.value) and why in str(exc.value)
    assert "fix: list only cpu, memory, nvidia.com/gpu with min <= max" in str(exc.value)
