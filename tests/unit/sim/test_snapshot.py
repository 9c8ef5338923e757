"""Cluster snapshots parse once into dataclasses; every mistake names the file, the key path and the fix."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebb.config.workloads import default_workload_classes
from ebb.decide.quota import QoSClass
from ebb.errors import ConfigError
from ebb.sim.snapshot import load_snapshot
from ebb.sim.snapshot_plan import plan_snapshot

CLASSES = default_workload_classes()

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
  - name: trainer
    class: offline-training
    namespace: batch
    remove: 2
    signals: {utilisation_ratio: 0.2, staleness_s: 0.5}
    replicas:
      - {id: tr-0, zone: a, load: 0.3}
      - {id: tr-1, zone: b, ready: false}
"""

QUOTAS = """\
quotas:
  - {namespace: serving, min: {nvidia.com/gpu: 1000}, max: {nvidia.com/gpu: 2000}}
pods:
  - {name: chat-0, namespace: serving, requests: {nvidia.com/gpu: 1000}}
  - {name: chat-1, namespace: serving, requests: {nvidia.com/gpu: 1000}}
  - {name: tr-0, namespace: batch}
  - {name: tr-1, namespace: batch}
"""


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    return load_snapshot(f, CLASSES)


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, text)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "fleet.yaml")) and "fix:" in message
    return message


def test_a_snapshot_parses_with_defaults_and_left_out_signals_unknown(tmp_path: Path) -> None:
    snap = _load(tmp_path, FLEET)
    assert (snap.budget, snap.max_skew, snap.quotas, snap.pods, snap.pending) == (3, 1, None, (), ())
    chat, trainer = snap.workloads
    assert (chat.class_name, chat.namespace, chat.remove, chat.weight) == ("order-fulfilment", "serving", 2, None)
    assert (chat.pdb_max_unavailable, chat.pdb_min_available, chat.already_unavailable) == (1, None, 0)
    assert chat.signals.latency_p99_ms == 310 and math.isnan(chat.signals.latency_p95_ms)
    assert not chat.signals.burst_active and math.isnan(trainer.signals.latency_p99_ms)
    tr1 = trainer.replicas[1]
    assert (tr1.replica_id, tr1.workload, tr1.namespace, tr1.ready, tr1.deletion_cost) == ("tr-1", "trainer", "batch",
                                                                                           False, 0)
    assert math.isnan(tr1.load)  # left out: unknown
    assert [r.replica_id for r in snap.replicas] == ["chat-0", "chat-1", "tr-0", "tr-1"]


def test_quotas_pods_pending_and_the_quota_policy_are_read_as_written(tmp_path: Path) -> None:
    snap = _load(tmp_path, FLEET + QUOTAS + "pending:\n  - {name: new, namespace: serving, priority: 5, "
                 "requests: {cpu: 500}, limits: {cpu: 1000}}\nquota_policy: {burstable_may_borrow: true}\n")
    assert snap.quotas is not None and snap.quotas[0].namespace == "serving"
    assert dict(snap.quotas[0].max) == {"nvidia.com/gpu": 2000} and len(snap.pods) == 4
    new = snap.pending[0]
    # limits are read into the pod's QoS class: requests below limits is Burstable
    assert (new.name, new.priority, dict(new.requests), new.qos) == ("new", 5, {"cpu": 500}, QoSClass.BURSTABLE)
    assert dict(snap.quota_policy) == {"burstable_may_borrow": True}


@pytest.mark.parametrize("change, where", [
    (("class: offline-training", "class: training"), "workloads[1].class: unknown class 'training'"),
    (("{id: tr-0, zone: a, load: 0.3}", "{id: tr-0, load: 0.3}"), "workloads[1].replicas[0].zone: missing"),
    (("remove: 2\n    pdb", "remove: -1\n    pdb"), "workloads[0].remove: expected an integer >= 0"),
    (("pdb: {max_unavailable: 1}", "pdb: {max_unavailable: 1, min_available: 1}"), "workloads[0].pdb: sets both"),
    (("staleness_s: 0.5}\n    replicas:\n      - {id: chat-0", "staleness_s: .nan}\n    replicas:\n      - {id: chat-0"),
     "workloads[0].signals.staleness_s: expected a finite number"),
    (("id: tr-1", "id: chat-0"), "replica id 'chat-0' appears twice"),
    (("budget: 3", "budget: 3\nbudgte: 1"), "budgte: unknown key"),
    (("load: 0.2}", "load: 0.2, ready: yes-ish}"), "workloads[0].replicas[0].ready: expected true or false"),
])
def test_a_bad_snapshot_names_the_key_path_and_the_fix(tmp_path: Path, change: tuple[str, str], where: str) -> None:
    assert where in _error(tmp_path, FLEET.replace(*change))


