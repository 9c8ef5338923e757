"""ParsePool: engine pages parsed in worker threads within a budget; an overrun rests its endpoint."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ebb.agent.parse_pool import MIN_BUDGET_S, ParsePool, default_budget_s
from ebb.errors import InputError

POD = "http://10.0.0.7:8000/metrics"


def test_a_page_is_parsed_off_the_event_loops_thread() -> None:
    pool = ParsePool(budget_s=5.0)

    async def go() -> tuple[str, str]:
        here = threading.current_thread().name
        return here, await pool.parse(POD, lambda: threading.current_thread().name)

    loop_thread, parse_thread = asyncio.run(go())
    pool.close()
    assert parse_thread != loop_thread and parse_thread.startswith("ebb-parse")


def test_a_page_over_budget_is_an_error_naming_the_pod_then_the_pod_rests() -> None:
    pool = ParsePool(budget_s=0.05)
    release = threading.Event()

    def slow() -> int:
        release.wait(10)
        return 1

    async def go() -> list[str]:
        said: list[str] = []
        with pytest.raises(InputError) as over:
            await pool.parse(POD, slow)
        said.append(str(over.value))
        with pytest.raises(InputError) as busy:  # still parsing in its thread: not polled
            pool.check(POD)
        said.append(str(busy.value))
        release.set()
        for _ in range(500):  # the thread ends, its end reaches the loop: the pod rests 9x the parse's time
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
    assert POD in over and "not parsed within the 0.05 s budget" in over and "--parse-budget-ms" in over
    assert "still being parsed" in busy
    assert "cooling down" in resting
    assert pool.over_budget == 1


def test_other_pods_parse_while_one_overruns() -> None:
    pool = ParsePool(budget_s=0.05, workers=2)
    release = threading.Event()

    async def go() -> int:
        with pytest.raises(InputError):
            await pool.parse("http://hostile/metrics", lambda: release.wait(10))
        ok = await pool.parse(POD, lambda: 7)
        release.set()
        return ok

    assert asyncio.run(go()) == 7
    pool.close()


def test_the_default_budget_is_a_bucket_and_at_least_250_ms() -> None:
    assert default_budget_s(100) == MIN_BUDGET_S == 0.25
    assert default_budget_s(1000) == 1.0


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ParsePool(budget_s=0.0)
