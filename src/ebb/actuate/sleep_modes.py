"""How one engine is put to sleep and woken: the engine-specific half of the local asleep tier.

:class:`~ebb.actuate.local_sleep.SleepBook` keeps the rule every engine shares (who sleeps, who wakes
newest first, the wake deadline, the TTL). A :class:`SleepMode` says what "sleep" and "wake" mean
on one engine, through three calls the actuator makes outside its lock:

* :meth:`SleepMode.sleep` — a drained victim (no request in flight, none routed to it), ``waited_s``
  seconds after its drain ended: ``"asleep"``, ``"waiting"`` (ask again on the next tick) or
  ``"failed"`` (the actuator stops it, as without a tier).
* :meth:`SleepMode.wake` — blocks (on a wake thread) until the engine is awake or ``timeout_s``
  passed; raises :class:`~ebb.actuate.engine_http.EngineCallError` on any failure.
* :meth:`SleepMode.awake` — the engine itself says it is awake *and* its health path answers 200:
  the only condition under which a woken worker rejoins the router.
* :meth:`SleepMode.keep_awake` — every :attr:`SleepMode.keepalive_s` seconds, on each routed ready
  worker, for an engine that would otherwise fall asleep by itself (None: never called).

Two modes:

* :class:`VllmSleep` — vLLM's endpoints (``VLLM_SERVER_DEV_MODE=1``): ``POST /sleep?level=N`` once
  (200: asleep; anything else: failed; never waiting), ``POST /wake_up`` (answers once awake),
  ``GET /is_sleeping`` false.
* :class:`LlamaIdleSleep` — llama.cpp's ``--sleep-idle-seconds N`` (no sleep endpoint; docs/tiers.md
  cites the source): a drained server falls asleep by itself N to N + 1 s after its last task
  (``server_queue::start_loop`` checks once a second), unloading the model; asleep once ``GET
  /props`` reads ``"is_sleeping": true``, failed if it does not within :attr:`LlamaIdleSleep.bound_s`
  (N + 1 s + :data:`FALL_ASLEEP_SLACK_S`). Woken by ``POST /tokenize`` (it needs the model, so the
  server reloads it before answering); awake once ``/props`` reads false and ``/health`` answers 200
  (``/health`` answers 200 asleep too). A routed server idle N s would unload too, and its next
  request would wait for the reload (and every call that takes the task queue's lock, ``/metrics``
  included, stalls through it): so routed servers are kept awake by ``GET /slots`` every N / 2 s
  (a slot-query task resets the idle timer; the metrics task, which the agent polls, does not). A
  victim's pings stop when it leaves the router, so only victims fall asleep.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from ebb.actuate.engine_http import EngineCallError, EngineHttp
from ebb.errors import ConfigError

__all__ = ["FALL_ASLEEP_SLACK_S", "HTTP_TIMEOUT_S", "KEEPALIVE_TIMEOUT_S", "LLAMA_CHECK_S", "LlamaIdleSleep", "SleepMode", "SleepStep",
           "VllmSleep", "doze_step", "healthy_and"]

KEEPALIVE_TIMEOUT_S: Final = 0.5
"""Timeout of one keep-awake ping (a lost ping costs at most a reload on the next request)."""
HTTP_TIMEOUT_S: Final = 2.0
"""Timeout of a ``/sleep``, ``/is_sleeping``, ``/props`` or health call (each answers at once on a live engine)."""
LLAMA_CHECK_S: Final = 1.0
"""llama.cpp checks its idle timer when its task loop's wait times out: once a second (``max_wait_time``)."""
FALL_ASLEEP_SLACK_S: Final = 3.0
"""Extra time a drained llama-server is given to fall asleep beyond ``N + 1 s`` (a loaded machine)."""

SleepStep = Literal["asleep", "waiting", "failed"]
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SleepMode(Protocol):
    """What "sleep" and "wake" mean on one engine (module docstring)."""

    @property
    def describe(self) -> str:
        """The mechanism in a few words, for logs and the demo's summary."""
        ...

    def sleep(self, url: str, waited_s: float) -> SleepStep:
        """A drained worker at ``url``, ``waited_s`` after its drain ended: asleep, waiting or failed."""
        ...

    def wake(self, url: str, timeout_s: float) -> None:
        """Wake the worker at ``url``; returns once awake, raises EngineCallError otherwise."""
        ...

    def awake(self, url: str, health_url: str) -> bool:
        """The engine reads awake and ``health_url`` answers 200."""
        ...

    @property
    def keepalive_s(self) -> float | None:
        """How often routed workers are sent :meth:`keep_awake` (s); None: never."""
        ...

    def keep_awake(self, url: str) -> None:
        """Keep the routed worker at ``url`` from falling asleep by itself; never raises."""
        ...


