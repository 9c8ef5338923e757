"""DeepSpeed comms_logger lines become per-op latency series with the log's own timestamps."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from ebb.errors import InputError
from ebb.sources.deepspeed_comm import parse_comm_lines, parse_comm_log

DATA = Path(__file__).resolve().parents[2] / "data" / "deepspeed"


def ns(stamp: str, ms: int) -> int:
    wall = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    return int(wall.timestamp()) * 10**9 + ms * 10**6


def test_each_logged_all_reduce_is_one_sample_stamped_with_its_log_time() -> None:
    batch = parse_comm_log(DATA / "comms_verbose.log")
    ts, ms = batch.of("nccl_allreduce_latency_ms")
    assert ms.tolist() == [9.46, 12.87, 15.02]
    assert ts.tolist() == [ns("2024-03-01 10:00:00", 120), ns("2024-03-01 10:00:00", 371),
                           ns("2024-03-01 10:00:01", 5)]
    assert batch.of("nccl_allgatherintotensor_latency_ms")[1].tolist() == [0.11]


def test_ops_keeps_only_the_named_ops() -> None:
    batch = parse_comm_log(DATA / "comms_verbose.log", ops=("all_reduce",))
    assert batch.series == ("nccl_allreduce_latency_ms",)
    assert len(batch) == 3


def test_lines_without_a_logging_prefix_are_spaced_at_the_assumed_rate_in_file_order() -> None:
    batch = parse_comm_log(DATA / "comms_no_prefix.log", base_ns=1_000, assumed_interval_ns=5_000_000)
    ts, ms = batch.of("nccl_allreduce_latency_ms")
    assert ms.tolist() == [3.5, 4.25]
    assert ts.tolist() == [1_000, 1_000 + 2 * 5_000_000]
    assert batch.of("nccl_broadcast_latency_ms")[0].tolist() == [1_000 + 5_000_000]


def test_summary_tables_and_training_output_are_not_mistaken_for_ops() -> None:
    batch = parse_comm_lines(["Comm. Op   Message Size   Count", "all_reduce", "step=3 loss=1.2"])
    assert len(batch) == 0


def test_a_comm_op_line_that_does_not_parse_is_rejected_with_its_line_number() -> None:
    lines = ["rank=0 | comm op: all_reduce | time (ms): 1.0 | msg size: 1 MB",
             "rank=0 | comm op: all_reduce | latency 3"]
    with pytest.raises(InputError, match=r"x.log:2:"):
        parse_comm_lines(lines, path="x.log")


def test_a_negative_latency_is_rejected() -> None:
    with pytest.raises(InputError, match="not a finite non-negative"):
        parse_comm_lines(["rank=0 | comm op: all_reduce | time (ms): -1.0 | msg size: 1 MB"])
