"""Alibaba's GPU cluster trace 2023: the pod list as columns, GPU demand of live pods per bin, batch jobs
with their sizes and run times, and the node list's GPUs per model."""

from __future__ import annotations

import gzip
import math
import os
from pathlib import Path

import numpy as np
import pytest

from ebb.errors import InputError, TraceFormatError
from ebb.sources.traces.alibaba_gpu import (
    gpu_demand_series,
    gpus_per_model,
    job_arrivals,
    load_alibaba_gpu_pods,
)

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces" / "alibaba-gpu-2023"
HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
          "scheduled_time\n")
PODS = [  # name, cpu, mem, num_gpu, gpu_milli, spec, qos, phase, created, deleted, scheduled
    "p0,6000,12288,1,460,,BE,Running,2,5,2",
    "p1,88000,327680,8,1000,V100M16|V100M32,BE,Succeeded,3,7,4",
    "p2,4000,1024,0,0,,BE,Running,0,9,0",
    "p3,12000,16384,1,1000,,LS,Running,1,8,1",
    "p4,6000,12288,2,1000,,BE,Pending,4,6,",
    "p5,6000,12288,1,500,,BE,Running,6,,6",
]


def _pods(tmp: Path, rows: list[str] = PODS, name: str = "pods.csv") -> Path:
    path = tmp / name
    path.write_text(HEADER + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _shared(name: str) -> Path:
    path = SHARED / name
    if not path.is_file():
        msg = f"{path} is absent (the check on the published Alibaba GPU files needs ../shared)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ../shared: {msg}")
        pytest.skip(msg)
    return path


def test_a_sharing_pod_asks_for_its_fraction_of_one_gpu_and_a_multi_gpu_pod_for_whole_gpus(tmp_path: Path) -> None:
    p = load_alibaba_gpu_pods(_pods(tmp_path))
    assert p.pods == 6 and p.gpus.tolist() == [0.46, 8.0, 0.0, 1.0, 2.0, 0.5]
    assert p.qos.tolist() == ["BE", "BE", "BE", "LS", "BE", "BE"] and p.phase[4] == "Pending"
    assert p.gpu_spec[1] == "V100M16|V100M32" and p.cpu_milli[1] == 88000 and p.name[0] == "p0"
    assert not p.gpus.flags.writeable and p.last_time_s == 9.0


def test_missing_deletion_and_scheduled_times_are_kept_as_nan_and_noted(tmp_path: Path) -> None:
    p = load_alibaba_gpu_pods(_pods(tmp_path))
    assert math.isnan(p.scheduled_s[4]) and math.isnan(p.deletion_s[5])
    assert any("no deletion_time" in n for n in p.notes) and any("never scheduled" in n for n in p.notes)


def test_a_gzip_pod_list_reads_the_same(tmp_path: Path) -> None:
    plain = _pods(tmp_path)
    packed = tmp_path / "pods.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert np.array_equal(load_alibaba_gpu_pods(packed).gpus, load_alibaba_gpu_pods(plain).gpus)


