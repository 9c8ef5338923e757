"""The local actuator: scales worker processes on this machine behind a :class:`~ebb.demo.router.Router`.

What a worker is comes from a :class:`WorkerLauncher` (:mod:`ebb.actuate.local_procs`, re-exported
here): by default :class:`EbbWorkerLauncher` (``python -m ebb.demo.worker``, the calibrated emulated
worker); ``ebb.demo.llamacpp`` has one for real ``llama-server`` processes. A launcher builds the command, says how the worker's URL is known
(printed on a ``LISTENING http://…`` stdout line, or fixed by the launcher before start, e.g. a port
it picked), its health path, and which router API the worker speaks (``add_worker(..., api=)``).

Keeps every guarantee of :mod:`ebb.actuate.base`, plus:

* **Scale-up.** ``apply`` starts the workers and, for launchers that print it, reads each one's
  ``LISTENING`` line (30 s deadline) before returning, so ``state()`` shows their endpoints at once;
  if any fails to start, all just started are killed and :class:`~ebb.errors.TransientError` is
  raised (nothing changed). A supervisor thread polls the launcher's health path (``/healthz`` for
  the ebb worker, ``/health`` for llama-server) every 0.1 s and adds a worker to the router when it
  answers 200; ``ready_s`` stays None until then. Ids are increasing ints never reused, names
  ``worker-<id>``, zones round-robin. With ``state_file``, ids (and so names) are never reused by a
  later actuator sharing the file either: the next id is persisted *before* the workers that use it
  start, so ``worker-3`` of a dead incarnation never names a fresh, different worker (a controller
  resuming a recorded scale-down matches its victims by name).
* **Scale-down.** Named victims first, then the newest replicas. A starting replica is terminated;
  a ready one is drained through the router (no new work, in-flight finishes), then SIGTERMed and
  reaped (SIGKILL after 15 s). Removed replicas leave ``state().replicas`` at once and count in
  ``draining`` until their process is gone. A drain longer than ``drain_timeout_s`` is cut short.
* **Idempotent by decision id** (:mod:`ebb.actuate.local_state`), in memory and, with
  ``state_file``, on disk (atomic write + rename; the newest 10,000 ids, and ``next_id``: a file
  without it, written before it existed, reads as 0). The file covers the *ids*, not the worker processes: workers die with the actuator's
  process, and a new actuator starts ``initial`` fresh ones, numbered on from ``next_id``.
* **No worker outlives the actuator's process**, even one killed with SIGKILL: on Linux every worker
  is started by :func:`ebb.actuate.children.spawn` (the kernel SIGKILLs it when its parent dies,
  whichever thread started or scaled the fleet). Elsewhere the ebb worker still exits through
  ``--parent-pid``; other workers are stopped only by ``close()``.
* **Stopping signals once.** A worker is sent SIGTERM once (``llama-server`` takes a second SIGTERM
  as an order to exit without cleanup), then SIGKILL after a bounded wait: 15 s for a retired
  worker, ``close()``'s 15 s, 5 s for one whose scale-up failed.
* A worker process that exits on its own leaves the fleet (``spec_replicas`` drops; the router
  stops routing to it); the controller sees the smaller fleet and scales up again if needed.
* ``apply`` holds the actuator's lock while it starts workers (about 1 s per scale-up on a busy
  two-core machine), so a concurrent ``state()`` waits that long.
* **targets_file** (Prometheus ``file_sd``) lists the ready and draining workers, rewritten
  atomically on every change. ``close()`` (or leaving the ``with`` block) stops every worker.
* **An asleep tier** (``tier``, a :class:`~ebb.config.tiers.SleepTier`; a launcher whose workers
  can sleep, :class:`~ebb.actuate.local_sleep.SleepingLauncher`: the ebb worker through vLLM's
  endpoints, ``llama-server`` through ``--sleep-idle-seconds``): the actuator is a
  :class:`~ebb.actuate.base.SleepingActuator`. Drained victims sleep while fewer than
  ``tier.max_replicas`` do, scale-ups wake the newest sleepers first and cold-start the rest, a
  woken worker rejoins the router once its engine reads awake and it is healthy, a wake that fails
  or takes past ``max(10 s, 5 × wake_s)`` is replaced by a cold start at once (logged), and sleepers
  are released at ``tier.ttl_s`` or by :meth:`LocalActuator.keep_asleep` (:mod:`ebb.actuate.local_sleep`
  states each step). ``tier`` None: none of this, exactly as before.
* **Drain records** (:attr:`LocalActuator.drains`, :mod:`ebb.actuate.drain_report`; the controller
  passes an observer through :meth:`LocalActuator.observe_drains`): each ready victim of a decision
  is told when its router drain starts (``reason`` ``sleep`` while the tier has room beside the drains
  before it, else ``release``; ``budget_s`` = ``drain_timeout_s``), at each supervisor poll (0.1 s)
  with the requests its router still has in flight to it (bounded steps: the first, then a changed
  count at most every 5 s, and every 30 s), and at its end: ``drained`` → ``slept`` or ``released``
  (stopped: no tier, no room, ``/sleep`` refused; the note says which), ``budget`` → ``released``
  (stopped with work in flight), ``vanished`` (the process exited) → ``gone``. A replica removed
  before it was ready, or one that crashed, is not drained and leaves no record.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Protocol

from ebb.actuate.base import ActuationResult, FleetState, ReplicaState
from ebb.actuate.drain_report import DrainReporter
from ebb.actuate.local_procs import (
    START_TIMEOUT_S, EbbWorkerLauncher, Launch, WorkerLauncher, atomic_write, healthy, popen, read_listening,
)
from ebb.actuate.local_sleep import SleepBook, SleepCounts, SleepingLauncher
from ebb.actuate.local_state import AppliedIds
from ebb.actuate.sleep_modes import SleepMode, SleepStep
from ebb.config.tiers import SleepTier
from ebb.errors import ConfigError, EbbError, PermanentError, TransientError
from ebb.model.drains import DrainObserver
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.observation import ScaleRequest

__all__ = ["EbbWorkerLauncher", "Launch", "LocalActuator", "WorkerLauncher", "WorkerRegistry"]

KILL_AFTER_S: Final = 15.0
POLL_S: Final = 0.1
log = logging.getLogger(__name__)


class WorkerRegistry(Protocol):
    """What the actuator needs from a router (``ebb.demo.router.Router`` provides it). ``api`` is the
    worker's HTTP API: ``"ebb"`` (``POST /v1/generate``) or ``"llamacpp"`` (``POST /completion``)."""

    def add_worker(self, name: str, url: str, max_batch: int, api: str = "ebb") -> None: ...

    def drain(self, name: str) -> cf.Future[None]: ...


