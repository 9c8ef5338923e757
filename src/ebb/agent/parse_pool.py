"""Engine pages parsed off the agent's event loop, each within a CPU budget and a wall-time limit.

An engine's ``/metrics`` page is parsed in Python: about 4 ms of CPU for a real 52 KB vLLM page,
0.25 s per MiB of plain samples and up to 0.7 s per MiB of escaped label values
(``bench/engine_scrape.py``; linear in the page size on every input the fuzzer knows). On the event
loop, one hostile or just large page (the 4 MiB cap) stalled every bucket, ``/healthz`` and the
controller's reads for seconds. :class:`ParsePool` guarantees instead:

* **The loop never parses.** Pages are parsed in at most ``workers`` (2) threads; the loop only
  awaits them. The threads share the interpreter lock with the loop, which still gets a turn every
  5 ms (Python's switch interval), so buckets keep closing while a page is parsed.
* **A CPU budget per page, and a wall-time limit.** A page whose parse used more than
  ``budget_s`` of its thread's CPU time (by default a bucket, at least 100 ms: 25 times a real
  page) is an overrun; so is one not parsed within ``wall_s`` (4 budgets, at least 1 s). CPU time,
  not wall time, judges a page: a parse waiting for the interpreter lock behind busy I/O threads
  (a convoy: a 4 ms parse measured 250 ms of wall time in a test process that also served the
  pages) or for a CPU-throttled container is no fault of the page. A page past the wall limit
  raises :class:`~ebb.errors.InputError` naming the endpoint and the limits: the agent lists the
  endpoint as missing for that bucket, and the controller sees an incomplete fleet (no scale-down;
  scale-ups on the others' demand extrapolated). A page still waiting for a thread then is never
  parsed. A page parsed in time but over its CPU budget is used, and its endpoint rests (below).
* **One page per endpoint at a time, and an overrun costs at most a tenth.** A parse past the wall
  limit finishes in its thread (a thread cannot be stopped) and is discarded; until it ends, and
  then for :data:`COOLDOWN_FACTOR` (9) times the CPU it used, its endpoint is not polled
  (:meth:`ParsePool.check` raises InputError "cooling down"), so a pod whose every page overruns
  gets at most a tenth of one thread, never every thread, and the loop keeps its time for the
  others.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import time
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from ebb.errors import InputError

__all__ = ["COOLDOWN_FACTOR", "MIN_BUDGET_S", "MIN_WALL_S", "ParsePool", "default_budget_s"]

T = TypeVar("T")

MIN_BUDGET_S: Final = 0.1
"""Smallest default CPU budget (s): 25 times a real vLLM page's parse."""
MIN_WALL_S: Final = 1.0
"""Smallest wall-time limit (s): what a page may wait for the interpreter lock and a thread."""
COOLDOWN_FACTOR: Final = 9.0
"""An overrunning endpoint rests this many times its parse's CPU time (so it gets at most 1/10)."""


def default_budget_s(bucket_ms: int) -> float:
    """A bucket of CPU, at least :data:`MIN_BUDGET_S`."""
    return max(MIN_BUDGET_S, bucket_ms / 1000)


class _Timed(Generic[T]):
    """``parse()`` run in a worker thread, with the CPU time that thread spent on it."""

    __slots__ = ("cpu_s", "parse")

    def __init__(self, parse: Callable[[], T]) -> None:
        self.parse = parse
        self.cpu_s = 0.0

    def __call__(self) -> T:
        t0 = time.thread_time()
        try:
            return self.parse()
        finally:
            self.cpu_s = time.thread_time() - t0


class ParsePool:
    """Parses pages in worker threads within a CPU budget and a wall limit (see the module docstring)."""

    def __init__(self, budget_s: float, workers: int = 2) -> None:
        if not budget_s > 0 or workers < 1:
            raise ValueError(f"budget_s must be > 0 and workers >= 1, got {budget_s!r}, {workers!r}")
        self.budget_s = budget_s
        self.wall_s = max(MIN_WALL_S, 4 * budget_s)
        self.workers = workers
        self._pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ebb-parse")
        self._busy: set[str] = set()
        self._rest_until: dict[str, float] = {}  # endpoint -> monotonic time its cooldown ends
        self._overran: set[str] = set()  # endpoints whose parse in flight passed the wall limit
        self.over_budget = 0
        """Pages over their CPU budget or past the wall limit."""

    def check(self, endpoint: str) -> None:
        """InputError when ``endpoint`` must not be polled now: its last overrunning page is still
        being parsed, or it is cooling down after one (module docstring). Call before fetching."""
        if endpoint in self._busy:
            raise InputError(f"its previous page is still being parsed (past the {self.wall_s:g} s limit); "
                             "not polled", path=endpoint, fix=_FIX)
        rest = self._rest_until.get(endpoint, 0.0) - time.monotonic()
        if rest > 0:
            raise InputError(f"cooling down {rest:.1f} s more after a page over the {self.budget_s:g} s CPU "
                             "budget; not polled", path=endpoint, fix=_FIX)

    async def parse(self, endpoint: str, parse: Callable[[], T]) -> T:
        """``parse()`` run in a worker thread; InputError naming ``endpoint`` when it passed the wall
        limit (or :meth:`check` refuses it). A result over the CPU budget is returned, and the
        endpoint rests."""
        self.check(endpoint)
        loop = asyncio.get_running_loop()
        timed = _Timed(parse)
        self._busy.add(endpoint)
        job = self._pool.submit(timed)
        job.add_done_callback(lambda _: _call_soon(loop, self._done, endpoint, timed))
        try:
            out = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(job)), self.wall_s)
        except TimeoutError:
            job.cancel()  # never started: it never will; started: it ends alone, discarded
            self.over_budget += 1
            self._overran.add(endpoint)  # it rests once the parse ends (_done)
            raise InputError(f"page not parsed within {self.wall_s:g} s (CPU budget {self.budget_s:g} s)",
                             path=endpoint, fix=_FIX) from None
        if timed.cpu_s > self.budget_s:
            self.over_budget += 1
            self._rest(endpoint, timed.cpu_s)
        return out

    def _rest(self, endpoint: str, cpu_s: float) -> None:
        self._rest_until[endpoint] = time.monotonic() + COOLDOWN_FACTOR * cpu_s

    def _done(self, endpoint: str, timed: _Timed[Any]) -> None:
        """A parse of ``endpoint`` ended (or was dropped unstarted): free the endpoint; one past the
        wall limit rests :data:`COOLDOWN_FACTOR` times the CPU it used."""
        self._busy.discard(endpoint)
        if endpoint in self._overran:
            self._overran.discard(endpoint)
            self._rest(endpoint, timed.cpu_s)

    def forget(self, endpoint: str) -> None:
        """Drop ``endpoint``'s cooldown (it left the fleet)."""
        self._rest_until.pop(endpoint, None)

    def close(self) -> None:
        """Drop the pages not started; threads still parsing end alone (daemon work, results discarded)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


_FIX: Final = ("a page this slow to parse is usually huge (tens of thousands of series): trim the engine's "
               "metrics, or raise the agent's --parse-budget-ms")


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[str, _Timed[Any]], None], endpoint: str,
               timed: _Timed[Any]) -> None:
    try:
        loop.call_soon_threadsafe(fn, endpoint, timed)
    except RuntimeError:
        pass  # the loop closed first: nothing left to tell
