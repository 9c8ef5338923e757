"""One contract for every decision-ledger backend: memory, SQLite and a real etcd server.

Each parametrized test states a guarantee of :class:`ebb.ledger.Ledger` (see ``ebb.ledger.base``);
the etcd cases start an etcd binary (``tests/conftest.py``) and skip only when it is not installed
outside CI. Backend-specific error handling is checked at the end of the file.
"""

from __future__ import annotations

import dataclasses
import itertools
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebb.errors import InputError, LedgerConflict, NotLeader, SourceUnavailable, TransientError
from ebb.ledger import EtcdLedger, Ledger, MemoryLedger, SqliteLedger, open_ledger
from ebb.ledger.base import Fence
from ebb.model.decisions import ACTIONS, JSON, CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId

# -- records ------------------------------------------------------------------------------------------


def decision(i: str, cycle: str = "c1", run: str = "r1", *, ts_ns: int = 1_000, target: str = "chat",
             caused_by: tuple[str, ...] = ()) -> DecisionRecord:
    return DecisionRecord(
        decision_id=DecisionId(i), cycle_id=CycleId(cycle), run_id=RunId(run), ts_ns=ts_ns, target=target,
        action="scale_down", from_replicas=4, to_replicas=3, reasons=("p99 well under SLO", "idle 10 min"),
        signals={"p99_ttft_ms": 120.5, "inflight_p99": 3.0, "util": 0.21}, weights={"latency": 0.7, "cost": 0.3},
        vetoes=(), victims=("chat-7f9c",), plan={"step": 1, "canary": True, "zones": ["a", "b"]},
        caused_by=tuple(DecisionId(c) for c in caused_by),
    )


def cycle(cid: str, run: str = "r1", *, ts_ns: int = 1_000, n: int = 3, policy: str = "ebb:slo=200",
          targets: tuple[str, ...] = ("chat", "code", "embed")) -> CycleRecord:
    ds = tuple(decision(f"{cid}-d{k}", cid, run, ts_ns=ts_ns, target=targets[k % len(targets)]) for k in range(n))
    return CycleRecord(cycle_id=CycleId(cid), run_id=RunId(run), ts_ns=ts_ns, policy=policy, decisions=ds,
                       snapshot={"replicas": {"chat": 4, "code": 2}}, fencing_token=7)


# -- backends -----------------------------------------------------------------------------------------


@dataclass
class Backend:
    """A ledger under test plus a way to open a second handle on the same storage."""

    name: str
    ledger: Ledger
    reopen: Callable[[], Ledger]


