"""The local actuator's asleep tier: which drained workers sleep, which sleepers wake, which are released.

:class:`~ebb.actuate.local.LocalActuator` given a :class:`~ebb.config.tiers.SleepTier` keeps one
:class:`SleepBook`; it implements the :class:`~ebb.actuate.base.SleepingActuator` lifecycle (the
simulator's, :mod:`ebb.sim.sleepers`) on workers that speak vLLM's sleep endpoints
(:class:`SleepingLauncher`: ``POST /sleep?level=N``, ``POST /wake_up``, ``GET /is_sleeping``):

* **Who sleeps.** A victim drained through the router (no request in flight, none routed to it) is
  sent ``POST /sleep?level=N`` when fewer than ``tier.max_replicas`` sleep; a 200 puts it in the
  book, anything else (or no room) stops it as without a tier. A victim that never became ready, or
  whose drain timed out, is stopped: sleeping with decodes in flight can crash vLLM (vllm #45520).
* **Who wakes.** :meth:`SleepBook.take` hands out the newest sleepers first and starts each one's
  ``POST /wake_up`` on a background thread (the call blocks for the wake, about ``tier.wake_s``), so
  ``apply`` does not wait. A woken worker rejoins the router only once ``GET /is_sleeping`` reads
  false *and* its health path answers 200 (:func:`awake`): vLLM's ``/health`` stays 200 asleep.
* **Fallback.** A wake whose call failed (not 200, refused, timed out) or that has not completed
  :attr:`~ebb.config.tiers.SleepTier.wake_deadline_s` after it began — ``max(10 s, 5 × wake_s)`` — is :meth:`SleepBook.verdict`
  ``"failed"``: the actuator stops that worker and starts a cold replacement at once, logged.
* **How long.** A sleeper asleep ``tier.ttl_s`` (monotonic clock) is released (:meth:`SleepBook.expired`),
  and :meth:`SleepBook.release` releases the oldest past what the policy counts on. Released
  sleepers are stopped (SIGTERM: an idle worker exits at once), their GPU freed.

The book holds no lock: the actuator calls it under its own. HTTP calls are made outside that lock
(:func:`post_sleep`, :func:`awake`) or on the wake threads.
"""

from __future__ import annotations

import concurrent.futures as cf
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Final, Generic, Literal, Protocol, TypeVar, runtime_checkable

from ebb.actuate.engine_http import EngineCallError, EngineHttp
from ebb.config.tiers import SleepTier

__all__ = ["SleepBook", "SleepCounts", "SleepingLauncher", "awake", "post_sleep"]

HTTP_TIMEOUT_S: Final = 2.0
"""Timeout of a ``/sleep`` or ``/is_sleeping`` call (both answer at once on a live worker)."""


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@runtime_checkable
class SleepingLauncher(Protocol):
    """A worker launcher whose workers speak vLLM's sleep endpoints, put to sleep at ``sleep_level``."""

    @property
    def sleep_level(self) -> int: ...


class _Worker(Protocol):
    name: str
    url: str


W = TypeVar("W", bound=_Worker)


@dataclass(frozen=True)
class SleepCounts:
    """What an actuator's asleep tier did so far."""

    sleeps: int = 0
    """Drained workers put to sleep."""
    wakes: int = 0
    """Sleepers woken that rejoined the router."""
    failed_wakes: int = 0
    """Wakes that failed or ran past :attr:`~ebb.config.tiers.SleepTier.wake_deadline_s`: a cold replacement started instead."""
    released: int = 0
    """Sleepers stopped by their TTL or by ``keep_asleep``."""


def post_sleep(url: str, level: int) -> bool:
    """``POST {url}/sleep?level=N`` (:meth:`~ebb.actuate.engine_http.EngineHttp.sleep`); True when it answered 200."""
    try:
        EngineHttp(url, HTTP_TIMEOUT_S).sleep(level)
        return True
    except EngineCallError:
        return False


def _wake(url: str, timeout_s: float) -> None:
    """``POST {url}/wake_up`` (blocks for the wake); raises unless it answered 200 within ``timeout_s``."""
    EngineHttp(url, HTTP_TIMEOUT_S).wake_up(timeout_s)


def awake(url: str, health_url: str) -> bool:
    """``GET {url}/is_sleeping`` reads ``{"is_sleeping": false}`` and ``health_url`` answers 200."""
    try:
        if EngineHttp(url, HTTP_TIMEOUT_S).is_sleeping():
            return False
        with _NO_PROXY.open(health_url, timeout=HTTP_TIMEOUT_S) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as exc:
        exc.close()
        return False
    except (EngineCallError, OSError, ValueError):
        return False


