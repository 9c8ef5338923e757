"""The Kubernetes actuator's asleep tier: drain a victim out of its Service, put its engine to sleep, wake it.

:class:`KubeTier` is the part of :class:`~ebb.actuate.kubernetes.KubernetesActuator` that runs when it is
given a :class:`~ebb.config.tiers.SleepTier` (the :class:`~ebb.actuate.base.SleepingActuator` lifecycle;
docs/tiers.md "Live (Kubernetes)" has the manifest). The workload's Service selects its pods by
``ebb.io/routable: "true"`` as well as by the app's labels; the Deployment's pod template sets it and
its selector does not name it, so Ebb can take one pod out of the Service without the ReplicaSet
replacing it.

Guarantees, per pod (all writes are merge patches of the pod, or ``/scale`` with the
Deployment's ``resourceVersion`` as a precondition):

* **Drain.** ``apply`` lowering the running replicas patches each victim (named first, then newest)
  ``ebb.io/routable: "false"`` with annotations ``ebb.io/draining`` (Unix s) and ``ebb.dev/victim-of``
  (the decision id) and returns: the pod leaves the Service's EndpointSlices, ``/scale`` is unchanged.
  A background thread (every ``tick_s``, 0.2 s; no API call but when a pod changes state, and a pod
  list every ``scan_s``, 5 s) reads the pod's in-flight requests
  (:meth:`~ebb.actuate.engine_http.EngineHttp.inflight`: running + waiting from its ``/metrics``) once
  ``settle_s`` (2 s: routers and kube-proxy drop the endpoint) has passed. **Zero read** → the drain
  ends. An unreadable page is not zero: the drain goes on. **Past ``drain_budget_s``** (120 s) with
  work still in flight, or never read, the pod is released, never slept: its own graceful
  termination finishes the requests, since vLLM's ``/sleep`` (``mode=abort``) would abort them.
* **Sleep.** A drain that ended while fewer than ``tier.max_replicas`` sleep calls
  ``POST /sleep?level=LEVEL`` (1 by default); on 200 the pod gets ``ebb.io/asleep`` (Unix s) and
  ``controller.kubernetes.io/pod-deletion-cost: "-1000"`` and stays a pod of the Deployment: **``/scale``
  counts running + asleep (+ draining)**. Otherwise (no room, the call failed) it is released.
* **Release** (a sleeper past ``tier.ttl_s``, :meth:`KubeTier.keep_asleep`, a failed wake, a drain
  that cannot sleep): cost ``-2000`` (below every sleeper's), then ``/scale`` − 1, so the ReplicaSet
  controller deletes that pod and it terminates gracefully. Upstream deletes **not-Ready pods before
  any cost**, so a release waits (and is retried every tick) while a pod of the Deployment that is
  not being released is not Ready: a starting pod is never deleted in a sleeper's place. A victim
  that was never Ready (a cold pod still starting) served nothing: it is released at once.
* **Labels Ebb did not set are left alone.** A pod with ``ebb.io/routable: "false"`` and no
  ``ebb.io/draining`` (a person took it out) counts as draining (no capacity) and is never slept
  or released by the tier.
* **Wake.** ``apply`` raising the running replicas takes sleepers first, the most recent sleeper
  first: each loses ``ebb.io/asleep`` and its deletion cost and gets ``ebb.io/waking`` at once (it
  counts as a starting replica from then), and a thread calls ``POST /wake_up``, then polls
  ``GET /is_sleeping`` until false, then patches ``ebb.io/routable: "true"`` (back in the Service)
  unless a later decision took the pod meanwhile (it no longer carries ``ebb.io/waking``). A pod
  still draining is not taken back by a scale-up (cold pods start instead); it sleeps when its drain
  ends and is woken by the next one.
  A wake that fails or is not done within ``max(10 s, 5 × tier.wake_s)`` releases that pod and
  raises ``/scale`` by one once it is terminating (a cold replica in its place); logged at WARNING.
  The rest of the scale-up raises ``/scale`` (cold pods).
* **At most once per decision id, across restarts.** Before it changes anything, a decision writes
  the Deployment's ``ebb.dev/last-decision-id`` and ``ebb.dev/last-decision-replicas``
  (``running 3->2``) with the resourceVersion read as a precondition (409: re-read, retried); an
  actuator that finds its id there answers ``applied=False`` ("already applied"). A crash between that
  write and the pod patches loses the decision (never doubles it): the next cycle decides again.
* **State.** Pods with ``ebb.io/asleep`` are :attr:`FleetState.asleep` (oldest sleeper first) unless
  queued for release; those, and pods with ``ebb.io/draining`` or ``ebb.io/routable: "false"``,
  count as draining; waking pods as starting (``ready_s`` None). ``spec_replicas`` = ``/scale`` −
  asleep − draining. Everything lives in
  the pods' labels and annotations, so a restarted actuator resumes a drain (from its annotation's
  time), and finds its sleepers.
* **Drain records** (:attr:`KubeTier.drains`, a :class:`~ebb.actuate.drain_report.DrainReporter`; the
  controller's observer writes them to the ledger): a Ready victim's drain is told when it starts
  (``reason`` ``sleep`` while the sleepers and earlier drains leave room under ``tier.max_replicas``,
  else ``release``; ``budget_s``), at its engine reads (bounded steps: the first, then a changed count
  at most every 5 s, and every 30 s), and when it ends: ``drained`` → ``slept`` or ``released`` (no
  room, ``/sleep`` failed: the note says which), ``budget`` → ``released``, ``vanished`` (the pod was
  deleted or terminating, seen at the next scan) → ``gone``. A drain resumed after a restart is told
  again from its annotation's time (one ``drain_id``, :func:`~ebb.actuate.drain_report.stamp_ns`). A
  victim never Ready is not drained and leaves no record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final

from ebb.actuate.base import ActuationResult, FleetState, ReplicaState
from ebb.actuate.drain_report import DrainReporter
from ebb.actuate.engine_http import EngineCallError, EngineHttp
from ebb.actuate.kube_client import (DECISION_ANNOTATION, DECISION_REPLICAS_ANNOTATION, DELETION_COST_ANNOTATION,
                                     KubePod, WriteConflict)
from ebb.actuate.kube_tier_settings import (ASLEEP_ANNOTATION, DEFAULT_DRAIN_BUDGET_S, DRAINING_ANNOTATION,
                                            RELEASE_COST, ROUTABLE_LABEL, SLEEPER_COST, VICTIM_ANNOTATION,
                                            WAKING_ANNOTATION, TierOps, TierSettings, annotation_time)
from ebb.errors import PermanentError, TransientError
from ebb.model.ids import DecisionId
from ebb.model.observation import ScaleRequest

__all__ = ["ASLEEP_ANNOTATION", "DEFAULT_DRAIN_BUDGET_S", "DRAINING_ANNOTATION", "RELEASE_COST", "ROUTABLE_LABEL",
           "SLEEPER_COST", "VICTIM_ANNOTATION", "WAKING_ANNOTATION", "KubeTier", "TierOps", "TierSettings"]

log = logging.getLogger(__name__)
_TERMINATING_WAIT_S: Final = 30.0
_RUNNING: Final = "running "
"""Prefix of a tier decision's replicas annotation (``running 3->2``): /scale does not move with it."""