@pytest.fixture(params=["memory", "sqlite", "etcd"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    opened: list[Ledger] = []

    def track(make: Callable[[], Ledger]) -> Callable[[], Ledger]:
        def wrapped() -> Ledger:
            led = make()
            opened.append(led)
            return led
        return wrapped

    if request.param == "memory":
        mem = MemoryLedger()
        reopen: Callable[[], Ledger] = lambda: mem  # noqa: E731 - one process, one store
    elif request.param == "sqlite":
        path = tmp_path / "ledger.sqlite"
        reopen = track(lambda: SqliteLedger(path))
    else:
        endpoint = request.getfixturevalue("etcd_endpoint")
        prefix = f"test/{uuid.uuid4().hex}"
        reopen = track(lambda: EtcdLedger(endpoint, prefix=prefix))
    yield Backend(request.param, reopen(), reopen)
    for led in opened:
        led.close()


# -- the contract -------------------------------------------------------------------------------------


def test_an_appended_cycle_is_read_back_equal_with_all_its_decisions(backend: Backend) -> None:
    led, c = backend.ledger, cycle("c1", n=4)
    assert led.append_cycle(c) is True
    assert led.get_cycle(CycleId("c1")) == c
    for d in c.decisions:
        assert led.get_decision(d.decision_id) == d
    assert led.cycles() == [c]
    assert [d.decision_id for d in led.get_cycle(CycleId("c1")).decisions] == [d.decision_id for d in c.decisions]  # type: ignore[union-attr]


def test_a_cycle_without_decisions_is_stored_too(backend: Backend) -> None:
    c = cycle("empty", n=0)
    assert backend.ledger.append_cycle(c) is True
    assert backend.ledger.get_cycle(CycleId("empty")) == c
    assert backend.ledger.decisions() == []


def test_unknown_ids_read_as_none(backend: Backend) -> None:
    backend.ledger.append_cycle(cycle("c1"))
    assert backend.ledger.get_cycle(CycleId("nope")) is None
    assert backend.ledger.get_decision(DecisionId("nope")) is None
    assert backend.ledger.cycles(run_id=RunId("other-run")) == []


def test_re_appending_an_identical_cycle_returns_false_and_changes_nothing(backend: Backend) -> None:
    led = backend.ledger
    assert led.append_cycle(cycle("c1")) is True
    assert led.append_cycle(cycle("c1")) is False  # an equal, separately built record
    assert led.cycles() == [cycle("c1")]
    assert len(led.decisions()) == 3


def test_a_different_cycle_under_an_existing_cycle_id_raises_conflict_and_writes_nothing(backend: Backend) -> None:
    led = backend.ledger
    led.append_cycle(cycle("c1"))
    changed = dataclasses.replace(cycle("c1"), policy="hpa:target=0.5")
    with pytest.raises(LedgerConflict, match="'c1'"):
        led.append_cycle(changed)
    more = cycle("c1", n=5)  # same id, two extra decisions
    with pytest.raises(LedgerConflict):
        led.append_cycle(more)
    assert led.get_cycle(CycleId("c1")) == cycle("c1")
    assert led.get_decision(DecisionId("c1-d4")) is None


def test_a_decision_id_taken_by_another_cycle_raises_conflict_and_no_part_of_the_new_cycle_is_visible(
    backend: Backend,
) -> None:
    led = backend.ledger
    led.append_cycle(cycle("c1"))
    fresh = [decision("c2-a", "c2"), decision("c2-b", "c2")]
    stolen = dataclasses.replace(decision("c1-d1", "c2"), target="code")
    bad = CycleRecord(CycleId("c2"), RunId("r1"), 2_000, "ebb", (*fresh, stolen))
    with pytest.raises(LedgerConflict, match="c1-d1"):
        led.append_cycle(bad)
    assert led.get_cycle(CycleId("c2")) is None
    assert led.get_decision(DecisionId("c2-a")) is None and led.get_decision(DecisionId("c2-b")) is None
    assert led.get_decision(DecisionId("c1-d1")) == cycle("c1").decisions[1]
    assert [c.cycle_id for c in led.cycles()] == ["c1"]


def test_cycles_are_ordered_by_time_then_id_and_limit_keeps_the_most_recent(backend: Backend) -> None:
    led = backend.ledger
    for cid, ts in [("b", 300), ("a", 300), ("z", 100), ("m", 200), ("c", 900)]:
        led.append_cycle(cycle(cid, ts_ns=ts, n=1))
    assert [c.cycle_id for c in led.cycles()] == ["z", "m", "a", "b", "c"]
    assert [c.cycle_id for c in led.cycles(limit=2)] == ["b", "c"]
    assert led.cycles(limit=0) == []
    with pytest.raises(ValueError, match="-1"):
        led.cycles(limit=-1)


def test_decisions_filter_by_run_and_target_and_are_ordered_by_time_then_id(backend: Backend) -> None:
    led = backend.ledger
    led.append_cycle(cycle("r1-c2", "r1", ts_ns=200))
    led.append_cycle(cycle("r1-c1", "r1", ts_ns=100))
    led.append_cycle(cycle("r2-c1", "r2", ts_ns=150))
    assert [c.cycle_id for c in led.cycles(run_id=RunId("r1"))] == ["r1-c1", "r1-c2"]
    assert [d.decision_id for d in led.decisions(run_id=RunId("r2"))] == ["r2-c1-d0", "r2-c1-d1", "r2-c1-d2"]
    chat = led.decisions(target="chat")
    assert [d.decision_id for d in chat] == ["r1-c1-d0", "r2-c1-d0", "r1-c2-d0"]
    assert [d.decision_id for d in led.decisions(run_id=RunId("r1"), target="code")] == ["r1-c1-d1", "r1-c2-d1"]
    assert len(led.decisions()) == 9
    assert led.decisions(target="nothing") == []


def test_ids_with_slashes_and_unicode_do_not_collide_or_leak_between_runs(backend: Backend) -> None:
    led = backend.ledger
    led.append_cycle(cycle("a/b", "run/1", n=1))
    led.append_cycle(cycle("a", "run", n=1))
    led.append_cycle(cycle("ü✓", "run/10", n=1))
    assert [c.cycle_id for c in led.cycles(run_id=RunId("run"))] == ["a"]
    assert [c.cycle_id for c in led.cycles(run_id=RunId("run/1"))] == ["a/b"]
    assert led.get_cycle(CycleId("ü✓")) == cycle("ü✓", "run/10", n=1)


def test_a_concurrent_reader_never_sees_part_of_a_cycle(backend: Backend) -> None:
    writer, reader = backend.ledger, backend.reopen()
    n_cycles, n_dec = 30, 12
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for k in range(n_cycles):
                writer.append_cycle(cycle(f"w{k:03d}", ts_ns=k, n=n_dec))
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=write)
    t.start()
    try:
        while True:
            finished = done.is_set()
            by_cycle: dict[str, int] = {}
            for d in reader.decisions():
                by_cycle[d.cycle_id] = by_cycle.get(d.cycle_id, 0) + 1
            seen_cycles = reader.cycles()
            assert all(count == n_dec for count in by_cycle.values()), by_cycle
            assert all(len(c.decisions) == n_dec for c in seen_cycles)
            if finished:
                break
    finally:
        t.join()
    assert not errors, errors
    assert len(reader.cycles()) == n_cycles


@pytest.mark.parametrize("backend", ["sqlite", "etcd"], indirect=True)
def test_a_reopened_ledger_still_holds_every_cycle(backend: Backend) -> None:
    cs = [cycle(f"c{k}", ts_ns=k * 10) for k in range(5)]
    for c in cs:
        backend.ledger.append_cycle(c)
    backend.ledger.close()
    again = backend.reopen()
    assert again.cycles() == cs
    assert again.append_cycle(cs[0]) is False
    assert again.get_decision(DecisionId("c3-d2")) == cs[3].decisions[2]


# -- malformed rows: a bad row hides only itself ----------------------------------------------------
#
# The memory backend stores validated records and cannot hold a malformed row; SQLite and etcd can (a
# damaged file, a forged or hand-edited key), so these run on those two. Each helper damages one
# stored row the way an outsider could.


def _damage_cycle(backend: Backend, cid: str) -> None:
    """Make the stored cycle ``cid`` undecodable (SQLite: a decision row's action; etcd: the value)."""
    _damage(backend, "UPDATE decisions SET action = 'explode' WHERE cycle_id = ?", cid,
            lambda led: led._cycle_key(cid), b"not json")


def _damage_decision(backend: Backend, did: str) -> None:
    """Make the stored decision ``did`` undecodable (SQLite: a negative replica count; etcd: the value)."""
    _damage(backend, "UPDATE decisions SET to_replicas = -3 WHERE decision_id = ?", did,
            lambda led: led._decision_key(did), b'{"decision_id": 5}')


def _damage(backend: Backend, sql: str, key: str, etcd_key: Callable[[EtcdLedger], bytes], etcd_value: bytes) -> None:
    """SQLite: run ``sql`` for ``key`` with CHECK constraints off; etcd: put ``etcd_value`` at ``etcd_key(ledger)``."""
    led = backend.ledger
    if backend.name == "sqlite":
        assert isinstance(led, SqliteLedger)
        with sqlite3.connect(led.path) as conn:
            conn.execute("PRAGMA ignore_check_constraints=ON")
            conn.execute(sql, (key,))
        conn.close()
    else:
        assert isinstance(led, EtcdLedger)
        _etcd_put(led, etcd_key(led), etcd_value)


def _etcd_put(led: EtcdLedger, key: bytes, value: bytes) -> None:
    import base64

    led._gw.post("/kv/put", {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()},
                 "test put")


@pytest.mark.parametrize("backend", ["sqlite", "etcd"], indirect=True)
def test_a_malformed_cycle_is_skipped_by_listings_and_named_in_skipped_and_the_log(
    backend: Backend, caplog: pytest.LogCaptureFixture,
) -> None:
    led = backend.ledger
    for k in range(3):
        led.append_cycle(cycle(f"c{k}", ts_ns=k * 10))
    _damage_cycle(backend, "c1")
    with caplog.at_level("WARNING", logger="ebb.ledger"):
        got = led.cycles()
    assert [c.cycle_id for c in got] == ["c0", "c2"]
    assert len(led.skipped) == 1 and led.skipped[0].kind == "cycle" and "c1" in led.skipped[0].key
    assert "c1" in led.skipped[0].error and "fix:" in led.skipped[0].error
    warnings = [r for r in caplog.records if r.name == "ebb.ledger" and r.levelname == "WARNING"]
    assert len(warnings) == 1 and "c1" in warnings[0].getMessage()
    assert [c.cycle_id for c in led.cycles(run_id=RunId("r1"))] == ["c0", "c2"]
    assert len(led.skipped) == 1
    assert led.cycles(run_id=RunId("other")) == [] and led.skipped == ()  # reset by every call


@pytest.mark.parametrize("backend", ["sqlite", "etcd"], indirect=True)
def test_reading_a_malformed_cycle_by_id_raises_input_error_naming_the_ledger_and_the_row(backend: Backend) -> None:
    led = backend.ledger
    led.append_cycle(cycle("c1"))
    _damage_cycle(backend, "c1")
    with pytest.raises(InputError, match="c1") as info:
        led.get_cycle(CycleId("c1"))
    where = str(getattr(led, "path", "")) if backend.name == "sqlite" else led.endpoint  # type: ignore[attr-defined]
    assert where in str(info.value) and "fix:" in str(info.value)


@pytest.mark.parametrize("backend", ["sqlite", "etcd"], indirect=True)
def test_a_malformed_row_is_never_overwritten_by_an_append_under_its_id(backend: Backend) -> None:
    led = backend.ledger
    led.append_cycle(cycle("c1"))
    _damage_cycle(backend, "c1")
    with pytest.raises(InputError):
        led.append_cycle(cycle("c1"))
    with pytest.raises(InputError):  # still the damaged row, not a repaired one
        led.get_cycle(CycleId("c1"))
    assert led.append_cycle(cycle("c2", ts_ns=5)) is True and [c.cycle_id for c in led.cycles()] == ["c2"]


@pytest.mark.parametrize("backend", ["sqlite", "etcd"], indirect=True)
def test_a_malformed_decision_is_skipped_by_decisions_and_raises_from_get_decision(backend: Backend) -> None:
    led = backend.ledger
    led.append_cycle(cycle("c1", n=3))
    _damage_decision(backend, "c1-d1")
    assert [d.decision_id for d in led.decisions()] == ["c1-d0", "c1-d2"]
    assert [(r.kind, "c1-d1" in r.key) for r in led.skipped] == [("decision", True)]
    with pytest.raises(InputError, match="c1-d1"):
        led.get_decision(DecisionId("c1-d1"))
    assert led.get_decision(DecisionId("c1-d0")) == cycle("c1", n=3).decisions[0]


def test_the_memory_ledger_never_skips_anything() -> None:
    led = MemoryLedger()
    led.append_cycle(cycle("c1"))
    assert len(led.cycles()) == 1 and led.skipped == () and len(led.decisions()) == 3 and led.skipped == ()


def test_etcd_skips_a_record_stored_under_another_records_key_and_a_cycle_listed_under_another_run(
    etcd_endpoint: str,
) -> None:
    pytest.importorskip("etcd3gw")
    with EtcdLedger(etcd_endpoint, prefix=f"test/{uuid.uuid4().hex}") as led:
        led.append_cycle(cycle("a", "r1"))
        led.append_cycle(cycle("b", "r2"))
        _etcd_put(led, led._cycle_key("forged"), cycle("a", "r1").to_json().encode())  # a copy under another key
        _etcd_put(led, led._run_prefix("r1") + b"b", b"b")  # r1's index names r2's cycle
        _etcd_put(led, led._run_prefix("r1") + b"gone", b"gone")  # names a cycle that is not stored
        assert sorted(c.cycle_id for c in led.cycles()) == ["a", "b"]
        assert [r.key.rsplit("/", 1)[-1] for r in led.skipped] == ["forged"]
        assert [c.cycle_id for c in led.cycles(RunId("r1"))] == ["a"]
        assert sorted(r.key.rsplit("/", 1)[-1] for r in led.skipped) == ["b", "gone"]
        with pytest.raises(InputError, match="forged"):
            led.get_cycle(CycleId("forged"))


# -- fencing: a deposed leader cannot write ----------------------------------------------------------


@dataclass
class Election:
    """Two successive leaders' fences: ``old`` was deposed by ``new`` (a real etcd election for etcd)."""

    old: Fence
    new: Fence


@pytest.fixture
def election(backend: Backend) -> Iterator[Election]:
    if backend.name != "etcd":
        yield Election(Fence("/ebb/leader", 5), Fence("/ebb/leader", 9))
        return
    from ebb.ledger.election import LeaderElector

    endpoint, key = backend.ledger.endpoint, f"/test/{uuid.uuid4().hex}/leader"  # type: ignore[attr-defined]
    with LeaderElector(endpoint, key, "old", ttl_s=3) as old, LeaderElector(endpoint, key, "new", ttl_s=3) as new:
        f_old = old.campaign(timeout_s=20)
        assert f_old is not None and old.resign()
        f_new = new.campaign(timeout_s=20)
        assert f_new is not None
        yield Election(f_old, f_new)


def fenced(cid: str, fence: Fence, *, ts_ns: int = 1_000, n: int = 3) -> CycleRecord:
    return dataclasses.replace(cycle(cid, ts_ns=ts_ns, n=n), fencing_token=fence.token)


def test_the_current_leaders_fenced_cycle_is_stored_with_its_token(backend: Backend, election: Election) -> None:
    c = fenced("c1", election.new)
    assert backend.ledger.append_cycle(c, fence=election.new) is True
    assert backend.ledger.get_cycle(CycleId("c1")) == c and c.fencing_token == election.new.token
    assert backend.ledger.append_cycle(c, fence=election.new) is False


def test_a_cycle_whose_token_differs_from_its_fence_is_refused_before_anything_is_written(
    backend: Backend, election: Election,
) -> None:
    with pytest.raises(ValueError, match=f"fencing_token=7.*token {election.new.token}"):
        backend.ledger.append_cycle(cycle("c1"), fence=election.new)  # cycle() carries token 7
    assert backend.ledger.get_cycle(CycleId("c1")) is None


def test_after_the_new_leader_wrote_the_old_leaders_fenced_write_raises_not_leader_and_writes_nothing(
    backend: Backend, election: Election,
) -> None:
    led = backend.ledger
    assert led.append_cycle(fenced("new-1", election.new, ts_ns=2_000), fence=election.new) is True
    with pytest.raises(NotLeader, match=f"token {election.old.token}"):
        led.append_cycle(fenced("old-1", election.old, ts_ns=3_000), fence=election.old)
    assert led.get_cycle(CycleId("old-1")) is None and led.get_decision(DecisionId("old-1-d0")) is None
    with pytest.raises(NotLeader):  # the fence is checked first, even for a cycle already stored
        led.append_cycle(fenced("new-1", election.old, ts_ns=2_000), fence=election.old)
    assert led.append_cycle(fenced("new-2", election.new, ts_ns=4_000), fence=election.new) is True
    assert [c.cycle_id for c in led.cycles()] == ["new-1", "new-2"]


def test_before_the_new_leader_writes_only_etcd_refuses_the_old_leader(backend: Backend, election: Election) -> None:
    """etcd sees the election itself; SQLite and memory only see the tokens already stored."""
    old = fenced("old-1", election.old)
    if backend.name == "etcd":
        with pytest.raises(NotLeader):
            backend.ledger.append_cycle(old, fence=election.old)
        assert backend.ledger.cycles() == []
    else:
        assert backend.ledger.append_cycle(old, fence=election.old) is True
        assert backend.ledger.cycles() == [old]


def test_unfenced_appends_check_no_token(backend: Backend, election: Election) -> None:
    backend.ledger.append_cycle(fenced("new-1", election.new), fence=election.new)
    assert backend.ledger.append_cycle(fenced("plain", election.old)) is True


def test_the_memory_ledger_refuses_every_fence_but_its_current_token() -> None:
    led = MemoryLedger(current_token=9)
    with pytest.raises(NotLeader, match="current token is 9"):
        led.append_cycle(fenced("c1", Fence("k", 12)), fence=Fence("k", 12))
    assert led.append_cycle(fenced("c2", Fence("k", 9)), fence=Fence("k", 9)) is True
    led.current_token = 12  # a new election
    with pytest.raises(NotLeader):
        led.append_cycle(fenced("c3", Fence("k", 9)), fence=Fence("k", 9))
    assert [c.cycle_id for c in led.cycles()] == ["c2"]


@pytest.mark.parametrize(("kw", "match"), [
    ({"key": ""}, "key"), ({"token": 0}, "token"), ({"lease_id": -1}, "lease_id"),
    ({"valid_until_s": float("nan")}, "valid_until_s"),
])
def test_a_fence_with_an_invalid_field_is_refused(kw: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"key": "k", "token": 1, **kw}
    with pytest.raises(ValueError, match=match):
        Fence(**args)  # type: ignore[arg-type]


# -- every field survives the round trip (Hypothesis) -------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_ids = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
_finite = st.floats(allow_nan=False, allow_infinity=False)
_json: st.SearchStrategy[JSON] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _finite | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
_count = st.integers(0, 2**63 - 1)

decisions_st = st.builds(
    DecisionRecord,
    decision_id=_ids.map(DecisionId), cycle_id=st.just(CycleId("x")), run_id=_ids.map(RunId), ts_ns=_count,
    target=_ids, action=st.sampled_from(ACTIONS), from_replicas=_count, to_replicas=_count,
    reasons=st.lists(_text, max_size=3).map(tuple), signals=st.dictionaries(_text, _finite, max_size=4),
    weights=st.dictionaries(_text, _finite, max_size=3), vetoes=st.lists(_text, max_size=2).map(tuple),
    victims=st.lists(_ids, max_size=3).map(tuple), plan=st.dictionaries(_text, _json, max_size=4),
    caused_by=st.lists(_ids.map(lambda s: DecisionId("p:" + s)), max_size=3).map(tuple),
)


@given(d=decisions_st)
def test_a_decision_record_survives_its_own_json_round_trip(d: DecisionRecord) -> None:
    assert DecisionRecord.from_json(d.to_json()) == d
    assert DecisionRecord.from_json(d.to_json()).to_json() == d.to_json()


_counter = itertools.count()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ds=st.lists(decisions_st, min_size=1, max_size=3),
       snapshot=st.dictionaries(_text, _json, max_size=4), policy=_text, token=_count)