def test_demand_is_the_gpus_of_live_pods_of_the_chosen_classes_each_second(tmp_path: Path) -> None:
    p = load_alibaba_gpu_pods(_pods(tmp_path))
    be = gpu_demand_series(p, end_s=10.0)
    # p0 0.46 on [2,5), p1 8 on [3,7), p4 2 on [4,6) (asked for, never granted), p5 0.5 from 6 on (no deletion).
    assert be.gpus.tolist() == pytest.approx([0, 0, 0.46, 8.46, 10.46, 10, 8.5, 0.5, 0.5, 0.5])
    assert be.qos == ("BE",) and be.bin_s == 1.0 and be.duration_s == 10.0
    ls = gpu_demand_series(p, qos=("LS",), end_s=10.0)
    assert ls.gpus.tolist() == [0, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    every = gpu_demand_series(p, qos=None, end_s=10.0)
    assert every.gpus == pytest.approx(be.gpus + ls.gpus) and every.qos == ("BE", "LS")


def test_live_from_scheduled_counts_granted_gpus_and_skips_never_scheduled_pods(tmp_path: Path) -> None:
    p = load_alibaba_gpu_pods(_pods(tmp_path))
    granted = gpu_demand_series(p, end_s=10.0, live_from="scheduled")
    assert granted.gpus.tolist() == pytest.approx([0, 0, 0.46, 0.46, 8.46, 8, 8.5, 0.5, 0.5, 0.5])


def test_a_bin_holds_the_time_average_and_the_last_bin_averages_over_its_own_width(tmp_path: Path) -> None:
    p = load_alibaba_gpu_pods(_pods(tmp_path))
    per_s = gpu_demand_series(p, end_s=10.0).gpus
    wide = gpu_demand_series(p, end_s=10.0, bin_s=4.0).gpus
    assert wide.tolist() == pytest.approx([per_s[0:4].mean(), per_s[4:8].mean(), per_s[8:10].mean()])
    shifted = gpu_demand_series(p, start_s=2.5, end_s=4.0, bin_s=1.0).gpus  # a bin straddling the pod edge
    assert shifted.tolist() == pytest.approx([(0.46 * 0.5 + 8.46 * 0.5), 8.46])


def test_time_scale_divides_every_time_and_duration_and_keeps_gpu_levels(tmp_path: Path) -> None:
    p = load_alibaba_gpu_pods(_pods(tmp_path))
    slow = gpu_demand_series(p, end_s=10.0, bin_s=2.0).gpus
    fast = gpu_demand_series(p, end_s=1.0, bin_s=0.2, time_scale=10.0)
    assert fast.gpus == pytest.approx(slow) and fast.time_scale == 10.0
    assert gpu_demand_series(p, time_scale=3.0).duration_s == pytest.approx(3.0, abs=1.0)  # ends at 9 s / 3
    jobs = job_arrivals(p, time_scale=10.0)
    assert jobs.arrival_s.tolist() == pytest.approx([0.2, 0.3, 0.6]) and jobs.duration_s.tolist() == pytest.approx(
        [0.3, 0.3, 0.3])


def test_jobs_are_gpu_pods_submitted_at_creation_running_from_schedule_to_deletion(tmp_path: Path) -> None:
    p = load_alibaba_gpu_pods(_pods(tmp_path))
    jobs = job_arrivals(p, end_s=10.0)
    # p2 has no GPU, p3 is LS, p4 never ran: left out. p5 has no deletion: it runs to the file's last time (9 s).
    assert jobs.arrival_s.tolist() == [2.0, 3.0, 6.0] and jobs.gpus.tolist() == [0.46, 8.0, 0.5]
    assert jobs.duration_s.tolist() == [3.0, 3.0, 3.0] and jobs.censored.tolist() == [False, False, True]
    assert jobs.counts.tolist() == [0, 0, 1, 1, 0, 0, 1, 0, 0, 0] and jobs.jobs == 3
    assert any("never scheduled" in n for n in jobs.notes) and any("censored" in n for n in jobs.notes)
    later = job_arrivals(p, start_s=2.5, end_s=6.0, bin_s=2.0)
    assert later.arrival_s.tolist() == [0.5] and later.counts.tolist() == [1, 0]
    assert later.count_series().requests == 1


def test_an_unknown_qos_class_is_refused_naming_the_classes_found(tmp_path: Path) -> None:
    p = load_alibaba_gpu_pods(_pods(tmp_path))
    with pytest.raises(InputError, match=r"'be'.*found BE, LS"):
        gpu_demand_series(p, qos=("be",))
    assert job_arrivals(p, qos="BE").qos == ("BE",)  # one class as a plain string


@pytest.mark.parametrize(("kwargs", "what"), [
    ({"bin_s": 0.0}, "bin_s"), ({"time_scale": 0.0}, "time_scale"), ({"start_s": -1.0}, "start_s"),
    ({"start_s": 9.0}, "empty span"), ({"end_s": 1e12}, "bins of 1 s"), ({"bin_s": 1e-300}, "at most"),
    ({"live_from": "deleted"}, "live_from"),
])
def test_bad_series_arguments_are_refused_with_the_fix(tmp_path: Path, kwargs: dict[str, object], what: str) -> None:
    p = load_alibaba_gpu_pods(_pods(tmp_path))
    with pytest.raises(InputError, match=what) as err:
        gpu_demand_series(p, **kwargs)  # type: ignore[arg-type]
    assert "fix:" in str(err.value)


@pytest.mark.parametrize(("row", "what"), [
    ("q,1,1,1,460,,BE,Running,abc,5,2", "creation_time 'abc' is not a number"),
    ("q,1,1,1,460,,BE,Running,,5,2", "creation_time is empty"),
    ("q,1,1,1,460,,BE,Running,-3,5,2", "not a time"),
    ("q,1,1,1,460,,BE,Running,1,inf,2", "not a time"),
    ("q,1,1,1,460,,BE,Running,1,1e400,2", "not a time"),
    ("q,1,1,1,460,,BE,Running,1,1e11,2", "not a time"),
    ("q,1,1,1,460,,BE,Running,5,4,5", "deletion_time is before creation_time"),
    ("q,1,1,1,460,,BE,Running,5,9,4", "scheduled_time is before creation_time"),
    ("q,1,1,1,460,,BE,Running,5,9,10", "scheduled_time is after deletion_time"),
    ("q,1,1,2000,460,,BE,Running,1,5,2", "num_gpu"),
    ("q,1,1,1,1001,,BE,Running,1,5,2", "gpu_milli"),
    ("q,1,1,1,1.5,,BE,Running,1,5,2", "gpu_milli"),
    ("q,1,1,1,460,,,Running,1,5,2", "qos is empty"),
    ("q,1,1,1,460,," + "B" * 300 + ",Running,1,5,2", "longer than"),
    ("q,1,1,1,460,,BE,Running,1,5", r"field\(s\) but the header has"),
])
def test_a_malformed_pod_row_names_the_file_the_line_and_the_fix(tmp_path: Path, row: str, what: str) -> None:
    path = _pods(tmp_path, [PODS[0], row])
    with pytest.raises(TraceFormatError, match=what) as err:
        load_alibaba_gpu_pods(path)
    assert f"{path}:3:" in str(err.value) and "fix:" in str(err.value)


def test_a_file_without_the_pod_columns_or_rows_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.csv"
    other.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1,1\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match="missing column"):
        load_alibaba_gpu_pods(other)
    with pytest.raises(TraceFormatError, match="no data rows"):
        load_alibaba_gpu_pods(_pods(tmp_path, [], "empty.csv"))
    with pytest.raises(InputError, match="not found"):
        load_alibaba_gpu_pods(tmp_path / "absent.csv")


