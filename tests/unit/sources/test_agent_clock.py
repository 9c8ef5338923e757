"""AgentClocks: an agent's clock offset measured from its page stamps, corrected in whole buckets."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.sources.agent_clock import WINDOW, AgentClocks

A = "http://node-a:9401"
NOW = 1_700_000_000.0


def observe(clocks: AgentClocks, offset_s: float, rtt_s: float = 0.004, bucket_ms: int = 100, at_s: float = NOW) -> None:
    """One page written mid-request by an agent whose clock is ``offset_s`` ahead."""
    clocks.observe(A, round((at_s + rtt_s / 2 + offset_s) * 1e9), at_s, at_s + rtt_s, bucket_ms)


def test_an_agent_three_seconds_behind_is_measured_and_corrected_by_thirty_buckets() -> None:
    clocks = AgentClocks()
    observe(clocks, -3.02)
    assert clocks.offsets_s()[A] == pytest.approx(-3.02, abs=1e-6)
    assert clocks.shift_ns(A) == -3_000_000_000  # its times move 3 s later, onto the shared grid


def test_an_agent_within_half_a_bucket_is_reported_and_not_corrected() -> None:
    clocks = AgentClocks()
    observe(clocks, 0.04)
    assert clocks.offsets_s()[A] == pytest.approx(0.04, abs=1e-6)
    assert clocks.shift_ns(A) == 0


def test_an_offset_within_the_round_trip_is_no_evidence_of_a_clock_off() -> None:
    clocks = AgentClocks()
    observe(clocks, 0.3, rtt_s=1.0)  # the page may have been written anywhere in that second
    assert clocks.shift_ns(A) == 0


def test_a_page_without_a_stamp_measures_nothing() -> None:
    clocks = AgentClocks()
    clocks.observe(A, None, NOW, NOW + 0.01, 100)
    assert clocks.offsets_s() == {} and clocks.shift_ns(A) == 0


def test_one_slow_answer_does_not_move_the_median() -> None:
    clocks = AgentClocks()
    for k in range(WINDOW - 1):
        observe(clocks, 0.0, at_s=NOW + k)
    observe(clocks, 2.0, at_s=NOW + 10)  # one page stamped oddly
    assert clocks.shift_ns(A) == 0


def test_a_correction_is_logged_when_it_starts_and_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    clocks = AgentClocks()
    with caplog.at_level(logging.INFO, logger="ebb.sources.agents"):
        for k in range(3):
            observe(clocks, -3.0, at_s=NOW + k)
        for k in range(WINDOW):
            observe(clocks, 0.0, at_s=NOW + 10 + k)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "corrected by +3.0 s" in lines[0] and "NTP" in lines[0]
    assert "agrees with the controller's again" in lines[1]


@settings(max_examples=200, deadline=None)
@given(offset=st.floats(-1e6, 1e6), bucket_ms=st.sampled_from([50, 100, 250, 1000]),
       rtt=st.floats(0.0, 0.2))
def test_a_correction_is_whole_buckets_and_within_half_a_bucket_plus_the_round_trip(
        offset: float, bucket_ms: int, rtt: float) -> None:
    clocks = AgentClocks()
    observe(clocks, offset, rtt_s=rtt, bucket_ms=bucket_ms)
    shift = clocks.shift_ns(A)
    assert shift % (bucket_ms * 1_000_000) == 0
    if shift:
        assert abs(shift / 1e9 - offset) <= bucket_ms / 2000 + 1e-6
    else:
        assert abs(offset) <= max(rtt / 2, bucket_ms / 2000) + 1e-6