def test_every_field_of_every_decision_survives_the_ledger_round_trip(
    backend: Backend, ds: list[DecisionRecord], snapshot: dict[str, JSON], policy: str, token: int,
) -> None:
    n = next(_counter)
    cid, run = CycleId(f"hyp-{n}"), ds[0].run_id
    fixed = tuple(dataclasses.replace(d, decision_id=DecisionId(f"hyp-{n}-{k}-{d.decision_id}"), cycle_id=cid,
                                      run_id=run) for k, d in enumerate(ds))
    c = CycleRecord(cid, run, ds[0].ts_ns, policy, fixed, snapshot, fencing_token=token)
    assert backend.ledger.append_cycle(c) is True
    assert backend.ledger.get_cycle(cid) == c
    for d in fixed:
        got = backend.ledger.get_decision(d.decision_id)
        assert got == d and got is not None and got.to_json() == d.to_json()
    assert backend.ledger.append_cycle(c) is False


# -- records reject bad values ------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [
    ("decision_id", ""), ("ts_ns", -1), ("from_replicas", -2), ("to_replicas", 2**63), ("action", "evict"),
    ("signals", {"util": float("nan")}), ("plan", {"x": {1, 2}}), ("plan", {1: "int key"}),
])
def test_a_decision_with_an_invalid_field_is_refused_quoting_the_value(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field if field != "plan" else "plan|JSON"):
        dataclasses.replace(decision("d1"), **{field: value})


