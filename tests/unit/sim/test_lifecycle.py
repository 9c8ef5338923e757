"""The shared replica lifecycle: the transition table, refused moves, and the logs it produces."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.sim.lifecycle import DRAINING, READY, STARTING, STOPPED, TRANSITIONS, Lifecycles, Phase, is_legal

# What the engines do, spelled out independently of the module's table.
EXPECTED_MOVES = {
    (Phase.STARTING, Phase.READY),  # the cold start ended
    (Phase.STARTING, Phase.STOPPED),  # a scale-down cancelled it, or the run ended
    (Phase.READY, Phase.DRAINING),  # a scale-down chose it
    (Phase.READY, Phase.STOPPED),  # the run ended while it served
    (Phase.DRAINING, Phase.STOPPED),  # its last request finished / its expected drain elapsed
}
ALL_PAIRS = list(itertools.product(Phase, Phase))


def _in_phase(phase: Phase) -> tuple[Lifecycles, int]:
    """A fleet holding one replica (id 0) in ``phase``, reached by legal moves at t = 0, 1, 2."""
    lc = Lifecycles()
    rid = lc.add(0.0, warm=False)
    path = {Phase.STARTING: [], Phase.READY: [READY], Phase.DRAINING: [READY, DRAINING],
            Phase.STOPPED: [STOPPED]}[phase]
    for t, to in enumerate(path, start=1):
        lc.move(rid, to, float(t))
    assert lc.phase[rid] == phase
    return lc, rid


def test_the_table_holds_exactly_the_moves_the_engines_make() -> None:
    assert {(frm, to) for frm, tos in TRANSITIONS.items() for to in tos} == EXPECTED_MOVES
    assert set(TRANSITIONS) == set(Phase)
    assert TRANSITIONS[Phase.STOPPED] == frozenset()


def test_the_hot_loop_ints_are_the_phase_values() -> None:
    assert (STARTING, READY, DRAINING, STOPPED) == tuple(int(p) for p in Phase)
    assert all(type(c) is int for c in (STARTING, READY, DRAINING, STOPPED))


@pytest.mark.parametrize(("frm", "to"), ALL_PAIRS, ids=[f"{a.name}->{b.name}" for a, b in ALL_PAIRS])
def test_a_move_is_allowed_iff_the_table_lists_it(frm: Phase, to: Phase) -> None:
    lc, rid = _in_phase(frm)
    before = (list(lc.phase), list(lc.ready_s), list(lc.stopped_s), list(lc.live), list(lc.ready))
    legal = (frm, to) in EXPECTED_MOVES
    assert is_legal(frm, to) is legal
    if legal:
        lc.move(rid, to, 10.0)
        assert lc.phase[rid] == to
        return
    with pytest.raises(ValueError, match=rf"replica {rid}: illegal lifecycle move {frm.name} -> {to.name}"):
        lc.move(rid, to, 10.0)
    # A refused move changes nothing.
    assert (list(lc.phase), list(lc.ready_s), list(lc.stopped_s), list(lc.live), list(lc.ready)) == before


def test_a_warm_replica_is_born_ready_and_a_cold_one_starting() -> None:
    lc = Lifecycles()
    warm, cold = lc.add(0.0, warm=True), lc.add(3.0, warm=False)
    assert (warm, cold) == (0, 1) and len(lc) == 2
    assert lc.phase == [READY, STARTING]
    assert lc.ready == [warm] and lc.live == [warm, cold] and lc.starting() == [cold]
    assert lc.ready_s[warm] == 0.0 and math.isnan(lc.ready_s[cold])


def test_moves_keep_the_live_and_ready_lists_and_the_times() -> None:
    lc = Lifecycles()
    a, b, c = (lc.add(t, warm=False) for t in (0.0, 1.0, 2.0))
    lc.move(b, READY, 5.0)
    lc.move(a, READY, 6.0)
    assert lc.ready == [b, a]  # in the order they became ready
    lc.move(c, STOPPED, 7.0)  # a cancelled cold start: billed, never ready
    lc.move(b, DRAINING, 8.0)
    assert lc.live == [a, b] and lc.ready == [a] and lc.starting() == []
    lc.stop_all(9.0)
    assert lc.live == [] and lc.ready == []
    logs = lc.logs()
    assert [(r.replica, r.requested_s, r.stopped_s) for r in logs] == [(0, 0.0, 9.0), (1, 1.0, 9.0), (2, 2.0, 7.0)]
    assert [r.ready_s for r in logs[:2]] == [6.0, 5.0] and math.isnan(logs[2].ready_s)


def test_the_fleet_log_carries_the_engines_counts_and_records() -> None:
    lc = Lifecycles()
    lc.add(0.0, warm=True)
    lc.stop_all(4.0)
    fleet = lc.fleet_log(scale_ups=2, scale_downs=1, end_s=4.0, decisions=[(1.0, 1, 2)], noteworthy=[])
    assert (fleet.scale_ups, fleet.scale_downs, fleet.end_s) == (2, 1, 4.0)
    assert fleet.decisions == ((1.0, 1, 2),) and fleet.noteworthy == ()
    assert fleet.replica_seconds() == 4.0


# A random session: replicas added (warm or cold) or moves requested, at non-decreasing times.
# Each step: (add?, warm, replica, to, time increment).
_steps = st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(0, 9), st.sampled_from(list(Phase)),
                            st.floats(0.0, 5.0)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(steps=_steps, end_extra=st.floats(0.0, 5.0))
def test_random_moves_follow_the_table_or_raise_and_the_logs_stay_consistent(
        steps: list[tuple[bool, bool, int, Phase, float]], end_extra: float) -> None:
    lc = Lifecycles()
    now = 0.0
    for add, warm, rid, to, dt in steps:
        now += dt
        if add or rid >= len(lc):
            lc.add(now, warm=warm)
            continue
        frm = lc.phase[rid]
        if (Phase(frm), to) in EXPECTED_MOVES:
            lc.move(rid, to, now)
            assert lc.phase[rid] == to
        else:
            with pytest.raises(ValueError, match=f"replica {rid}: illegal lifecycle move"):
                lc.move(rid, to, now)
            assert lc.phase[rid] == frm
        # The lists always agree with the phases.
        assert lc.live == [r for r in range(len(lc)) if lc.phase[r] != STOPPED]
        assert sorted(lc.ready) == [r for r in range(len(lc)) if lc.phase[r] == READY]
    lc.stop_all(now + end_extra)
    for log in lc.logs():
        # Billed from request to stop; ready (when reached) in between.
        assert not math.isnan(log.stopped_s) and log.requested_s <= log.stopped_s
        if not math.isnan(log.ready_s):
            assert log.requested_s <= log.ready_s <= log.stopped_s