def healthy_and(reads_asleep: bool, health_url: str) -> bool:
    """Not ``reads_asleep`` and ``health_url`` answers 200 within :data:`HTTP_TIMEOUT_S`."""
    if reads_asleep:
        return False
    try:
        with _NO_PROXY.open(health_url, timeout=HTTP_TIMEOUT_S) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as exc:
        exc.close()
        return False
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class VllmSleep:
    """vLLM's sleep endpoints at ``level`` (1: weights offloaded to host memory; 2: discarded)."""

    level: int = 1

    @property
    def describe(self) -> str:
        return f"POST /sleep?level={self.level}, POST /wake_up, GET /is_sleeping (vLLM)"

    def sleep(self, url: str, waited_s: float) -> SleepStep:
        try:
            EngineHttp(url, HTTP_TIMEOUT_S).sleep(self.level)
            return "asleep"
        except EngineCallError:
            return "failed"

    def wake(self, url: str, timeout_s: float) -> None:
        EngineHttp(url, HTTP_TIMEOUT_S).wake_up(timeout_s)

    def awake(self, url: str, health_url: str) -> bool:
        try:
            return healthy_and(EngineHttp(url, HTTP_TIMEOUT_S).is_sleeping(), health_url)
        except EngineCallError:
            return False

    @property
    def keepalive_s(self) -> None:
        return None  # vLLM sleeps only when told

    def keep_awake(self, url: str) -> None:
        return None


def doze_step(reads_asleep: bool | None, waited_s: float, bound_s: float) -> SleepStep:
    """A server that falls asleep by itself: asleep once it reads so; failed once ``waited_s`` passed
    ``bound_s`` without that (an unreadable answer, None, counts as not asleep); else waiting."""
    if reads_asleep:
        return "asleep"
    return "failed" if waited_s > bound_s else "waiting"


@dataclass(frozen=True)
class LlamaIdleSleep:
    """llama.cpp's idle sleep, started with ``--sleep-idle-seconds idle_s`` (module docstring)."""

    idle_s: int
    """The server's ``--sleep-idle-seconds`` (≥ 1 s; llama.cpp refuses 0)."""
    wake_text: str = "wake"
    """What ``POST /tokenize`` is sent to wake the server (any text: the call needs the model)."""

    def __post_init__(self) -> None:
        if isinstance(self.idle_s, bool) or not isinstance(self.idle_s, int) or not 1 <= self.idle_s <= 86400:
            raise ConfigError(f"--sleep-idle-seconds must be a whole number of seconds in [1, 86400], got "
                              f"{self.idle_s!r} (fix: e.g. 2; llama.cpp refuses 0)")

    @property
    def bound_s(self) -> float:
        """How long after its drain ended a server may take to read asleep: ``idle_s`` + 1 s (the
        server's check interval) + :data:`FALL_ASLEEP_SLACK_S`."""
        return self.idle_s + LLAMA_CHECK_S + FALL_ASLEEP_SLACK_S

    @property
    def describe(self) -> str:
        return f"--sleep-idle-seconds {self.idle_s}, POST /tokenize, GET /props (llama.cpp)"

    def sleep(self, url: str, waited_s: float) -> SleepStep:
        try:
            reads: bool | None = EngineHttp(url, HTTP_TIMEOUT_S).props_is_sleeping()
        except EngineCallError:
            reads = None
        return doze_step(reads, waited_s, self.bound_s)

    def wake(self, url: str, timeout_s: float) -> None:
        EngineHttp(url, HTTP_TIMEOUT_S).tokenize(self.wake_text, timeout_s)

    def awake(self, url: str, health_url: str) -> bool:
        try:
            return healthy_and(EngineHttp(url, HTTP_TIMEOUT_S).props_is_sleeping(), health_url)
        except EngineCallError:
            return False

    @property
    def keepalive_s(self) -> float:
        """Half the idle time: a routed server is pinged twice per idle period."""
        return self.idle_s / 2

    def keep_awake(self, url: str) -> None:
        try:
            EngineHttp(url, KEEPALIVE_TIMEOUT_S).slots()
        except EngineCallError:
            pass  # a missed ping: the server may unload and reload on its next request