def test_a_cycle_refuses_decisions_of_another_cycle_or_duplicate_decision_ids() -> None:
    with pytest.raises(ValueError, match="'other'"):
        CycleRecord(CycleId("c1"), RunId("r1"), 0, "p", (decision("d1", "other"),))
    with pytest.raises(ValueError, match="twice"):
        CycleRecord(CycleId("c1"), RunId("r1"), 0, "p", (decision("d1"), decision("d1")))
    with pytest.raises(InputError, match="missing field cycle.policy"):
        CycleRecord.from_json('{"cycle_id": "c1", "run_id": "r1", "ts_ns": 0, "decisions": [], "snapshot": {}}')


# -- backend-specific errors --------------------------------------------------------------------------


def test_a_file_that_is_not_a_database_is_refused_naming_the_path(tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_bytes(b"this is not sqlite, just text " * 200)
    with pytest.raises(InputError, match="notes.txt"):
        SqliteLedger(junk)


def test_an_sqlite_file_of_another_application_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    conn.close()
    with pytest.raises(InputError, match="other.db"):
        SqliteLedger(other)


def test_a_missing_file_is_refused_when_create_is_false(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="missing.sqlite"):
        SqliteLedger(tmp_path / "missing.sqlite", create=False)


def test_a_ledger_locked_by_another_writer_raises_a_transient_error(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    led = SqliteLedger(path, busy_timeout_s=0.05)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(TransientError, match="locked"):
            led.append_cycle(cycle("c1"))
        holder.execute("ROLLBACK")
        assert led.append_cycle(cycle("c1")) is True
    finally:
        holder.close()
        led.close()


def test_an_unreachable_etcd_raises_source_unavailable_naming_the_endpoint() -> None:
    pytest.importorskip("etcd3gw")
    with socket_port() as port:
        led = EtcdLedger(f"http://127.0.0.1:{port}", timeout_s=1.0)
        with pytest.raises(SourceUnavailable, match=f"127.0.0.1:{port}") as info:
            led.get_cycle(CycleId("c1"))
        assert info.value.__cause__ is not None
        led.close()


def test_an_etcd_cycle_larger_than_one_transaction_is_refused_before_sending() -> None:
    pytest.importorskip("etcd3gw")
    led = EtcdLedger("http://127.0.0.1:1", max_txn_ops=5)
    with pytest.raises(Exception, match="at most 3"):
        led.append_cycle(cycle("big", n=4))
    led.close()


def test_a_fenced_etcd_cycle_has_one_decision_less_room_in_its_transaction() -> None:
    pytest.importorskip("etcd3gw")
    led = EtcdLedger("http://127.0.0.1:1", max_txn_ops=5)
    with pytest.raises(Exception, match="at most 2"):
        led.append_cycle(fenced("big", Fence("k", 7), n=3), fence=Fence("k", 7))
    led.close()


def test_open_ledger_picks_the_backend_from_the_location(tmp_path: Path) -> None:
    led = open_ledger(tmp_path / "x.sqlite")
    assert isinstance(led, SqliteLedger)
    led.close()
    led = open_ledger(f"sqlite://{tmp_path / 'y.sqlite'}")
    assert isinstance(led, SqliteLedger) and led.path.endswith("y.sqlite")
    led.close()
    assert isinstance(open_ledger("memory:"), MemoryLedger)
    pytest.importorskip("etcd3gw")
    e = open_ledger("etcd://127.0.0.1:2379/my/prefix")  # connects lazily: nothing is sent here
    assert isinstance(e, EtcdLedger) and e.prefix == "my/prefix" and e.endpoint == "http://127.0.0.1:2379"
    e.close()


class socket_port:
    """A loopback port with nothing listening on it (bound, not listening, while in use)."""

    def __enter__(self) -> int:
        import socket

        self._s = socket.socket()
        self._s.bind(("127.0.0.1", 0))
        return int(self._s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._s.close()
