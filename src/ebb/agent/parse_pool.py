"""Engine pages parsed off the agent's event loop, each within a time budget.

An engine's ``/metrics`` page is parsed in Python: about 4 ms for a real 52 KB vLLM page, 0.25 s per
MiB of plain samples and up to 0.7 s per MiB of escaped label values (``bench/engine_scrape.py``;
linear in the page size on every input the fuzzer knows). On the event loop, one hostile or just
large page (the 4 MiB cap) stalled every bucket, ``/healthz`` and the controller's reads for
seconds. :class:`ParsePool` guarantees instead:

* **The loop never parses.** Pages are parsed in at most ``workers`` (2) threads; the loop only
  awaits them. The threads share the interpreter lock with the loop, which still gets a turn every
  5 ms (Python's switch interval), so buckets keep closing while a page is parsed.
* **A budget per page.** A page not parsed within ``budget_s`` (by default a bucket, at least
  250 ms: a 52 KB page takes 4 ms of CPU, and an agent throttled at its CPU limit can stall for
  half a 100 ms CFS period or more, so a tighter budget would drop healthy pods; a hostile 4 MiB
  page takes 1-3 s) raises :class:`~ebb.errors.InputError` naming the endpoint and
  the budget: the agent lists the endpoint as missing for that bucket, and the controller sees an
  incomplete fleet (no scale-down; scale-ups on the others' demand extrapolated). A page still
  waiting for a thread when its budget ends is never parsed.
* **One page per endpoint at a time, and an overrun costs at most a tenth.** A parse that overran
  its budget finishes in its thread (a thread cannot be stopped) and is discarded; until it ends,
  and then for :data:`COOLDOWN_FACTOR` (9) times as long as it took, that endpoint is not polled
  (:meth:`ParsePool.check` raises InputError "cooling down"), so a pod whose every page overruns
  gets at most a tenth of one thread, never every thread, and the loop keeps its time for the
  others.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import time
from collections.abc import Callable
from typing import Final, TypeVar

from ebb.errors import InputError

__all__ = ["COOLDOWN_FACTOR", "MIN_BUDGET_S", "ParsePool", "default_budget_s"]

T = TypeVar("T")

MIN_BUDGET_S: Final = 0.25
"""Smallest default budget (s): about 60 times a real vLLM page's parse, above a CFS throttling stall."""
COOLDOWN_FACTOR: Final = 9.0
"""An overrunning endpoint rests this many times its parse's duration (so it gets at most 1/10)."""


def default_budget_s(bucket_ms: int) -> float:
    """A bucket, at least :data:`MIN_BUDGET_S` (a bucket's close waits for its parses: an overrun
    delays it by at most this much, and the overrunning pod then rests)."""
    return max(MIN_BUDGET_S, bucket_ms / 1000)


class ParsePool:
    """Parses pages in worker threads within a budget (see the module docstring)."""

    def __init__(self, budget_s: float, workers: int = 2) -> None:
        if not budget_s > 0 or workers < 1:
            raise ValueError(f"budget_s must be > 0 and workers >= 1, got {budget_s!r}, {workers!r}")
        self.budget_s = budget_s
        self.workers = workers
        self._pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ebb-parse")
        self._busy: set[str] = set()
        self._rest_until: dict[str, float] = {}  # endpoint -> monotonic time its cooldown ends
        self._overran: set[str] = set()  # endpoints whose parse in flight overran its budget
        self.over_budget = 0
        """Pages not parsed within the budget (each one a missing endpoint for its bucket)."""

    def check(self, endpoint: str) -> None:
        """InputError when ``endpoint`` must not be polled now: its last overrunning page is still
        being parsed, or it is cooling down after one (module docstring). Call before fetching."""
        if endpoint in self._busy:
            raise InputError(f"its previous page is still being parsed (over the {self.budget_s:g} s budget); "
                             "not polled", path=endpoint, fix=_FIX)
        rest = self._rest_until.get(endpoint, 0.0) - time.monotonic()
        if rest > 0:
            raise InputError(f"cooling down {rest:.1f} s more after a page over the {self.budget_s:g} s parse "
                             "budget; not polled", path=endpoint, fix=_FIX)

    async def parse(self, endpoint: str, parse: Callable[[], T]) -> T:
        """``parse()`` run in a worker thread within the budget; InputError naming ``endpoint`` when
        it overran the budget (or :meth:`check` refuses it)."""
        self.check(endpoint)
        loop = asyncio.get_running_loop()
        self._busy.add(endpoint)
        started = time.monotonic()
        job = self._pool.submit(parse)
        job.add_done_callback(lambda _: _call_soon(loop, self._done, endpoint, started))
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(job)), self.budget_s)
        except TimeoutError:
            job.cancel()  # never started: it never will; started: it ends alone, discarded
            self.over_budget += 1
            self._overran.add(endpoint)  # it rests once the parse ends (_done)
            raise InputError(f"page not parsed within the {self.budget_s:g} s budget", path=endpoint,
                             fix=_FIX) from None

    def _done(self, endpoint: str, started: float) -> None:
        """A parse of ``endpoint`` ended (or was dropped unstarted): free the endpoint; one that
        overran rests :data:`COOLDOWN_FACTOR` times what it took."""
        self._busy.discard(endpoint)
        if endpoint in self._overran:
            self._overran.discard(endpoint)
            now = time.monotonic()
            self._rest_until[endpoint] = now + COOLDOWN_FACTOR * (now - started)

    def forget(self, endpoint: str) -> None:
        """Drop ``endpoint``'s cooldown (it left the fleet)."""
        self._rest_until.pop(endpoint, None)

    def close(self) -> None:
        """Drop the pages not started; threads still parsing end alone (daemon work, results discarded)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


_FIX: Final = ("a page this slow to parse is usually huge (tens of thousands of series): trim the engine's "
               "metrics, or raise the agent's --parse-budget-ms")


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[str, float], None], arg: str, started: float) -> None:
    try:
        loop.call_soon_threadsafe(fn, arg, started)
    except RuntimeError:
        pass  # the loop closed first: nothing left to tell