def test_a_class_unknown_to_the_defaults_points_at_the_workloads_flag(tmp_path: Path) -> None:
    assert "--workloads" in _error(tmp_path, FLEET.replace("class: offline-training", "class: training"))


@pytest.mark.parametrize("text, where", [
    (FLEET + "pending:\n  - {name: x}\n", "pending: pending pods without quotas"),
    (FLEET + QUOTAS + "pending:\n  - {name: chat-0, namespace: serving}\n", "pending[0].name"),
    (FLEET + QUOTAS + "quota_policy: {burstable_may_borrow: 1}\n", "quota_policy.burstable_may_borrow"),
    (FLEET + QUOTAS + "quota_policy: {bursty: true}\n", "quota_policy.bursty: unknown key"),
    (FLEET + "quota_policy: {}\n", "quota_policy: quota_policy without quotas"),
    (FLEET + "pods: []\n", "pods: pods without quotas"),
    (FLEET + QUOTAS.replace("  - {name: tr-1, namespace: batch}\n", ""), "no pod 'tr-1' in namespace 'batch'"),
    (FLEET + QUOTAS.replace("{name: tr-1, namespace: batch}", "{name: tr-1, namespace: other}"), "no pod 'tr-1'"),
    (FLEET + QUOTAS + "  - {name: tr-1, namespace: batch}\n", "pods[4].name: second pod named 'tr-1'"),
    # before, an empty resource name was read, and the planner raised a bare ValueError on it
    (FLEET + QUOTAS.replace("requests: {nvidia.com/gpu: 1000}}", "requests: {'': 1000}}", 1),
     "pods[0].requests.'': empty resource name"),
])
def test_bad_quota_pod_and_pending_entries_name_the_key_path(tmp_path: Path, text: str, where: str) -> None:
    assert where in _error(tmp_path, text)


@pytest.mark.parametrize("change, where", [
    (("success_ratio: 0.9999", "success_ratio: 5"), "workloads[0].signals.success_ratio: expected a number >= 0 and <= 1"),
    (("staleness_s: 0.5}\n    replicas:\n      - {id: chat-0", "staleness_s: -1}\n    replicas:\n      - {id: chat-0"),
     "workloads[0].signals.staleness_s: expected a number >= 0"),
    (("latency_p99_ms: 310", "latency_p99_ms: -5"), "workloads[0].signals.latency_p99_ms: expected a number >= 0"),
    (("remove: 2\n    pdb", "remove: 2\n    weight: -1\n    pdb"), "workloads[0].weight: expected a number >= 0"),
    (("budget: 3", "budget: 3\nmax_skew: 0"), "max_skew: expected an integer >= 1"),
])
def test_a_value_the_planners_would_refuse_is_refused_when_read(tmp_path: Path, change: tuple[str, str],
                                                                where: str) -> None:
    """Before, a negative latency reached the planner (a ValueError at plan time) and a success ratio of 5
    or a negative staleness was planned over as if measured."""
    assert where in _error(tmp_path, FLEET.replace(*change))


_HOSTILE = st.sampled_from([-1, 0, 1, 2, 10**12, -(10**12), 0.5, -0.5, 1e308, ".nan", ".inf", "-.inf", "x", "''",
                            "true", "null", "[]", "{}"])
_SLOTS = ["budget: 3", "remove: 2", "max_unavailable: 1", "latency_p99_ms: 310", "success_ratio: 0.9999",
          "staleness_s: 0.5", "utilisation_ratio: 0.2", "load: 0.2", "load: 0.3", "zone: a", "id: tr-0",
          "class: offline-training", "namespace: serving", "nvidia.com/gpu: 1000", "nvidia.com/gpu: 2000"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.sampled_from(_SLOTS), _HOSTILE), min_size=1, max_size=3))
def test_a_snapshot_the_reader_accepts_is_one_the_planners_accept(tmp_path: Path,
                                                                 changes: list[tuple[str, object]]) -> None:
    """The reader is the one place a snapshot is checked: what it lets through plans without an error."""
    text = FLEET + QUOTAS
    for slot, value in changes:
        text = text.replace(slot, f"{slot.split(':')[0]}: {value}", 1)
    try:
        snap = _load(tmp_path, text)
    except ConfigError as exc:
        assert "\n" not in str(exc) and "fix:" in str(exc)
        return
    cycle = plan_snapshot(snap, CLASSES)
    assert sum(v.granted for v in cycle.victims.values()) <= snap.budget
