"""The local actuator's asleep tier: which drained workers sleep, which sleepers wake, which are released.

:class:`~ebb.actuate.local.LocalActuator` given a :class:`~ebb.config.tiers.SleepTier` keeps one
:class:`SleepBook`; it implements the :class:`~ebb.actuate.base.SleepingActuator` lifecycle (the
simulator's, :mod:`ebb.sim.sleepers`) once for every engine, and the launcher's
:class:`~ebb.actuate.sleep_modes.SleepMode` (:class:`SleepingLauncher`) says what sleep and wake are
on its engine: vLLM's endpoints (:class:`~ebb.actuate.sleep_modes.VllmSleep`, the ebb worker) or
llama.cpp's idle sleep (:class:`~ebb.actuate.sleep_modes.LlamaIdleSleep`, ``llama-server``):

* **Who sleeps.** A victim drained through the router (no request in flight, none routed to it)
  starts dozing (:meth:`SleepBook.doze`) when fewer than ``tier.max_replicas`` sleep or doze; the
  mode then says each tick whether it is asleep (:meth:`SleepBook.put`), still waiting, or failed
  (vLLM: its ``/sleep`` did not answer 200; llama.cpp: ``/props`` did not read asleep within
  ``--sleep-idle-seconds`` + 4 s), which stops it as without a tier. No room: stopped. A victim
  that never became ready, or whose drain timed out, is stopped: sleeping with decodes in flight can
  crash vLLM (vllm #45520).
* **Who wakes.** :meth:`SleepBook.take` hands out the newest sleepers first and starts each one's
  wake (:meth:`~ebb.actuate.sleep_modes.SleepMode.wake`: it blocks for the wake, about
  ``tier.wake_s``) on a background thread, so ``apply`` does not wait. A woken worker rejoins the
  router only once its engine reads awake *and* its health path answers 200
  (:meth:`~ebb.actuate.sleep_modes.SleepMode.awake`): vLLM's ``/health`` and llama.cpp's stay 200 asleep.
* **Fallback.** A wake whose call failed (not 200, refused, timed out) or that has not completed
  :attr:`~ebb.config.tiers.SleepTier.wake_deadline_s` after it began — ``max(10 s, 5 × wake_s)`` — is :meth:`SleepBook.verdict`
  ``"failed"``: the actuator stops that worker and starts a cold replacement at once, logged.
* **Wake time, checked.** Each wake's time from :meth:`SleepBook.take` to the tick that read it awake
  is measured; the slowest is :attr:`SleepCounts.slowest_wake_s`, and a wake slower than
  ``tier.wake_s`` (what the policy counts on) is logged at WARNING by the actuator.
* **How long.** A sleeper asleep ``tier.ttl_s`` (monotonic clock) is released (:meth:`SleepBook.expired`),
  and :meth:`SleepBook.release` releases the oldest past what the policy counts on. Released
  sleepers are stopped (SIGTERM: an idle worker exits at once), their GPU freed.

The book holds no lock: the actuator calls it under its own. HTTP calls are made outside that lock
(the mode's ``sleep`` and ``awake``) or on the wake threads.
"""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar, runtime_checkable

from ebb.actuate.sleep_modes import SleepMode
from ebb.config.tiers import SleepTier

__all__ = ["SleepBook", "SleepCounts", "SleepingLauncher"]


@runtime_checkable
class SleepingLauncher(Protocol):
    """A worker launcher whose workers can sleep: ``sleep_mode`` says how (None: they cannot, as started)."""

    @property
    def sleep_mode(self) -> SleepMode | None: ...


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
    failed_sleeps: int = 0
    """Drained victims the engine did not put to sleep (stopped as without a tier)."""
    slowest_wake_s: float = field(default=0.0, compare=False)
    """The longest wake that rejoined the router, s: from the wake's start to the tick that read it
    awake (0.1 s ticks), to compare with the tier's ``wake_s``. A measurement, not a count: left out
    of ``==``."""


