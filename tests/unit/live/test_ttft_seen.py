"""The TTFT a cycle read: a mergeable histogram within 1 %, and every read between two cycles counted."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.live.sensed import Sensor
from ebb.live.timeline import Tick
from ebb.live.ttft_seen import NO_TTFT, TtftSeen
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals
from ebb.model.spans import NO_SPANS
from ebb.testing.fakes import FakeActuator, FakeSignalSource

_ttfts = st.lists(st.floats(0.5, 120_000.0, allow_nan=False), min_size=1, max_size=200)


@settings(max_examples=200, deadline=None)
@given(values=_ttfts, q=st.sampled_from([0.5, 0.9, 0.99, 1.0]))
def test_a_quantile_is_within_one_percent_of_the_rank_selected_ttft(values: list[float], q: float) -> None:
    want = sorted(values)[max(0, math.ceil(q * len(values)) - 1)]
    got = TtftSeen.of(values).quantile_ms(q)
    assert got is not None and abs(got - want) <= 0.01 * want + 1e-9


@settings(max_examples=100, deadline=None)
@given(a=_ttfts, b=_ttfts)
def test_merging_two_histograms_is_the_histogram_of_both(a: list[float], b: list[float]) -> None:
    merged, whole = TtftSeen.of(a).merged(TtftSeen.of(b)), TtftSeen.of(a + b)
    assert merged.bins.keys() == whole.bins.keys()
    assert all(math.isclose(merged.bins[k], whole.bins[k]) for k in whole.bins)
    assert math.isclose(merged.weight, len(a) + len(b))


def test_nan_rows_and_weights_that_are_not_positive_are_not_counted() -> None:
    seen = TtftSeen.of([100.0, float("nan"), 300.0, 5000.0], [2.0, 1.0, 0.0, float("nan")])
    assert seen.weight == 2.0 and seen.quantile_ms(1.0) is not None and abs(seen.quantile_ms(1.0) - 100) <= 1
    assert TtftSeen.of([]) is NO_TTFT and NO_TTFT.quantile_ms(0.99) is None and NO_TTFT.weight == 0.0


def _tick(t: float) -> Tick:
    return Tick(t_s=t - 1000.0, wall_s=t, step_s=None)


def test_a_cycle_reports_the_completions_every_read_since_the_last_cycle_returned() -> None:
    """The fast path's reads between cycles take samples from the cursor: their completions still
    reach the next cycle's outcome, once."""
    now = [1000.0]

    def produce(since_s: float) -> LiveSignals:
        t = np.array([now[0] - 0.05])
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=t * 0, slot_replicas=t * 0, queued=t * 0,
                                       done_t_s=t, done_ttft_ms=np.array([100.0 * now[0] / 1000]),
                                       done_e2e_ms=np.array([np.nan]), done_weight=np.array([3.0])),
                           newest_sample_s=now[0], replicas_seen=1)

    source, act = FakeSignalSource(produce), FakeActuator(1)
    sensor = Sensor(999.0, lookback_s=30.0, max_staleness_s=5.0)
    for t in (1000.1, 1000.2, 1000.3):  # three fast-path reads
        now[0] = t
        sensor.read(source, NO_SPANS, _tick(t), quiet=True)
    now[0] = 1001.0
    seen = sensor.sense(source, act, NO_SPANS, _tick(1001.0))
    assert seen.ttft.weight == 12.0  # four reads of weight 3
    assert seen.outcome(1, 1.0, "hold", 1).ttft == seen.ttft
    assert sensor.sense(source, act, NO_SPANS, _tick(1001.0)).ttft.weight == 3.0  # counted once: only the new read