def test_the_node_list_gives_total_gpus_per_model_for_sizing_a_pool(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,0,\nn1,96000,786432,8,V100M32\n"
                     "n2,96000,786432,2,T4\nn3,96000,786432,8,V100M32\n", encoding="utf-8")
    assert gpus_per_model(nodes) == {"T4": 2, "V100M32": 16}
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,4,\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match="has no model") as err:
        gpus_per_model(nodes)
    assert f"{nodes}:2:" in str(err.value)


def test_the_published_pod_list_has_best_effort_gpu_demand() -> None:
    pods = load_alibaba_gpu_pods(_shared("openb_pod_list_default.csv"))
    # README: 8,152 pods, 3,398 BE and 4,647 LS; 897 Pending pods were never scheduled.
    assert pods.pods == 8152 and int((pods.qos == "BE").sum()) == 3398 and int((pods.qos == "LS").sum()) == 4647
    assert int(np.isnan(pods.scheduled_s).sum()) == 897 and not np.isnan(pods.deletion_s).any()
    demand = gpu_demand_series(pods, bin_s=3600.0)
    assert demand.gpus.max() > 0 and len(demand.gpus) == math.ceil(12_902_960 / 3600)
    be = pods.qos == "BE"
    gpu_seconds = float((pods.gpus[be] * (pods.deletion_s[be] - pods.creation_s[be])).sum())
    edges = np.minimum(np.arange(len(demand.gpus) + 1) * 3600.0, 12_902_960.0)
    widths = np.diff(edges)
    assert float((demand.gpus * widths).sum()) == pytest.approx(gpu_seconds, rel=1e-9)
    day = gpu_demand_series(pods, time_scale=149.0, bin_s=60.0)  # 149 days into one day, per minute
    assert len(day.gpus) == math.ceil(12_902_960 / 149 / 60) and day.gpus.max() > 0
    jobs = job_arrivals(pods, time_scale=149.0, bin_s=60.0)
    assert jobs.jobs == int(jobs.counts.sum()) > 1000 and np.all(jobs.duration_s >= 0)


def test_the_published_node_list_sizes_the_gpu_pools() -> None:
    totals = gpus_per_model(_shared("openb_node_list_all_node.csv"))
    assert totals["G2"] == 4392 and totals["T4"] == 842 and sum(totals.values()) == 6212