class SleepBook(Generic[W]):
    """One actuator's sleepers and wakes (module docstring); call under the actuator's lock."""

    def __init__(self, tier: SleepTier, mode: SleepMode) -> None:
        self.tier, self.mode = tier, mode
        self.deadline_s = tier.wake_deadline_s
        self.asleep: list[tuple[W, float]] = []
        """Sleepers and the monotonic time each fell asleep, oldest first."""
        self.dozing: dict[W, float] = {}
        """Drained victims going to sleep, and the monotonic time their drain ended."""
        self.waking: dict[W, tuple[cf.Future[None], float]] = {}
        """Workers being woken: the wake call and the monotonic time it began."""
        self.counts = SleepCounts()
        self._pool = cf.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ebb-wake")

    def room(self, pending: int = 0) -> bool:
        """Whether one more may doze: fewer than ``tier.max_replicas`` sleep or doze beside the
        ``pending`` victims still draining toward sleep (a drain record's expected ``reason``)."""
        return len(self.asleep) + len(self.dozing) + pending < self.tier.max_replicas

    def doze(self, w: W, now: float) -> bool:
        """A drained ``w`` starts going to sleep at ``now`` if there is :meth:`room`; False: no room."""
        if w in self.dozing or not self.room():
            return False
        self.dozing[w] = now
        return True

    def put(self, w: W, now: float) -> None:
        """The dozing ``w`` reads asleep: it sleeps from ``now``."""
        self.dozing.pop(w, None)
        self.asleep.append((w, now))
        self.counts = _add(self.counts, sleeps=1)

    def no_sleep(self, w: W) -> None:
        """The dozing ``w`` did not fall asleep (the actuator stops it)."""
        if self.dozing.pop(w, None) is not None:
            self.counts = _add(self.counts, failed_sleeps=1)

    def newest(self, n: int) -> list[W]:
        """The ``n`` sleepers a scale-up would wake (newest first), without taking them."""
        return [w for w, _ in reversed(self.asleep[len(self.asleep) - min(n, len(self.asleep)):])]

    def take(self, n: int, now: float) -> list[W]:
        """Take up to ``n`` sleepers, newest first, and start waking each (``POST /wake_up`` on a
        wake thread, given :attr:`deadline_s`)."""
        took = self.newest(n)
        del self.asleep[len(self.asleep) - len(took):]
        for w in took:
            self.waking[w] = (self._pool.submit(self.mode.wake, w.url, self.deadline_s), now)
        return took

    def verdict(self, w: W, now: float, is_awake: bool) -> Literal["awake", "waiting", "failed"]:
        """A waking ``w`` at ``now``: awake (``is_awake``: :func:`awake` read it), failed (its wake
        call failed or :attr:`deadline_s` passed), else still waiting. Forgets it unless waiting."""
        fut, began = self.waking[w]
        failed = fut.done() and (fut.cancelled() or fut.exception() is not None)
        if is_awake and not failed:
            del self.waking[w]
            self.counts = _add(self.counts, wakes=1, wake_s=now - began)
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
        self.dozing.pop(w, None)
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
        """Every sleeper, waking and dozing worker (for the actuator to stop); no new wake starts after."""
        everyone = [w for w, _ in self.asleep] + list(self.waking) + list(self.dozing)
        self.asleep, self.waking, self.dozing = [], {}, {}
        self._pool.shutdown(wait=False, cancel_futures=True)
        return everyone


def _add(c: SleepCounts, *, sleeps: int = 0, wakes: int = 0, failed_wakes: int = 0, released: int = 0,
         failed_sleeps: int = 0, wake_s: float = 0.0) -> SleepCounts:
    return SleepCounts(c.sleeps + sleeps, c.wakes + wakes, c.failed_wakes + failed_wakes, c.released + released,
                       c.failed_sleeps + failed_sleeps, max(c.slowest_wake_s, wake_s))
