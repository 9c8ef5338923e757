"""The asleep tier's engine-specific half (ebb.actuate.sleep_modes) and the shared book's doze step.

llama.cpp's idle sleep: a drained server is asleep once ``/props`` says so, waiting until its bound
(``--sleep-idle-seconds`` + 1 s + 3 s), failed past it; an unreadable ``/props`` is never asleep nor
awake. The book counts dozing victims against ``max``, measures each wake it judges, and wakes
through whatever mode it was given. No real engine and no timing here: the live runs are in
tests/integration/test_llamacpp_sleep.py.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ebb.actuate.engine_http import EngineCallError, EngineHttp
from ebb.actuate.local_sleep import SleepBook, SleepCounts, SleepingLauncher
from ebb.actuate.local_procs import EbbWorkerLauncher
from ebb.actuate.sleep_modes import FALL_ASLEEP_SLACK_S, LlamaIdleSleep, SleepStep, VllmSleep, doze_step
from ebb.config.tiers import SleepTier
from ebb.demo.llamacpp import LlamaServerLauncher
from ebb.errors import ConfigError
from ebb.testing.hostile_http import HostilePeer, answer


@pytest.mark.parametrize(("reads", "waited_s", "want"), [
    (True, 0.0, "asleep"), (True, 99.0, "asleep"),
    (False, 0.0, "waiting"), (False, 6.0, "waiting"), (False, 6.01, "failed"),
    (None, 1.0, "waiting"), (None, 7.0, "failed"),
])
def test_a_drained_server_is_asleep_once_it_reads_so_and_failed_past_its_bound(
        reads: bool | None, waited_s: float, want: SleepStep) -> None:
    assert LlamaIdleSleep(2).bound_s == 2 + 1 + FALL_ASLEEP_SLACK_S == 6.0
    assert doze_step(reads, waited_s, LlamaIdleSleep(2).bound_s) == want


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, 86401])
def test_a_bad_idle_time_is_one_config_error_line(bad: object) -> None:
    with pytest.raises(ConfigError, match="--sleep-idle-seconds must be a whole number") as info:
        LlamaIdleSleep(bad)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError):
        LlamaServerLauncher("/bin/llama-server", Path("m.gguf"), Path("."), sleep_idle_s=bad)  # type: ignore[arg-type]


def test_the_launcher_starts_servers_with_the_idle_sleep_only_for_a_tier(tmp_path: Path) -> None:
    plain = LlamaServerLauncher("/bin/llama-server", tmp_path / "m.gguf", tmp_path)
    assert "--sleep-idle-seconds" not in plain.launch("worker-0", plain.slots).args and plain.sleep_mode is None
    sleepy = LlamaServerLauncher("/bin/llama-server", tmp_path / "m.gguf", tmp_path, sleep_idle_s=3)
    args = list(sleepy.launch("worker-1", sleepy.slots).args)
    assert args[args.index("--sleep-idle-seconds") + 1] == "3"
    assert sleepy.sleep_mode == LlamaIdleSleep(3) and isinstance(sleepy, SleepingLauncher)
    assert EbbWorkerLauncher(sleep_level=2).sleep_mode == VllmSleep(2)
    assert "llama.cpp" in LlamaIdleSleep(3).describe and "/sleep?level=2" in VllmSleep(2).describe


@pytest.mark.parametrize(("body", "status", "asleep", "awake"), [
    (b'{"is_sleeping": true, "total_slots": 2}', "200 OK", "asleep", False),
    (b'{"is_sleeping": false}', "200 OK", "waiting", True),
    (b'{"is_sleeping": "no"}', "200 OK", "waiting", False),  # not a bool: unknown, neither asleep nor awake
    (b'not json', "200 OK", "waiting", False),
    (b'{"is_sleeping": false}', "503 Service Unavailable", "waiting", False),
])
def test_llama_props_say_asleep_or_awake_and_anything_else_is_neither(
        body: bytes, status: str, asleep: SleepStep, awake: bool) -> None:
    peer = HostilePeer(answer(body, status=status))
    try:
        mode = LlamaIdleSleep(2)
        assert mode.sleep(peer.url, waited_s=0.5) == asleep
        assert mode.awake(peer.url, peer.url + "/health") is awake
        assert all(b"GET /props " in r or b"GET /health " in r for r in peer.requests)
    finally:
        peer.close()


def test_routed_llama_servers_are_pinged_with_a_slot_query_twice_per_idle_period_and_vllm_never() -> None:
    assert LlamaIdleSleep(3).keepalive_s == 1.5 and VllmSleep().keepalive_s is None
    peer = HostilePeer(answer(b"[]"))
    try:
        LlamaIdleSleep(3).keep_awake(peer.url)
        assert [r.split(b"\r\n")[0] for r in peer.requests] == [b"GET /slots HTTP/1.1"]
    finally:
        peer.close()
    LlamaIdleSleep(3).keep_awake(peer.url)  # closed: a missed ping never raises


def test_a_llama_wake_is_a_tokenize_with_a_json_body_and_an_error_raises() -> None:
    ok, bad = HostilePeer(answer(b'{"tokens": [263]}')), HostilePeer(answer(b"{}", status="500 Internal Server Error"))
    try:
        LlamaIdleSleep(2).wake(ok.url, timeout_s=5.0)
        [head] = ok.requests
        assert head.startswith(b"POST /tokenize ") and b"content-type: application/json" in head.lower()
        with pytest.raises(EngineCallError, match="/tokenize answered HTTP 500"):
            LlamaIdleSleep(2).wake(bad.url, timeout_s=5.0)
        with pytest.raises(EngineCallError, match="/props answered"):
            EngineHttp(bad.url, 2.0).props_is_sleeping()
    finally:
        ok.close()
        bad.close()


# ---- the book's doze step and measured wakes (a fake mode: no HTTP) ------------------------------

@dataclass(eq=False)
class W:
    name: str
    url: str = "http://127.0.0.1:9"


@dataclass
class FakeMode:
    woken: list[str] = field(default_factory=list)
    fail: bool = False
    describe: str = "fake"

    def sleep(self, url: str, waited_s: float) -> SleepStep:
        return "asleep"

    def wake(self, url: str, timeout_s: float) -> None:
        self.woken.append(url)
        if self.fail:
            raise EngineCallError(f"POST {url}/wake answered HTTP 500")

    def awake(self, url: str, health_url: str) -> bool:
        return True

    keepalive_s: float | None = None

    def keep_awake(self, url: str) -> None:
        raise AssertionError("the book never pings")


def settled(book: SleepBook[W], w: W) -> None:
    fut: cf.Future[None] = book.waking[w][0]
    cf.wait([fut], timeout=5.0)
    assert fut.done()


def test_dozing_victims_count_against_max_and_each_ends_asleep_failed_or_forgotten() -> None:
    book: SleepBook[W] = SleepBook(SleepTier(wake_s=1.0, max_replicas=2), FakeMode())
    a, b, c = W("a"), W("b"), W("c")
    assert book.doze(a, 0.0) and book.doze(b, 0.0)
    assert not book.doze(c, 0.0) and not book.room()  # two dozing fill max=2 before either sleeps
    book.put(a, 3.0)
    assert [w for w, _ in book.asleep] == [a] and list(book.dozing) == [b] and not book.doze(c, 3.0)
    book.no_sleep(b)
    assert book.counts == SleepCounts(sleeps=1, failed_sleeps=1) and book.room()
    assert book.doze(c, 4.0)
    book.forget(c)  # stopped while dozing: not a failed sleep
    assert book.dozing == {} and book.counts.failed_sleeps == 1
    assert book.doze(c, 5.0) and set(book.close()) == {a, c}


def test_the_book_wakes_through_its_mode_and_keeps_the_slowest_wake() -> None:
    mode = FakeMode()
    book: SleepBook[W] = SleepBook(SleepTier(wake_s=1.0, max_replicas=4), mode)
    old, new = W("old", "http://old"), W("new", "http://new")
    book.put(old, 0.0)
    book.put(new, 1.0)
    assert book.take(1, 10.0) == [new]
    settled(book, new)
    assert mode.woken == ["http://new"]
    assert book.verdict(new, 10.4, is_awake=True) == "awake"
    assert book.take(1, 20.0) == [old]
    settled(book, old)
    assert book.verdict(old, 21.5, is_awake=True) == "awake"
    assert book.counts.wakes == 2 and book.counts.slowest_wake_s == pytest.approx(1.5)
    assert book.counts == SleepCounts(sleeps=2, wakes=2)  # a measurement, not a count: not in ==
    book.close()


def test_a_wake_the_mode_fails_is_a_failed_wake_with_its_error() -> None:
    book: SleepBook[W] = SleepBook(SleepTier(wake_s=1.0), FakeMode(fail=True))
    w = W("w", "http://w")
    book.put(w, 0.0)
    book.take(1, time.monotonic())
    settled(book, w)
    assert "answered HTTP 500" in book.wake_error(w)
    assert book.verdict(w, time.monotonic(), is_awake=True) == "failed"
    assert book.counts.failed_wakes == 1 and book.counts.slowest_wake_s == 0.0
    book.close()
