"""AgentSource's merge rules across agents (pages injected; HTTP is covered in tests/integration)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ebb.sources.agent_wire import Bucket, BucketPage, RouterGauges, Sketch, WorkerGauges
from ebb.errors import SourceUnavailable
from ebb.sources.agents import AgentSource

A, B = "http://node-a:9100", "http://node-b:9100"
T = 1_700_000_000 * 10**9
MS = 10**6


def wk(running: float, share: float | None = 0.5) -> WorkerGauges:
    return WorkerGauges(running, 1.0, 8, True, running / 8, share)


def source(pages: dict[str, BucketPage | SourceUnavailable], **kw: bool) -> AgentSource:
    src = AgentSource(list(pages), **kw)

    def fetch(url: str, since_ns: int) -> BucketPage:
        page = pages[url]
        if isinstance(page, SourceUnavailable):
            raise page
        return BucketPage(page.agent, page.bucket_ms, page.newest_ns,
                          tuple(b for b in page.buckets if b.ts_ns > since_ns))

    src._fetch = fetch  # type: ignore[method-assign]
    return src


ROUTER_VIEW: dict[str, object] = {"latency_from": "router", "latency_names": ("router",)}


def two_agents() -> dict[str, BucketPage | SourceUnavailable]:
    a = BucketPage("a", 100, T + 300 * MS, (
        Bucket(T + 100 * MS, workers={"w0": wk(2)}, routers={"router": RouterGauges(3, 5)},
               ttft_ms=Sketch.of([100.0]), **ROUTER_VIEW),
        Bucket(T + 200 * MS, workers={}, missing=("http://w0",), ttft_ms=Sketch.of([200.0]),
               **ROUTER_VIEW),
        Bucket(T + 300 * MS, workers={"w0": wk(4)}),
    ))
    b = BucketPage("b", 100, T + 200 * MS, (
        # the same router polled by both agents: its sketch must count once
        Bucket(T + 100 * MS, workers={"w1": wk(6, 0.25)}, routers={"router": RouterGauges(3, 5)},
               ttft_ms=Sketch.of([100.0]), **ROUTER_VIEW),
        Bucket(T + 200 * MS, workers={"w1": wk(6, 0.25)}),
    ))
    return {A: a, B: b}


def test_agents_merge_by_bucket_time_up_to_the_oldest_newest_bucket() -> None:
    sig = source(two_agents()).read(0.0)
    f = sig.fine
    # T+200 misses w0 (left out of the sums: replicas_seen counts 1 there), T+300 is past agent b's
    # newest bucket
    np.testing.assert_array_equal(f.t_s, [(T + 100 * MS) / 1e9, (T + 200 * MS) / 1e9])
    np.testing.assert_allclose(f.prefill_replicas, [0.75, 0.25])
    np.testing.assert_allclose(f.slot_replicas, [2 / 8 + 6 / 8, 6 / 8])
    np.testing.assert_array_equal(f.queued, [3.0, 0.0])  # one router, seen by two agents; absent at T+200
    assert sig.replicas_seen == 1  # the controller's completeness check: no scale-down on this read
    ttft = ~np.isnan(f.done_ttft_ms)
    assert f.done_weight[ttft].tolist() == [1.0, 1.0]  # 100 ms once (deduplicated) and 200 ms
    assert np.isnan(f.done_e2e_ms[ttft]).all()
    assert sig.inflight_by_replica == {"w0": 3.0, "w1": 7.0}
    assert sig.newest_sample_s == (T + 200 * MS) / 1e9 and sig.queued == 3.0
    assert sig.total_qps == pytest.approx(2 / 0.2)


def test_only_buckets_after_the_cursor_are_returned() -> None:
    sig = source(two_agents()).read((T + 100 * MS) / 1e9)
    assert sig.fine.t_s.tolist() == [(T + 200 * MS) / 1e9] and sig.newest_sample_s == (T + 200 * MS) / 1e9


def test_a_worker_without_a_busy_share_yet_keeps_the_time_out_of_the_sums() -> None:
    page = BucketPage("a", 100, T, (Bucket(T, workers={"w0": wk(2, None), "w1": wk(2)}),))
    sig = source({A: page}).read(-math.inf)
    assert len(sig.fine.t_s) == 0 and sig.inflight_by_replica == {"w0": 3.0, "w1": 3.0}


def test_one_silent_agent_fails_the_read_unless_partial_reads_are_allowed() -> None:
    pages = two_agents()
    pages[B] = SourceUnavailable(f"agent {B} did not answer")
    with pytest.raises(SourceUnavailable, match="1 of 2 agent"):
        source(pages).read(0.0)
    src = source(pages, allow_partial=True)
    sig = src.read(0.0)
    assert src.last_failed == (B,) and set(sig.inflight_by_replica) == {"w0"}


def test_an_agent_without_buckets_yet_means_the_fleet_is_unknown() -> None:
    pages = two_agents()
    pages[B] = BucketPage("b", 100, None, ())
    sig = source(pages).read(0.0)
    assert len(sig.fine.t_s) == 0 and sig.newest_sample_s is None


def test_a_time_where_every_polled_endpoint_is_missing_is_no_sample() -> None:
    page = BucketPage("a", 100, T + 200 * MS, (Bucket(T + 100 * MS, workers={}, missing=("http://w0",)),
                                                Bucket(T + 200 * MS, workers={"w0": wk(2)})))
    sig = source({A: page}).read(-math.inf)
    assert sig.fine.t_s.tolist() == [(T + 200 * MS) / 1e9] and sig.replicas_seen == 1


def test_sleepers_are_counted_but_never_seen_as_capacity() -> None:
    asleep = WorkerGauges(0.0, 0.0, 8, False, 0.0, None, asleep=True)  # a first answer: no busy share
    page = BucketPage("a", 100, T + 100 * MS, (
        Bucket(T, workers={"w0": wk(2), "w1": asleep, "w2": asleep}),
        Bucket(T + 100 * MS, workers={"w0": wk(2), "w1": asleep}),
    ))
    sig = source({A: page}).read(-math.inf)
    # a sleeper's missing busy share does not hold the time back, and its zero load adds no replica
    np.testing.assert_allclose(sig.fine.slot_replicas, [2 / 8, 2 / 8])
    assert sig.replicas_seen == 1 and sig.asleep_replicas == 1  # at the newest time
    assert sig.inflight_by_replica == {"w0": 3.0, "w1": 0.0, "w2": 0.0}
