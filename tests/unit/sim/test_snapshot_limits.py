"""Snapshot sizes and ranges (issue 32, item 9): out-of-range values and oversized files are refused before the work."""

from __future__ import annotations

from pathlib import Path

import pytest

import ebb.sim.snapshot as snapshot
from ebb.config.workloads import default_workload_classes
from ebb.errors import ConfigError
from ebb.sim.snapshot import MAX_COUNT, MAX_SNAPSHOT_BYTES, MAX_SNAPSHOT_REPLICAS, load_snapshot

CLASSES = tuple(default_workload_classes())
GOOD = """budget: 3
workloads:
  - name: chat
    class: order-fulfilment
    remove: 2
    signals: {latency_p99_ms: 10, success_ratio: 1, burst_active: false, utilisation_ratio: 0.1, staleness_s: 0.1}
    replicas:
      - {id: c0, zone: a, load: 0.1}
      - {id: c1, zone: b, load: 0.1}
"""


def _refusal(tmp_path: Path, text: str) -> str:
    f = tmp_path / "snap.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_snapshot(f, CLASSES)
    assert "\n" not in str(err.value) and "fix:" in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(("old", "new", "key"), [
    ("budget: 3", "budget: 1000000000000000000", "budget"),
    ("remove: 2", "remove: 1000000000000000000", "workloads[0].remove"),
    ("remove: 2", "remove: 2\n    already_unavailable: 9000000000000000000", "workloads[0].already_unavailable"),
    ("remove: 2", "remove: 2\n    pdb: {max_unavailable: 9000000000000000000}", "workloads[0].pdb.max_unavailable"),
    ("remove: 2", "remove: 2\n    weight: 1.0e+308", "workloads[0].weight"),
    ("latency_p99_ms: 10", "latency_p99_ms: 1.0e+300", "workloads[0].signals.latency_p99_ms"),
    ("staleness_s: 0.1", "staleness_s: 1.0e+300", "workloads[0].signals.staleness_s"),
    ("{id: c0, zone: a, load: 0.1}", "{id: c0, zone: a, load: -1.0e+308}", "workloads[0].replicas[0].load"),
])
def test_each_out_of_range_value_is_refused_naming_its_key(tmp_path: Path, old: str, new: str, key: str) -> None:
    assert f"snap.yaml: {key}: expected" in _refusal(tmp_path, GOOD.replace(old, new))


def test_counts_up_to_the_bound_are_accepted(tmp_path: Path) -> None:
    f = tmp_path / "snap.yaml"
    f.write_text(GOOD.replace("budget: 3", f"budget: {MAX_COUNT}"))
    assert load_snapshot(f, CLASSES).budget == MAX_COUNT


def test_an_oversized_file_is_refused_from_its_size_before_it_is_read(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_: object) -> str:
        raise AssertionError("the file was read")

    monkeypatch.setattr(snapshot, "read_config_text", never)
    msg = _refusal(tmp_path, GOOD + "#" * MAX_SNAPSHOT_BYTES)
    assert f"over the {MAX_SNAPSHOT_BYTES:,}-byte limit" in msg and f"{MAX_SNAPSHOT_REPLICAS:,} replicas" in msg


def test_more_replicas_than_the_bound_are_refused_before_any_is_checked(tmp_path: Path) -> None:
    # Every replica lacks its zone: a per-replica check would name replicas[0]; the count comes first.
    reps = "".join(f"      - {{id: r{i}}}\n" for i in range(MAX_SNAPSHOT_REPLICAS + 1))
    text = GOOD.split("    replicas:\n")[0] + "    replicas:\n" + reps
    msg = _refusal(tmp_path, text)
    assert f"workloads: {MAX_SNAPSHOT_REPLICAS + 1:,} replicas in all, over the limit of {MAX_SNAPSHOT_REPLICAS:,}" in msg


def test_a_device_is_refused_as_a_snapshot(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="/dev/zero: <file>: not a regular file"):
        load_snapshot(Path("/dev/zero"), CLASSES)