class KubeTier:
    """The asleep tier of one :class:`KubernetesActuator` (module docstring); started by it."""

    def __init__(self, ops: TierOps, settings: TierSettings, *, wall: Callable[[], float] = time.time) -> None:
        self.a, self.s, self._wall = ops, settings, wall
        self._drains: dict[str, tuple[float, KubePod]] = {}
        """Pod → (monotonic time its drain started, the pod as read then): drains read without the API."""
        self._last_scan = -1e18
        self._releases: dict[str, int] = {}
        """Pods to release → cold replicas to start once each is terminating."""
        self._colds: dict[str, tuple[int, float]] = {}
        """Released pods → (cold replicas to start once it is terminating, monotonic deadline to start anyway)."""
        self._wakes: dict[str, threading.Thread] = {}
        self.slowest_wake_s = 0.0
        """The slowest successful wake so far (``/wake_up`` until back in the Service), s; 0 before any."""
        self.drains = DrainReporter(ops.target, wall=wall, monotonic=ops.clock)
        """Each drain's start, in-flight steps and end, told to its observer (the controller's ledger)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ebb-tier-{ops.target}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for t in list(self._wakes.values()):
            t.join(timeout=self.s.wake_deadline_s + 1)

    def engine(self, p: KubePod) -> EngineHttp | None:
        if not p.ip:
            return None
        host = f"[{p.ip}]" if ":" in p.ip else p.ip
        return EngineHttp(f"http://{host}:{self.s.engine_port}", self.s.engine_timeout_s)

    # -- reads -------------------------------------------------------------------------------------
    def classify(self, pods: Iterable[KubePod]) -> tuple[list[KubePod], list[KubePod], list[KubePod], int]:
        """(running incl. waking, oldest first; asleep, oldest sleeper first; draining; terminating)."""
        running, asleep, draining, terminating = [], [], [], 0
        for p in pods:
            if p.terminating:
                terminating += 1
            elif ASLEEP_ANNOTATION in p.annotations:
                asleep.append(p)
            elif WAKING_ANNOTATION in p.annotations:
                running.append(p)
            elif DRAINING_ANNOTATION in p.annotations or p.labels.get(ROUTABLE_LABEL) == "false":
                draining.append(p)
            else:
                running.append(p)
        running.sort(key=lambda p: (p.created_s, p.name))
        asleep.sort(key=lambda p: (annotation_time(p, ASLEEP_ANNOTATION) or 0.0, p.name))
        return running, asleep, draining, terminating

    def state(self, spec: int, pods: list[KubePod]) -> FleetState:
        running, asleep, draining, terminating = self.classify(pods)
        leaving = [p for p in asleep if p.name in self._releases]  # queued for release: not counted on
        asleep = [p for p in asleep if p.name not in self._releases]
        draining += leaving
        a = self.a

        def rs(p: KubePod, ready: bool = True) -> ReplicaState:
            return ReplicaState(a.replica_id(p.name), p.name, p.created_s, p.ready_s if ready else None,
                                a.zone(p.node), self._url(p))
        return FleetState(a.target, max(0, spec - len(asleep) - len(draining)),
                          tuple(rs(p, WAKING_ANNOTATION not in p.annotations) for p in running),
                          draining=len(draining) + terminating, asleep=tuple(rs(p) for p in asleep),
                          wake_s_seen=self.slowest_wake_s or None)

    def _url(self, p: KubePod) -> str:
        e = self.engine(p)
        return e.url if e is not None else ""

    # -- apply -------------------------------------------------------------------------------------
    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        """Drain victims or wake sleepers (then cold pods); the caller holds the actuator's lock."""
        a = self.a
        for _ in range(a.max_retries + 1):
            dep = a.read_deployment()
            if dep.annotations.get(DECISION_ANNOTATION) == decision_id:  # a previous actuator took it
                what = dep.annotations.get(DECISION_REPLICAS_ANNOTATION, "")
                frm, _, to = what.removeprefix(_RUNNING).partition("->")
                if frm.isdigit() and to.isdigit():
                    return a.finish(ActuationResult(decision_id, False, int(frm), int(to)), "already applied")
            pods = a.pods(dep.selector)
            running, asleep, _draining, _ = self.classify(pods)
            n, want = len(running), request.replicas
            if want == n:
                return a.finish(ActuationResult(decision_id, False, n, n), "no change")
            try:
                a.write_intent(decision_id, dep, f"{_RUNNING}{n}->{want}")
                break
            except WriteConflict:
                continue
        else:
            raise TransientError(f"decision {decision_id}: {a.target} kept changing (409 Conflict "
                                 f"{a.max_retries + 1} times); retry later", retry_after_s=a.backoff_s)
        stamp = f"{self._wall():.3f}"
        if want < n:
            names = a.replica_names()
            by_name = {p.name: p for p in running}
            named = list(dict.fromkeys(nm for v in request.victims if (nm := names.get(v)) in by_name))
            newest = [p.name for p in sorted(running, key=lambda p: (p.created_s, p.name), reverse=True)
                      if p.name not in named]
            victims = tuple((named + newest)[: n - want])
            for name in victims:
                a.patch_pod(name, {DRAINING_ANNOTATION: stamp, WAKING_ANNOTATION: None,
                                    VICTIM_ANNOTATION: decision_id}, labels={ROUTABLE_LABEL: "false"})
                self._drains[name] = (a.clock(), by_name[name])
                self._tell_start(by_name[name], decision_id, float(stamp), len(asleep))
                log.info("decision %s: %s leaves the Service and drains", decision_id, name)
            result = ActuationResult(decision_id, True, n, want, removed=victims)
        else:
            # the most recent sleeper first; one already queued for release is no longer counted on
            woken = [p for p in reversed(asleep) if p.name not in self._releases][: want - n]
            for p in woken:
                a.patch_pod(p.name, {ASLEEP_ANNOTATION: None, DELETION_COST_ANNOTATION: None,
                                      WAKING_ANNOTATION: stamp})
                self._start_wake(p)
            cold = want - n - len(woken)
            added: tuple[str, ...] = ()
            if cold:
                existing = {p.name for p in pods}
                self.scale_by(cold)
                added = a.added(dep.selector, existing)
            result = ActuationResult(decision_id, True, n, want, added=tuple(p.name for p in woken) + added)
        a.emit_event(decision_id, dep, result)
        return a.finish(result, "applied")

    def scale_by(self, delta: int) -> None:
        """``/scale`` += ``delta`` (≥ 0 after), with the resourceVersion read as a precondition; a 409
        re-reads and retries (a release or a cold start is relative to whatever the count is now)."""
        a = self.a
        for _ in range(a.max_retries + 1):
            dep = a.read_deployment()
            try:
                a.patch_scale(max(0, dep.replicas + delta), dep.resource_version)
                return
            except WriteConflict:
                continue
        raise TransientError(f"{a.target}: /scale kept changing (409 Conflict {a.max_retries + 1} times)",
                             retry_after_s=a.backoff_s)

    # -- release -----------------------------------------------------------------------------------
    def release(self, names: Iterable[str], cold: int = 0) -> None:
        """Queue ``names`` for release (module docstring), each followed by ``cold`` cold starts; done
        at once when every pod is Ready, else on a later tick."""
        with self.a.lock:  # the tick, the wake threads and keep_asleep all queue releases
            for name in names:
                self._releases[name] = self._releases.get(name, 0) + cold
            self._do_releases()

    def _do_releases(self) -> None:
        a = self.a
        with a.lock:
            if not self._releases and not self._colds:
                return
            dep = a.read_deployment()
            pods = {p.name: p for p in a.pods(dep.selector)}
            if self._releases and not any(p.ready_s is None and not p.terminating and p.name not in self._releases
                                          for p in pods.values()):
                # upstream deletes not-Ready pods first: a release waits until no pod is starting
                for name, cold in list(self._releases.items()):
                    p = pods.get(name)
                    if p is not None and not p.terminating:
                        a.patch_pod(name, {DELETION_COST_ANNOTATION: str(RELEASE_COST)})
                        self.scale_by(-1)
                        log.info("%s released: deletion cost %d, /scale - 1", name, RELEASE_COST)
                    del self._releases[name]
                    if cold:
                        self._colds[name] = (cold, a.clock() + _TERMINATING_WAIT_S)
                pods = {p.name: p for p in a.pods(dep.selector)}
            for name, (cold, deadline) in list(self._colds.items()):
                # /scale += cold once the released pod is terminating: the ReplicaSet deletes it first
                p = pods.get(name)
                if p is None or p.terminating or a.clock() > deadline:
                    self.scale_by(cold)
                    del self._colds[name]
                    log.warning("%s: %d cold replica(s) started in place of %s", a.target, cold, name)

    def keep_asleep(self, keep: int | None) -> tuple[str, ...]:
        """The oldest sleepers past ``keep``, released now or, while a pod starts, queued (never woken)."""
        if keep is None:
            return ()
        if keep < 0:
            raise ValueError(f"keep must be >= 0 or None, got {keep!r}")
        a = self.a
        with a.lock:
            _, asleep, _, _ = self.classify(a.pods(a.read_deployment().selector))
            gone = tuple(p.name for p in asleep[: max(0, len(asleep) - keep)])
            self.release(gone)
        return gone

    # -- wake --------------------------------------------------------------------------------------
    def _start_wake(self, p: KubePod) -> None:
        t = threading.Thread(target=self._wake, args=(p,), name=f"ebb-wake-{p.name}", daemon=True)
        self._wakes[p.name] = t
        t.start()

    def _wake(self, p: KubePod) -> None:
        a = self.a
        engine = self.engine(p)
        deadline_s = self.s.wake_deadline_s
        t0 = a.clock()
        try:
            if engine is None:
                raise EngineCallError(f"pod {p.name} has no pod IP")
            engine.wake_up(timeout_s=deadline_s)
            while engine.is_sleeping():
                if a.clock() - t0 > deadline_s:
                    raise EngineCallError(f"{engine.url} still sleeping {deadline_s:g} s after /wake_up")
                time.sleep(0.05)
            with a.lock:  # apply holds the lock too: a decision cannot make it a victim in between
                now = next((q for q in a.pods(a.read_deployment().selector) if q.name == p.name), None)
                if now is None or now.terminating or WAKING_ANNOTATION not in now.annotations:
                    log.info("%s woke but a later decision took it (draining or gone): left out of the Service",
                             p.name)
                    return
                a.patch_pod(p.name, {WAKING_ANNOTATION: None, VICTIM_ANNOTATION: None},
                            labels={ROUTABLE_LABEL: "true"})
            took = a.clock() - t0
            self.slowest_wake_s = max(self.slowest_wake_s, took)
            log.info("%s woke in %.2f s and is back in the Service", p.name, took)
        except EngineCallError as exc:
            log.warning("wake of %s failed (%s): releasing it and starting a cold replica", p.name, exc)
            try:
                with a.lock:
                    a.patch_pod(p.name, {WAKING_ANNOTATION: None}, labels={ROUTABLE_LABEL: "false"})
                self.release([p.name], cold=1)
            except (PermanentError, TransientError, WriteConflict) as err:
                log.warning("could not release %s after its failed wake: %s", p.name, err)
        except (PermanentError, TransientError, WriteConflict) as exc:
            log.warning("%s woke but could not be put back in the Service: %s", p.name, exc)
        finally:
            self._wakes.pop(p.name, None)

    # -- the drain loop ----------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.s.tick_s):
            try:
                self.tick()
            except (PermanentError, TransientError, WriteConflict) as exc:
                log.warning("%s: asleep tier tick failed: %s", self.a.target, exc)
            except Exception:  # a bug must not stop the loop: logged with its traceback
                log.exception("%s: asleep tier tick raised", self.a.target)

    def tick(self) -> None:
        """One pass (every ``tick_s``): the drains known are read from their engines (no API call);
        every ``scan_s`` the pods are listed, so a drain begun before a restart is resumed and sleepers
        past their TTL are released; queued releases are done. API calls stay within the client's
        budget: two per scan, and writes only when a pod changes state."""
        a = self.a
        now_m, now_w = a.clock(), self._wall()
        asleep: list[KubePod] | None = None
        if now_m - self._last_scan >= self.s.scan_s:
            self._last_scan = now_m
            with a.lock:
                pods = a.pods(a.read_deployment().selector)
            _, asleep, draining, _ = self.classify(pods)
            for p in draining:  # a drain this actuator began, or one it finds after a restart
                stamp = annotation_time(p, DRAINING_ANNOTATION)
                if stamp is not None and p.name not in self._drains and p.name not in self._releases:
                    self._drains[p.name] = (now_m - max(0.0, now_w - stamp), p)
                    self._tell_start(p, p.annotations.get(VICTIM_ANNOTATION, ""), stamp, len(asleep))
            alive = {p.name for p in pods if not p.terminating}
            for name in [n for n in self._drains if n not in alive]:  # deleted by someone else meanwhile
                del self._drains[name]
                self.drains.end(name, "vanished", "gone", note="the pod was deleted or terminating while it drained")
            ttl = self.s.tier.ttl_s
            old = [p.name for p in asleep if now_w - (annotation_time(p, ASLEEP_ANNOTATION) or 0.0) >= ttl
                   and p.name not in self._releases]
            if old:
                log.info("%s: %d sleeper(s) past the %g s TTL released", a.target, len(old), ttl)
                self.release(old)
        ended: list[tuple[KubePod, float | None]] = []
        for name, (started, p) in list(self._drains.items()):
            elapsed = now_m - started
            if p.ready_s is None:  # never Ready: it served nothing, nothing to drain or to sleep
                del self._drains[name]
                log.info("%s was not Ready when chosen: released at once", p.name)
                self.release([name])
                continue
            if elapsed < self.s.settle_s:
                continue
            engine = self.engine(p)
            inflight = engine.inflight() if engine is not None else None
            self.drains.read(name, inflight)
            if inflight != 0 and elapsed < self.s.drain_budget_s:
                continue
            del self._drains[name]
            ended.append((p, inflight))
        if ended:
            with a.lock:
                _, now_asleep, _, _ = self.classify(a.pods(a.read_deployment().selector))
            sleeping = len(now_asleep)
            for p, inflight in ended:
                if inflight != 0:
                    log.warning("%s: drain budget %.0f s ran out with %s in flight: released (its graceful "
                                "termination finishes them), not slept", p.name, self.s.drain_budget_s,
                                "an unreadable count" if inflight is None else f"{inflight:g} requests")
                    self.release([p.name])
                    self.drains.end(p.name, "budget", "released", inflight=inflight,
                                    note=f"drain budget {self.s.drain_budget_s:g} s ran out: released, not slept")
                    continue
                why = f"no room: {sleeping} of {self.s.tier.max_replicas} asleep"
                if sleeping < self.s.tier.max_replicas and (why := self._sleep(p, self.engine(p), now_w)) == "":
                    sleeping += 1
                    self.drains.end(p.name, "drained", "slept", inflight=0, note=f"sleep level {self.s.sleep_level}")
                else:
                    self.release([p.name])
                    self.drains.end(p.name, "drained", "released", inflight=0, note=why)
        if self._releases or self._colds:
            self._do_releases()

    def _tell_start(self, p: KubePod, decision_id: str, stamp: float, asleep: int) -> None:
        """Tell a Ready victim's drain (a never-Ready one served nothing: it is not drained); it means to
        sleep while the sleepers and the drains before it leave room."""
        if p.ready_s is not None:
            room = asleep + len(self._drains) - 1 < self.s.tier.max_replicas
            self.drains.start(p.name, decision_id, "sleep" if room else "release", self.s.drain_budget_s,
                              started_s=stamp)

    def _sleep(self, p: KubePod, engine: EngineHttp | None, now_w: float) -> str:
        """``/sleep``, then the asleep annotations: "" when asleep, else why not."""
        if engine is None:
            return "no pod IP"
        try:
            engine.sleep(self.s.sleep_level)
        except EngineCallError as exc:
            log.warning("%s could not be put to sleep (%s): released instead", p.name, exc)
            return f"/sleep failed: {exc}"
        with self.a.lock:
            self.a.patch_pod(p.name, {DRAINING_ANNOTATION: None, ASLEEP_ANNOTATION: f"{now_w:.3f}",
                                       DELETION_COST_ANNOTATION: str(SLEEPER_COST)})
        log.info("%s drained and asleep (level %d)", p.name, self.s.sleep_level)
        return ""
