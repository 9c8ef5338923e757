"""Aggregation of /stats polls into 100 ms buckets (pure: no clock, no I/O)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ebb.agent.buckets import (
    FUTURE_BUCKETS, MAX_COMPLETIONS_PER_ANSWER, MAX_STATS_BYTES, BucketAggregator, StatsPoll, decode_stats, parse_stats,
)
from ebb.errors import InputError
from ebb.model.samples import SampleBatch

W0, W1, R = "http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8000"
T0 = 1_700_000_000.0  # Unix s, a multiple of 100 ms
NS = 1_000_000_000


def end(k: int) -> int:
    """Unix ns of the k-th bucket end after T0."""
    return int(T0) * NS + k * 100_000_000


def worker(now_s: float, busy_s: float, *, name: str = "w0", running: int = 2, waiting: int = 1,
           seq: int = 0, done: list[list[float]] | None = None, max_batch: int = 8) -> StatsPoll:
    return parse_stats({"version": 1, "kind": "worker", "name": name, "now_s": now_s, "seq": seq,
                        "ready": True, "max_batch": max_batch, "running": running, "waiting": waiting,
                        "prefill_busy_s_total": busy_s, "completed_total": seq,
                        "completions": done or []}, W0)


def router(now_s: float, *, seq: int = 0, done: list[list[float]] | None = None, queued: int = 0) -> StatsPoll:
    return parse_stats({"version": 1, "kind": "router", "name": "router", "now_s": now_s, "seq": seq,
                        "ready": True, "queued": queued, "inflight": 3, "completed_total": seq,
                        "failed_total": 0, "completions": done or []}, R)


def test_prefill_busy_share_is_the_counter_delta_over_the_worker_clock() -> None:
    agg = BucketAggregator()
    agg.poll_ok(W0, worker(T0, 10.0))
    first = agg.close(end(0))
    agg.poll_ok(W0, worker(T0 + 0.1, 10.03))
    second = agg.close(end(1))
    assert first.workers["w0"].prefill_busy_ratio is None  # one answer: nothing to difference
    assert second.workers["w0"].prefill_busy_ratio == pytest.approx(0.3)
    assert second.workers["w0"].slot_ratio == pytest.approx(2 / 8)
    assert (second.workers["w0"].running, second.workers["w0"].waiting) == (2.0, 1.0)


def test_busy_share_is_clamped_to_one_replica() -> None:
    agg = BucketAggregator()
    agg.poll_ok(W0, worker(T0, 0.0))
    agg.close(end(0))
    agg.poll_ok(W0, worker(T0 + 0.1, 0.5))  # clock skew between counter and now_s
    assert agg.close(end(1)).workers["w0"].prefill_busy_ratio == 1.0


def test_a_failing_endpoint_yields_no_value_not_zero() -> None:
    agg = BucketAggregator()
    for url, name in ((W0, "w0"), (W1, "w1")):
        agg.poll_ok(url, worker(T0, 1.0, name=name))
    agg.close(end(0))
    agg.poll_ok(W0, worker(T0 + 0.1, 1.05))
    agg.poll_failed(W1)
    b = agg.close(end(1))
    assert set(b.workers) == {"w0"} and b.missing == (W1,)
    # after the gap, w1's share spans both intervals: an average, not a guess
    agg.poll_ok(W0, worker(T0 + 0.2, 1.1))
    agg.poll_ok(W1, worker(T0 + 0.2, 1.04, name="w1"))
    b = agg.close(end(2))
    assert b.missing == () and b.workers["w1"].prefill_busy_ratio == pytest.approx(0.2)


def test_an_endpoint_that_never_answered_is_missing() -> None:
    agg = BucketAggregator()
    agg.add(W0)
    b = agg.close(end(0))
    assert b.workers == {} and b.missing == (W0,)


def test_completions_land_in_the_bucket_holding_their_own_time() -> None:
    agg = BucketAggregator()
    agg.poll_ok(W0, worker(T0 + 0.15, 0.0, seq=3, done=[
        [1, T0 - 0.05, 100.0, 900.0],   # bucket ending at T0
        [2, T0 + 0.1, 200.0, 1000.0],   # exactly on the end of bucket 1: inclusive
        [3, T0 + 0.15, 300.0, 1100.0],  # bucket 2, still open
    ]))
    b0, b1 = agg.close(end(0)), agg.close(end(1))
    assert (b0.ttft_ms.count, b1.ttft_ms.count) == (1, 1)
    assert b0.ttft_ms.quantile(0.5) == pytest.approx(100.0, rel=0.01)
    assert b1.e2e_ms.quantile(0.5) == pytest.approx(1000.0, rel=0.01)
    b2 = agg.close(end(2))
    assert b2.ttft_ms.quantile(0.5) == pytest.approx(300.0, rel=0.01)
    assert b2.latency_from == "workers" and b2.latency_names == ("w0",)


def test_a_completion_fetched_after_its_bucket_closed_goes_to_the_next_and_is_counted() -> None:
    agg = BucketAggregator()
    agg.poll_ok(W0, worker(T0, 0.0))
    agg.close(end(0))
    agg.close(end(1))
    agg.poll_ok(W0, worker(T0 + 0.25, 0.0, seq=1, done=[[1, T0 + 0.05, 50.0, 60.0]]))
    b = agg.close(end(3))
    assert b.ttft_ms.count == 1 and agg.late == 1


def test_each_completion_seq_is_taken_once_and_the_cursor_follows_it() -> None:
    agg = BucketAggregator()
    rows = [[1, T0 - 0.01, 10.0, 20.0], [2, T0 - 0.01, 10.0, 20.0]]
    agg.poll_ok(W0, worker(T0, 0.0, seq=2, done=rows))
    agg.poll_ok(W0, worker(T0, 0.0, seq=2, done=rows))  # a server ignoring ?since
    assert agg.cursor(W0) == 2 and agg.close(end(0)).ttft_ms.count == 2


def test_a_restarted_worker_gets_a_fresh_cursor_and_no_busy_share() -> None:
    agg = BucketAggregator()
    agg.poll_ok(W0, worker(T0, 50.0, seq=40))
    agg.close(end(0))
    agg.poll_ok(W0, worker(T0 + 0.1, 0.01, seq=1, done=[[1, T0 + 0.05, 10.0, 20.0]]))
    b = agg.close(end(1))
    assert b.workers["w0"].prefill_busy_ratio is None and b.ttft_ms.count == 1 and agg.cursor(W0) == 1


def test_router_completions_are_preferred_over_the_workers() -> None:
    agg = BucketAggregator()
    agg.poll_ok(W0, worker(T0, 0.0, seq=1, done=[[1, T0 - 0.01, 10.0, 20.0]]))
    agg.poll_ok(R, router(T0, seq=1, done=[[1, T0 - 0.01, 500.0, 600.0]], queued=4))
    b = agg.close(end(0))
    assert b.latency_from == "router" and b.latency_names == ("router",)
    assert b.ttft_ms.count == 1 and b.ttft_ms.quantile(1.0) == pytest.approx(500.0, rel=0.01)
    assert b.routers["router"].queued == 4.0


def test_gpu_and_host_gauges_carry_the_newest_sample_once() -> None:
    agg = BucketAggregator()
    batch = SampleBatch(("gpu0/util_gpu_pct", "gpu0/power_w"), np.array([0, 1, 0]),
                        np.array([40.0, 300.0, 55.0]), np.array([1, 1, 2]))
    agg.sampled("gpu", batch)
    b0, b1 = agg.close(end(0)), agg.close(end(1))
    assert b0.gpu == {"gpu0/power_w": 300.0, "gpu0/util_gpu_pct": 55.0} and b1.gpu == {}


def test_only_the_last_kept_buckets_are_served_after_a_cursor() -> None:
    agg = BucketAggregator(keep=3)
    for k in range(5):
        agg.close(end(k))
    assert [b.ts_ns for b in agg.since(0)] == [end(2), end(3), end(4)]
    assert [b.ts_ns for b in agg.since(end(3))] == [end(4)] and agg.newest_ns == end(4)
    with pytest.raises(ValueError, match="not after"):
        agg.close(end(4))


def base_stats() -> dict[str, Any]:
    return {"version": 1, "kind": "worker", "name": "w0", "now_s": T0, "seq": 1, "ready": True,
            "max_batch": 8, "running": 1, "waiting": 0, "prefill_busy_s_total": 1.0, "completed_total": 1,
            "completions": [[1, T0, 10.0, 20.0]]}


@pytest.mark.parametrize(("key", "value"), [("version", 2), ("max_batch", 0), ("running", -1),
                                            ("now_s", float("nan")), ("kind", "gateway")])
def test_malformed_stats_raise_input_error_naming_the_url_and_field(key: str, value: object) -> None:
    stats = base_stats() | {key: value}
    with pytest.raises(InputError, match=key) as err:
        parse_stats(stats, W0)
    assert W0 in str(err.value)


def test_a_single_bad_completion_row_is_dropped_and_counted() -> None:
    stats = base_stats() | {"completions": [[1, T0, 10.0, 20.0], [2, T0, float("nan"), 1.0], "x"]}
    poll = parse_stats(stats, W0)
    assert len(poll.completions) == 1 and poll.bad_rows == 2


# -- hostile /stats answers (issue 12: H2, M2, M9) ---------------------------------------------
def test_a_completion_time_past_int64_ns_is_a_bad_row_not_an_overflow_in_the_aggregator() -> None:
    # agent_poison.py tinf: t_s = 1e303 is finite and >= 0, and used to overflow round(t_s * 1e6)
    stats = base_stats() | {"completions": [[1, 1e303, 10.0, 20.0], [2, T0, 10.0, 20.0]], "seq": 2}
    poll = parse_stats(stats, W0)
    assert [r[0] for r in poll.completions] == [2] and poll.bad_rows == 1
    agg = BucketAggregator()
    agg.poll_ok(W0, poll)
    assert agg.close(end(0)).ttft_ms.count == 1 and agg.bad_rows == 1


@pytest.mark.parametrize(("key", "value"), [
    ("now_s", 10**400), ("running", 10**400), ("seq", 2**63), ("max_batch", 2**64),
    ("completed_total", 10**5000), ("name", "x" * 254), ("name", "w0@http://10.0.0.1:8000"),
    ("name", "w\n0"), ("version", True), ("version", 1.0), ("ready", 1),
], ids=lambda v: v if isinstance(v, str) and len(v) < 30 else type(v).__name__)
def test_huge_numbers_and_forged_names_are_input_errors_not_overflows(key: str, value: object) -> None:
    with pytest.raises(InputError, match=key if key != "version" else "version") as err:
        parse_stats(base_stats() | {key: value}, W0)
    assert len(str(err.value)) < 600  # a 5,000-digit integer is described, not printed


def test_rows_with_huge_integers_or_wrong_shapes_are_dropped_and_counted() -> None:
    rows: list[Any] = [[1, T0, 10.0, 20.0], [2, T0, 10**400, 1.0], [2**64, T0, 1.0, 1.0], [3, T0, 1.0],
                       [True, T0, 1.0, 1.0], [4.0, T0, 1.0, 1.0], {"seq": 5}, None]
    poll = parse_stats(base_stats() | {"completions": rows}, W0)
    assert [r[0] for r in poll.completions] == [1] and poll.bad_rows == len(rows) - 1


def test_rows_past_the_per_answer_cap_are_not_taken() -> None:
    rows = [[i, T0, 1.0, 2.0] for i in range(1, MAX_COMPLETIONS_PER_ANSWER + 101)]
    poll = parse_stats(base_stats() | {"completions": rows, "seq": len(rows)}, W0)
    assert len(poll.completions) == MAX_COMPLETIONS_PER_ANSWER and poll.bad_rows == 100


@pytest.mark.parametrize("raw", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
                                 b"not json", b"\xff\xfe", b"", b"[]", b"1e999"],
                         ids=["deep-arrays", "deep-objects", "not-json", "not-utf8", "empty", "a-list", "inf"])
def test_decode_stats_turns_any_bad_text_into_an_input_error_naming_the_url(raw: bytes) -> None:
    # agent_poison.py deep: 100,000 nested arrays raised RecursionError out of the poll
    with pytest.raises(InputError) as err:
        decode_stats(raw, W0)
    assert W0 in str(err.value)


def test_decode_stats_refuses_text_over_the_size_cap_before_parsing() -> None:
    with pytest.raises(InputError, match="limit"):
        decode_stats(b" " * (MAX_STATS_BYTES + 1), W0)


def test_far_future_and_too_old_completions_are_dropped_by_the_agents_clock() -> None:
    # agent_poison.py tfuture: 1,000 rows at t_s = 1e12 + ... per poll grew pending without bound
    agg = BucketAggregator(keep=600)
    now_ns = end(0)
    bucket_s = 0.1
    rows = [[1, T0 + 0.05, 1.0, 2.0],                          # in the next bucket: kept
            [2, T0 + FUTURE_BUCKETS * bucket_s - 0.001, 1.0, 2.0],  # just inside the lead
            [3, T0 + FUTURE_BUCKETS * bucket_s + 0.01, 1.0, 2.0],   # too far ahead
            [4, T0 + 3600.0, 1.0, 2.0],                        # an hour ahead
            [5, T0 - 59.0, 1.0, 2.0],                          # inside the 60 s window: late, kept
            [6, T0 - 61.0, 1.0, 2.0]]                          # older than the kept window
    agg.poll_ok(W0, worker(T0, 0.0, seq=6, done=rows), now_ns)
    assert agg.implausible == {"future": 2, "too_old": 1, "pending_cap": 0}
    kept = sum(agg.close(end(k)).ttft_ms.count for k in range(0, 8))
    assert kept == 3


def test_without_a_clock_the_last_closed_bucket_is_the_reference() -> None:
    agg = BucketAggregator()
    agg.close(end(0))
    agg.poll_ok(W0, worker(T0, 0.0, seq=2, done=[[1, T0 + 1e6, 1.0, 2.0], [2, T0 + 0.05, 1.0, 2.0]]))
    assert agg.implausible["future"] == 1 and agg.close(end(1)).ttft_ms.count == 1


def test_pending_completions_are_capped_and_the_overflow_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    import ebb.agent.buckets as buckets

    monkeypatch.setattr(buckets, "MAX_PENDING_ROWS", 5)
    agg = BucketAggregator()
    rows = [[i, T0 + 0.2, 1.0, 2.0] for i in range(1, 9)]
    agg.poll_ok(W0, worker(T0, 0.0, seq=8, done=rows), end(0))
    assert agg.implausible["pending_cap"] == 3
    assert sum(agg.close(end(k)).ttft_ms.count for k in range(3)) == 5
    # closing released the slots: the next answer is taken again
    agg.poll_ok(W0, worker(T0 + 0.3, 0.0, seq=9, done=[[9, T0 + 0.25, 1.0, 2.0]]), end(2))
    assert agg.close(end(3)).ttft_ms.count == 1 and agg.implausible["pending_cap"] == 3


def test_two_endpoints_reporting_one_name_are_both_kept_under_their_urls() -> None:
    # name_collision.py: a saturated w0 and an idle process also calling itself w0 read as demand 0
    a, b = "http://10.0.0.1:8000", "http://10.0.0.2:8000"
    agg = BucketAggregator()
    for k in range(3):
        agg.poll_ok(a, worker(T0 + k * 0.1, 0.09 * k, running=8, waiting=0))
        agg.poll_ok(b, worker(T0 + k * 0.1, 0.0, running=0, waiting=0))
        bucket = agg.close(end(k))
    assert set(bucket.workers) == {f"w0@{a}", f"w0@{b}"}
    assert sum(w.slot_ratio for w in bucket.workers.values()) == pytest.approx(1.0)
    assert sum(w.prefill_busy_ratio or 0.0 for w in bucket.workers.values()) == pytest.approx(0.9, rel=1e-4)
    assert agg.collisions == ("w0",) and set(bucket.latency_names) == {f"w0@{a}", f"w0@{b}"}


def test_a_collision_ends_when_one_endpoint_goes_and_the_name_comes_back() -> None:
    a, b = "http://10.0.0.1:8000", "http://10.0.0.2:8000"
    agg = BucketAggregator()
    agg.poll_ok(a, worker(T0, 0.0))
    agg.poll_ok(b, worker(T0, 0.0))
    assert set(agg.close(end(0)).workers) == {f"w0@{a}", f"w0@{b}"}
    agg.forget(b)
    agg.poll_ok(a, worker(T0 + 0.1, 0.0))
    assert set(agg.close(end(1)).workers) == {"w0"} and agg.collisions == ()


def test_a_worker_and_a_router_may_share_a_name() -> None:
    agg = BucketAggregator()
    agg.poll_ok(W0, worker(T0, 0.0, name="router"))
    agg.poll_ok(R, router(T0))
    b = agg.close(end(0))
    assert set(b.workers) == {"router"} and set(b.routers) == {"router"} and agg.collisions == ()
