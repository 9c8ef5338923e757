"""ParsePool: engine pages parsed in worker threads, judged by their CPU time; an overrun rests its endpoint."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ebb.agent.parse_pool import MIN_BUDGET_S, MIN_WALL_S, ParsePool, default_budget_s
from ebb.errors import InputError

POD = "http://10.0.0.7:8000/metrics"


def burn(cpu_s: float) -> int:
    """Spin for ``cpu_s`` of this thread's CPU time."""
    end = time.thread_time() + cpu_s
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def test_a_page_is_parsed_off_the_event_loops_thread() -> None:
    pool = ParsePool(budget_s=5.0)

    async def go() -> tuple[str, str]:
        here = threading.current_thread().name
        return here, await pool.parse(POD, lambda: threading.current_thread().name)

    loop_thread, parse_thread = asyncio.run(go())
    pool.close()
    assert parse_thread != loop_thread and parse_thread.startswith("ebb-parse")


def test_a_parse_that_waits_without_using_cpu_is_no_overrun() -> None:
    # a convoy on the interpreter lock (or a throttled container) costs wall time, not the page's CPU
    pool = ParsePool(budget_s=0.01)

    async def go() -> int:
        out = await pool.parse(POD, lambda: time.sleep(0.2) or 7)
        pool.check(POD)  # not resting
        return out

    assert asyncio.run(go()) == 7 and pool.over_budget == 0
    pool.close()


def test_a_page_over_its_cpu_budget_is_used_and_its_pod_rests() -> None:
    pool = ParsePool(budget_s=0.02)

    async def go() -> tuple[int, str]:
        out = await pool.parse(POD, lambda: burn(0.05))
        with pytest.raises(InputError) as resting:
            pool.check(POD)
        return out, str(resting.value)

    out, resting = asyncio.run(go())
    pool.close()
    assert out > 0 and "cooling down" in resting and POD in resting and pool.over_budget == 1


def test_a_page_past_the_wall_limit_is_an_error_naming_the_pod_then_the_pod_rests() -> None:
    pool = ParsePool(budget_s=0.05)
    release = threading.Event()

    def stuck() -> int:
        release.wait(10)
        burn(0.01)
        return 1

    async def go() -> list[str]:
        said: list[str] = []
        with pytest.raises(InputError) as over:
            await pool.parse(POD, stuck)
        said.append(str(over.value))
        with pytest.raises(InputError) as busy:  # still parsing in its thread: not polled
            pool.check(POD)
        said.append(str(busy.value))
        release.set()
        for _ in range(500):  # the thread ends, its end reaches the loop: the pod rests 9x its CPU
            await asyncio.sleep(0.01)
            with pytest.raises(InputError) as resting:
                pool.check(POD)
            if "cooling down" in str(resting.value):
                break
        said.append(str(resting.value))
        pool.forget(POD)  # the pod left: no cooldown to keep
        pool.check(POD)
        return said

    over, busy, resting = asyncio.run(go())
    pool.close()
    assert POD in over and f"not parsed within {MIN_WALL_S:g} s" in over and "--parse-budget-ms" in over
    assert "still being parsed" in busy
    assert "cooling down" in resting
    assert pool.over_budget == 1


def test_other_pods_parse_while_one_is_stuck() -> None:
    pool = ParsePool(budget_s=0.05, workers=2)
    release = threading.Event()

    async def go() -> int:
        stuck = asyncio.ensure_future(pool.parse("http://hostile/metrics", lambda: release.wait(10)))
        await asyncio.sleep(0.05)
        ok = await pool.parse(POD, lambda: 7)
        release.set()
        await stuck
        return ok

    assert asyncio.run(go()) == 7
    pool.close()


def test_the_default_budget_is_a_bucket_of_cpu_and_at_least_100_ms() -> None:
    assert default_budget_s(100) == MIN_BUDGET_S == 0.1
    assert default_budget_s(1000) == 1.0
    assert ParsePool(0.1).wall_s == MIN_WALL_S == 1.0 and ParsePool(0.5).wall_s == 2.0


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ParsePool(budget_s=0.0)