@dataclass(eq=False)
class _Replica:
    rid: int
    name: str
    zone: str
    created_s: float
    proc: subprocess.Popen[bytes]
    url: str = ""
    ready_s: float | None = None
    drain: cf.Future[None] | None = None
    leaving_since: float = 0.0
    term_sent: float | None = None
    sleep_tried: bool = False
    """A drained victim already sent ``/sleep`` (or found no room): stopped if it is still leaving."""
    not_slept: str = ""
    """Why a drained victim was stopped rather than slept (its drain record's note)."""
    pinged_s: float = 0.0
    """Monotonic time of its last keep-awake ping (an engine that sleeps by itself when idle)."""

    def view(self) -> ReplicaState:
        return ReplicaState(ReplicaId(self.rid), self.name, self.created_s, self.ready_s, self.zone, self.url)


class LocalActuator:
    """Scales worker processes on this machine. See the module docstring for guarantees."""

    def __init__(self, router: WorkerRegistry, *, name: str = "local/serving", initial: int = 1,
                 max_batch: int = 8, warmup_s: float = 5.0, speed: float = 1.0, python: str = sys.executable,
                 targets_file: Path | None = None, state_file: Path | None = None,
                 zones: tuple[str, ...] = ("a", "b", "c"), drain_timeout_s: float = 120.0,
                 launcher: WorkerLauncher | None = None, tier: SleepTier | None = None) -> None:
        if initial < 0 or max_batch < 1 or warmup_s < 0 or speed <= 0 or drain_timeout_s <= 0 or not zones:
            raise ConfigError(f"LocalActuator needs initial ≥ 0, max_batch ≥ 1, warmup_s ≥ 0, speed > 0, "
                              f"drain_timeout_s > 0 and one zone at least; got initial={initial}, "
                              f"max_batch={max_batch}, warmup_s={warmup_s}, speed={speed}, "
                              f"drain_timeout_s={drain_timeout_s}, zones={zones!r}")
        if tier is not None and not tier.holds_gpu:
            raise ConfigError(f"--tier {tier.describe()}: local workers sleep through their engine; a snapshot "
                              "tier is simulator-only (fix: --tier asleep:wake_s=2,max=4)")
        self.target = name
        self._router = router
        self._max_batch, self._warmup_s = max_batch, warmup_s
        self._zones, self._drain_timeout_s = zones, drain_timeout_s
        self._launcher: WorkerLauncher = launcher or EbbWorkerLauncher(
            warmup_s, speed, python, drain_timeout_s, wake_s=2.0 if tier is None else tier.wake_s)
        self.tier = tier
        """The asleep tier (module docstring); None: victims are stopped, as without one."""
        self._sleep: SleepBook[_Replica] | None = None
        if tier is not None:
            mode = self._launcher.sleep_mode if isinstance(self._launcher, SleepingLauncher) else None
            if mode is None:
                raise ConfigError(f"--tier {tier.describe()}: the {type(self._launcher).__name__} workers cannot sleep "
                                  "as started (fix: the ebb worker, llama-server with sleep_idle_s, or drop --tier)")
            self._sleep = SleepBook(tier, mode)
        self._targets_file = targets_file
        self._lock = threading.RLock()
        self.drains = DrainReporter(name)
        """Each victim's drain told as records (:meth:`observe_drains`)."""
        self._ids = AppliedIds(state_file, name)
        """Applied decision ids and the next worker id (``state_file``, :mod:`ebb.actuate.local_state`)."""
        self._replicas: list[_Replica] = []
        self._leaving: list[_Replica] = []
        self._closed = False
        self._replicas = self._spawn(initial)
        self._write_targets()
        self._stop = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name=f"ebb-actuator-{name}", daemon=True)
        self._supervisor.start()

    # ---- the Actuator protocol -------------------------------------------------------------------

    def state(self) -> FleetState:
        with self._lock:
            asleep = () if self._sleep is None else tuple(r.view() for r, _ in self._sleep.asleep)
            slowest = 0.0 if self._sleep is None else self._sleep.counts.slowest_wake_s
            return FleetState(self.target, len(self._replicas), tuple(r.view() for r in self._replicas),
                              len(self._leaving), asleep, wake_s_seen=slowest if slowest > 0 else None)

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        with self._lock:
            if self._closed:
                raise PermanentError(f"actuator {self.target} is closed; create a new LocalActuator")
            if (done := self._ids.get(decision_id)) is not None:
                return replace(done, applied=False)
            before = len(self._replicas)
            want = max(0, request.replicas)
            woken = [] if self._sleep is None or want <= before else self._sleep.newest(want - before)
            new = woken + (self._spawn(want - before - len(woken)) if want > before else [])
            gone: list[_Replica] = []
            if want < before:
                order = [r for v in request.victims for r in self._replicas if r.rid == int(v)]
                order += [r for r in reversed(self._replicas) if r not in order]
                gone = order[: before - want]
            result = ActuationResult(decision_id, want != before, before, want, tuple(r.name for r in gone),
                                     tuple(r.name for r in new))
            try:
                self._ids.remember(result)
            except PermanentError:
                self._kill(new[len(woken):])
                raise
            if woken and self._sleep is not None:
                self._sleep.take(len(woken), time.monotonic())
                for r in woken:  # requested again now: a starting replica until awake and healthy
                    r.created_s, r.ready_s, r.sleep_tried = time.time(), None, False
            self._replicas.extend(new)
            for r in gone:
                self._retire(r, decision_id)
            self._write_targets()
            return result

    # ---- the SleepingActuator protocol -------------------------------------------------------------

    def keep_asleep(self, keep: int | None) -> tuple[str, ...]:
        """Release (stop) the oldest sleepers until at most ``keep`` sleep; None or no tier: none. The
        names released."""
        with self._lock:
            if self._sleep is None or keep is None or self._closed:
                return ()
            gone = self._sleep.release(keep)
            self._stop_sleepers(gone, "the policy no longer counts on it")
            return tuple(r.name for r in gone)

    def observe_drains(self, observer: DrainObserver | None) -> None:
        """Send each drain record to ``observer`` (:class:`~ebb.actuate.base.ReportsDrains`; module docstring)."""
        self.drains.observer = observer

    @property
    def sleep_mode(self) -> SleepMode | None:
        """How this actuator's workers sleep and wake (:mod:`ebb.actuate.sleep_modes`); None without a tier."""
        return None if self._sleep is None else self._sleep.mode

    def sleep_counts(self) -> SleepCounts:
        """Sleeps, wakes, failed wakes and releases so far (all 0 without a tier)."""
        with self._lock:
            return SleepCounts() if self._sleep is None else self._sleep.counts

    # ---- extras ----------------------------------------------------------------------------------

    def wait_ready(self, timeout_s: float = 60.0) -> FleetState:
        """Block until every replica in service is ready; TransientError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.state()
            if st.ready_replicas == st.spec_replicas:
                return st
            if time.monotonic() > deadline:
                raise TransientError(f"{st.spec_replicas - st.ready_replicas} of {st.spec_replicas} workers of "
                                     f"{self.target} not ready after {timeout_s} s (warmup_s={self._warmup_s})")
            time.sleep(POLL_S)

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        """Block until no removed replica is still draining or exiting."""
        deadline = time.monotonic() + timeout_s
        while self.state().draining:
            if time.monotonic() > deadline:
                raise TransientError(f"{self.state().draining} workers of {self.target} still draining "
                                     f"after {timeout_s} s")
            time.sleep(POLL_S)

    def pids(self) -> list[int]:
        """Process ids of every worker this actuator still owns (in service or leaving)."""
        with self._lock:
            asleep = [] if self._sleep is None else [r for r, _ in self._sleep.asleep]
            return [r.proc.pid for r in self._replicas + self._leaving + asleep]

    def close(self) -> None:
        """Stop every worker (SIGTERM, SIGKILL after 15 s) and the supervisor. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            everyone = self._replicas + self._leaving
            if self._sleep is not None:
                everyone += [r for r in self._sleep.close() if r not in everyone]
            for r in self._replicas:
                if r.ready_s is not None:
                    try:
                        self._router.drain(r.name)  # best effort: stop routing to a worker about to exit
                    except Exception:  # best effort: the router may already be stopped
                        pass
            for r in everyone:
                self.drains.forget(r.name)
            self._replicas, self._leaving = [], []
        self._stop.set()
        self._supervisor.join(timeout=10.0)
        self._kill(everyone, grace_s=KILL_AFTER_S)
        self._write_targets()

    def __enter__(self) -> LocalActuator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- processes -------------------------------------------------------------------------------

    def _spawn(self, count: int) -> list[_Replica]:
        started: list[_Replica] = []
        first = self._ids.reserve(count)
        try:
            for rid in range(first, first + count):
                name = f"worker-{rid}"
                launch = self._launcher.launch(name, self._max_batch)
                proc = popen(launch)
                started.append(_Replica(rid, name, self._zones[rid % len(self._zones)], time.time(), proc,
                                        url=launch.url or ""))
            deadline = time.monotonic() + START_TIMEOUT_S
            for r in started:
                if not r.url:
                    r.url = read_listening(r.name, r.proc, deadline)
        except BaseException:
            self._kill(started)
            raise
        return started

    def _retire(self, r: _Replica, decision_id: DecisionId | None = None) -> None:
        """Take ``r`` out of service: drain it through the router (a ready victim of ``decision_id``'s
        drain is told) or stop it (not ready)."""
        self._replicas.remove(r)
        r.leaving_since = time.monotonic()
        if self._sleep is not None:
            self._sleep.forget(r)  # a victim still waking is stopped like any starting replica
        if r.ready_s is None:
            self._terminate(r)
        else:
            try:
                r.drain = self._router.drain(r.name)
            except Exception:  # a router that cannot drain: terminate (the worker drains itself)
                self._terminate(r)
            if r.drain is not None and decision_id is not None:
                pending = sum(1 for x in self._leaving if self.drains.draining(x.name))
                room = self._sleep is not None and self._sleep.room(pending)
                self.drains.start(r.name, decision_id, "sleep" if room else "release", self._drain_timeout_s)
        self._leaving.append(r)

    @staticmethod
    def _terminate(r: _Replica) -> None:
        """SIGTERM ``r`` once in its life: nothing if it was sent before or the worker has exited."""
        if r.term_sent is None:
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGTERM)
            r.term_sent = time.monotonic()

    @staticmethod
    def _kill(replicas: list[_Replica], grace_s: float = 5.0) -> None:
        for r in replicas:
            LocalActuator._terminate(r)  # not again for one already told: llama-server's 2nd SIGTERM is abrupt
        deadline = time.monotonic() + grace_s
        for r in replicas:
            try:
                r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait()
            if r.proc.stdout is not None:
                r.proc.stdout.close()

    def _supervise(self) -> None:
        health, mode = self._launcher.health_path, None if self._sleep is None else self._sleep.mode
        every = None if mode is None else mode.keepalive_s
        while not self._stop.wait(POLL_S):
            with self._lock:
                starting = [r for r in self._replicas if r.ready_s is None]
                waking = set() if self._sleep is None else {r for r in starting if r in self._sleep.waking}
                drowsy = self._to_sleep()
                now = time.monotonic()
                ping = [] if every is None else [r for r in self._replicas
                                                 if r.ready_s is not None and now - r.pinged_s >= every]
                for r in ping:
                    r.pinged_s = now
                draining = [r.name for r in self._leaving if r.term_sent is None and self.drains.draining(r.name)]
            self._read_drains(draining)
            # a woken worker is ready once its engine reads awake, not on its health alone (200 asleep)
            up = {r: mode.awake(r.url, r.url + health) if mode is not None and r in waking else healthy(r.url + health)
                  for r in starting}
            slept = {} if mode is None else {r: mode.sleep(r.url, waited) for r, waited in drowsy.items()}
            for r in ping:  # only routed workers: a victim's pings stop, so it can fall asleep
                if mode is not None:
                    mode.keep_awake(r.url)
            with self._lock:
                if self._closed:
                    return
                try:
                    woken = self._tend_sleepers(slept, {r: up[r] for r in waking})
                    if self._promote([r for r in starting if (up[r] and r not in waking) or r in woken]) \
                            | self._reap() | any(step != "waiting" for step in slept.values()):
                        self._write_targets()
                except (EbbError, RuntimeError, ValueError, cf.TimeoutError) as exc:
                    # Keep supervising: the next poll retries (a router restarting, a full disk).
                    log.warning("actuator %s: %s", self.target, exc)

    def _promote(self, answering: list[_Replica]) -> bool:
        changed = False
        for r in answering:
            if r in self._replicas and r.ready_s is None:
                self._router.add_worker(r.name, r.url, self._max_batch, api=self._launcher.api)
                r.ready_s = time.time()
                changed = True
        for r in [r for r in self._replicas if r.proc.poll() is not None]:
            # A worker that crashed is no longer in service; the router stops routing to it.
            self._retire(r)
            changed = True
        return changed

    def _read_drains(self, names: list[str]) -> None:
        """Each draining worker's requests in flight, as its router counts them (0 once it left the
        router: drained), told to :attr:`drains`; nothing for a router that does not list its workers."""
        workers = getattr(self._router, "workers", None)
        if not names or workers is None:
            return
        try:
            seen = {str(w.get("name")): w.get("inflight") for w in workers()}
        except Exception as exc:  # a router stopping: the next poll reads again
            log.debug("actuator %s: router not read for drains: %s", self.target, exc)
            return
        for name in names:
            n = seen.get(name, 0)
            self.drains.read(name, float(n) if isinstance(n, (int, float)) and not isinstance(n, bool) else None)

    def _reap(self) -> bool:
        changed = False
        now = time.monotonic()
        for r in list(self._leaving):
            drained = r.drain is not None and r.drain.done() and \
                (self._sleep is None or (r.sleep_tried and r not in self._sleep.dozing))
            if r.term_sent is None and (drained or now - r.leaving_since > self._drain_timeout_s):
                if r.proc.poll() is None and r.drain is not None and r.drain.done():
                    self.drains.end(r.name, "drained", "released", inflight=0, note=r.not_slept or "stopped (SIGTERM)")
                elif r.proc.poll() is None:
                    self.drains.end(r.name, "budget", "released", note=f"drain timeout {self._drain_timeout_s:g} s "
                                    "ran out: stopped (SIGTERM), the worker finishes what it holds")
                self._terminate(r)
            if self._sleep is not None and (r.term_sent is not None or r.proc.poll() is not None):
                self._sleep.forget(r)  # stopped or gone while dozing: it will not sleep
            if r.proc.poll() is not None:
                self.drains.end(r.name, "vanished", "gone", note=f"the worker exited (status {r.proc.poll()}) while it drained")
                if r.drain is not None and not r.drain.done():
                    r.drain.cancel()
                self._kill([r])
                self._leaving.remove(r)
                changed = True
            elif r.term_sent is not None and now - r.term_sent > KILL_AFTER_S:
                r.proc.kill()
        return changed

    # ---- the asleep tier (ebb.actuate.local_sleep) -------------------------------------------------

    def _to_sleep(self) -> dict[_Replica, float]:
        """Newly drained victims start dozing while there is room (the others are marked tried, so
        :meth:`_reap` stops them); every dozing victim and the seconds since its drain ended, for
        the mode's ``sleep``. Under the lock."""
        if self._sleep is None:
            return {}
        now = time.monotonic()
        for r in self._leaving:
            if r.drain is not None and r.drain.done() and not r.sleep_tried and r.term_sent is None:
                r.sleep_tried = True
                if r.proc.poll() is None and not self._sleep.doze(r, now):
                    r.not_slept = (f"no room: {len(self._sleep.asleep) + len(self._sleep.dozing)} of "
                                   f"{self._sleep.tier.max_replicas} asleep or going to sleep")
        return {r: now - since for r, since in self._sleep.dozing.items()}

    def _tend_sleepers(self, slept: dict[_Replica, SleepStep], woke: dict[_Replica, bool]) -> set[_Replica]:
        """Under the lock: put the dozing workers that read asleep to sleep (those that failed are
        left to :meth:`_reap`, which stops them); judge the waking ones (the awake are returned for
        :meth:`_promote`, the failed replaced by a cold start); release sleepers past their TTL and
        forget those that exited."""
        book = self._sleep
        if book is None:
            return set()
        now = time.monotonic()
        for r, step in slept.items():
            if r in book.dozing and step == "asleep" and r in self._leaving and r.term_sent is None:
                self._leaving.remove(r)
                r.ready_s, r.drain = None, None
                book.put(r, now)
                self.drains.end(r.name, "drained", "slept", inflight=0, note=book.mode.describe)
            elif r in book.dozing and step == "failed":
                log.warning("actuator %s: %s did not go to sleep (%s); stopping it", self.target, r.name,
                            book.mode.describe)
                r.not_slept = f"did not go to sleep ({book.mode.describe})"
                book.no_sleep(r)
        ready: set[_Replica] = set()
        for r, is_awake in woke.items():
            if r not in self._replicas or r not in book.waking:
                continue
            why, began = book.wake_error(r), book.waking[r][1]
            verdict = book.verdict(r, now, is_awake)
            if verdict == "awake":
                ready.add(r)
                if now - began > book.tier.wake_s:
                    log.warning("actuator %s: %s woke in %.2f s, past the tier's wake_s=%g the policy counts on "
                                "(fix: raise wake_s)", self.target, r.name, now - began, book.tier.wake_s)
            elif verdict == "failed":
                log.warning("actuator %s: wake of %s failed (%s); stopping it and starting a cold replica",
                            self.target, r.name, why)
                self._retire(r)
                self._replicas.extend(self._spawn(1))
        for r in [r for r, _ in book.asleep if r.proc.poll() is not None]:
            log.warning("actuator %s: sleeper %s exited on its own (status %s)", self.target, r.name, r.proc.poll())
            book.forget(r)
            self._leaving.append(r)  # reaped by _reap
        self._stop_sleepers(book.expired(now), f"asleep {book.tier.ttl_s:g} s (ttl_s)")
        return ready

    def _stop_sleepers(self, gone: list[_Replica], why: str) -> None:
        """Stop released sleepers (SIGTERM: an idle worker exits at once; reaped by :meth:`_reap`)."""
        for r in gone:
            log.info("actuator %s: releasing sleeper %s: %s", self.target, r.name, why)
            r.leaving_since = time.monotonic()
            self._terminate(r)
            self._leaving.append(r)

    # ---- files -----------------------------------------------------------------------------------

    def _write_targets(self) -> None:
        if self._targets_file is None:
            return
        with self._lock:
            live = [r for r in self._replicas + self._leaving if r.ready_s is not None]
            doc = [{"targets": [r.url.removeprefix("http://") for r in live], "labels": {"job": "ebb-worker"}}]
            try:
                atomic_write(self._targets_file, json.dumps(doc))
            except OSError as exc:
                raise PermanentError(f"cannot write Prometheus targets to {self._targets_file}: {exc}; "
                                     "make its directory writable") from exc