class SleepBook(Generic[W]):
    """One actuator's sleepers and wakes (module docstring); call under the actuator's lock."""

    def __init__(self, tier: SleepTier, level: int) -> None:
        self.tier, self.level = tier, level
        self.deadline_s = tier.wake_deadline_s
        self.asleep: list[tuple[W, float]] = []
        """Sleepers and the monotonic time each fell asleep, oldest first."""
        self.waking: dict[W, tuple[cf.Future[None], float]] = {}
        """Workers being woken: the wake call and the monotonic time it began."""
        self.counts = SleepCounts()
        self._pool = cf.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ebb-wake")

    def room(self, pending: int = 0) -> bool:
        """Whether one more may sleep beside the ``pending`` already being put to sleep."""
        return len(self.asleep) + pending < self.tier.max_replicas

    def put(self, w: W, now: float) -> None:
        """``w`` answered ``/sleep``: it sleeps from ``now``."""
        self.asleep.append((w, now))
        self.counts = _add(self.counts, sleeps=1)

    def newest(self, n: int) -> list[W]:
        """The ``n`` sleepers a scale-up would wake (newest first), without taking them."""
        return [w for w, _ in reversed(self.asleep[len(self.asleep) - min(n, len(self.asleep)):])]

    def take(self, n: int, now: float) -> list[W]:
        """Take up to ``n`` sleepers, newest first, and start waking each (``POST /wake_up`` on a
        wake thread, given :attr:`deadline_s`)."""
        took = self.newest(n)
        del self.asleep[len(self.asleep) - len(took):]
        for w in took:
            self.waking[w] = (self._pool.submit(_wake, w.url, self.deadline_s), now)
        return took

    def verdict(self, w: W, now: float, is_awake: bool) -> Literal["awake", "waiting", "failed"]:
        """A waking ``w`` at ``now``: awake (``is_awake``: :func:`awake` read it), failed (its wake
        call failed or :attr:`deadline_s` passed), else still waiting. Forgets it unless waiting."""
        fut, began = self.waking[w]
        failed = fut.done() and (fut.cancelled() or fut.exception() is not None)
        if is_awake and not failed:
            del self.waking[w]
            self.counts = _add(self.counts, wakes=1)
            return "awake"
        if failed or now - began > self.deadline_s:
            del self.waking[w]
            self.counts = _add(self.counts, failed_wakes=1)
            return "failed"
        return "waiting"

    def wake_error(self, w: W) -> str:
        """Why ``w``'s wake failed (for the log): its call's error, or the deadline."""
        fut = self.waking.get(w)
        exc = fut[0].exception() if fut is not None and fut[0].done() and not fut[0].cancelled() else None
        return str(exc) if exc is not None else f"not awake within {self.deadline_s:g} s"

    def forget(self, w: W) -> None:
        """``w`` leaves the tier some other way (scaled down while waking, exited)."""
        self.waking.pop(w, None)
        self.asleep = [(x, t) for x, t in self.asleep if x is not w]

    def expired(self, now: float) -> list[W]:
        """Take the sleepers asleep ``tier.ttl_s`` or longer at ``now`` (released)."""
        gone = [w for w, t in self.asleep if now - t >= self.tier.ttl_s]
        return self._released(gone)

    def release(self, keep: int) -> list[W]:
        """Take the oldest sleepers until at most ``keep`` sleep (released)."""
        return self._released([w for w, _ in self.asleep[: max(0, len(self.asleep) - max(0, keep))]])

    def _released(self, gone: list[W]) -> list[W]:
        if gone:
            self.asleep = [(w, t) for w, t in self.asleep if w not in gone]
            self.counts = _add(self.counts, released=len(gone))
        return gone

    def close(self) -> list[W]:
        """Every sleeper and waking worker (for the actuator to stop); no new wake starts after."""
        everyone = [w for w, _ in self.asleep] + list(self.waking)
        self.asleep, self.waking = [], {}
        self._pool.shutdown(wait=False, cancel_futures=True)
        return everyone


def _add(c: SleepCounts, *, sleeps: int = 0, wakes: int = 0, failed_wakes: int = 0, released: int = 0) -> SleepCounts:
    return SleepCounts(c.sleeps + sleeps, c.wakes + wakes, c.failed_wakes + failed_wakes, c.released + released)
