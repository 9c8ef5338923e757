"""Cluster simulation: every service on one virtual clock and one GPU pool, vectorised over services.

One step is one second for all S online services, B batch services and Z zones at once (numpy; no
Python loop per service):

1. **Lifecycle.** Replicas requested ``cold_start_s`` ago turn ready; drained ones (``DRAIN_S``
   after removal) give their GPUs back. Starting, ready and draining replicas are all billed.
2. **Batch demand.** Batch/training services take free GPUs up to their demand (BestEffort: they
   never preempt) and give back what their demand no longer needs.
3. **Serving (fluid queue).** A service with ``r`` ready replicas serves ``r × capacity_rps``
   requests per second, FIFO; the queue carries over. Arrivals of the second wait from ``q₀/μ`` to
   ``q₁/μ`` (linear in between); those whose wait + ``service_ms`` exceeds ``slo_ms`` are
   violations (all of them when ``r = 0``). Requests waiting past ``MAX_WAIT_S`` are dropped
   (counted as violations) so an unserved queue stays bounded.
4. **Policy.** The policy (:mod:`ebb.sim.cluster.policies`) sees this second's arrivals, served,
   queue, waits, ready and starting replicas per service and borrowed quota, and returns the
   replicas it wants. :class:`ClusterEngine` runs the engine a second at a time for a caller that
   is the policy (the live fleet controller on the virtual clock, in tests); :func:`simulate` runs
   it with a policy callable.
5. **Writes.** Each service whose wanted count differs from its spec is one state write (a
   ``/scale`` patch). With a write limit (Ebb's: ``writes_per_100ms``) at most ``10 × limit``
   writes go out per second, in batches of ``limit`` 100 ms apart, scale-ups first (largest
   shortfall first), then scale-downs in the policy's order; the rest wait for the next second.
6. **Placement** (the Kubernetes scheduler, for every policy alike): a new replica goes to the
   least-populated of its service's zones that has free GPUs (topology spread, max skew 1, ties to
   the lower zone index); without free GPUs it preempts batch GPUs of that zone — only ones its
   namespace holds above its quota ``min`` (borrowed), lowest priority first; still none → it
   stays pending and is retried every second. A namespace at its quota ``max`` gets no more; a pod
   whose QoS class may not borrow (:class:`~ebb.decide.quota.QuotaPolicy`: Burstable and BestEffort
   by default) runs within its namespace's ``min`` only; other namespaces' unmet ``min`` is never
   taken.
7. **Removal.** From a most-populated zone only (so zone skew never grows): a starting replica there
   first (the newest request), else a ready one (:mod:`ebb.decide.fleet_plan`'s rule).

Accounting per second: GPU-seconds per service and zone, violations per service, zone skew per
service (max − min over its zones), writes, preemptions, and quota breaches (a namespace held
below ``min(its demand, its min)`` by another's preemption — the rule above makes that 0; it is
measured, not assumed). With a warm-up (``ClusterInputs.warmup_s``, :mod:`ebb.sim.warmup`) every
policy runs from second 0 but the accounting starts afresh at the warm-up's end; the write batches
(the ledger's) and the sampled series (the report's charts) keep the whole run.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ebb.decide.fleet_quota import borrowed_replicas
from ebb.sim.cluster.lending import Preemption, TierState
from ebb.sim.cluster.records import (
    ClusterInputs,
    ClusterRun,
    Explain,
    KeepAsleep,
    Policy,
    PolicyStep,
    WriteBatch,
)

__all__ = ["DRAIN_S", "MAX_WAIT_S", "ClusterEngine", "ClusterInputs", "ClusterRun", "Explain", "KeepAsleep", "Policy",
           "PolicyStep", "WriteBatch", "simulate"]

IntArray = npt.NDArray[np.int64]

DRAIN_S = 10
"""Seconds a removed replica keeps its GPU while it finishes in-flight work (billed)."""
MAX_WAIT_S = 120.0
"""Requests queued longer than this are dropped (and were violations already)."""



def simulate(inp: ClusterInputs, policy: Policy, *, write_limit_per_100ms: int | None,
             sample_s: int = 60, record_batches: bool = True, explain: Explain | None = None,
             keep_asleep: KeepAsleep | None = None) -> ClusterRun:
    """Run the whole span; see the module docstring for the model. ``explain`` (the policy's
    :meth:`explain`, when it has one) is asked about every recorded write as it is issued;
    ``keep_asleep`` after each decision (None: the policy decides no tiers, removed replicas go)."""
    engine = ClusterEngine(inp, write_limit_per_100ms=write_limit_per_100ms, sample_s=sample_s,
                           record_batches=record_batches, explain=explain)
    for t in range(inp.seconds):
        wanted, order = policy(engine.sense(t))
        engine.act(t, wanted, order, keep=None if keep_asleep is None else keep_asleep())
    return engine.run


class ClusterEngine:
    """The engine one second at a time, for a caller that is the policy itself (a live controller on
    the virtual clock, in tests): :meth:`sense` runs steps 1–3 of second ``t`` and returns what the
    policy sees; :meth:`act` takes its answer and runs steps 5–7 and the accounting. :func:`simulate`
    is ``sense`` then ``act`` for every second."""

    def __init__(self, inp: ClusterInputs, *, write_limit_per_100ms: int | None, sample_s: int = 60,
                 record_batches: bool = True, explain: Explain | None = None) -> None:
        self.inp = inp
        self.write_limit = write_limit_per_100ms
        self.sample_s = sample_s
        self.record_batches = record_batches
        self.explain = explain
        self._st = _State(inp)
        self.run = _zero_run(self._st)
        """The accounting so far (complete once every second has been acted on)."""

    def sense(self, t: int) -> PolicyStep:
        """Second ``t``'s lifecycle, batch placement and serving; what the policy sees."""
        if t == self.inp.warmup_s > 0:
            self._restart_accounting()
        self._st.lifecycle(t)
        self._st.place_batch(t, self.run)
        return self._st.serve(t, self.run)

    def _restart_accounting(self) -> None:
        """The warm-up is over: every counter and maximum starts again from zero; the recorded write
        batches and the sampled series carry on."""
        old = self.run
        self.run = _zero_run(self._st)
        self.run.batches, self.run.series_t_s = old.batches, old.series_t_s
        self.run.series_gpus, self.run.series_batch_gpus = old.series_gpus, old.series_batch_gpus

    def act(self, t: int, wanted: npt.ArrayLike, order: npt.ArrayLike | None,
            keep: npt.ArrayLike | None = None) -> None:
        """Second ``t``'s writes (``wanted`` replicas per service, scale-downs in ``order``), placement
        of what waits, and the accounting. ``keep``: sleepers to keep per service (−1: no opinion);
        None: this policy decides no tiers, so what it removes goes (:mod:`ebb.sim.cluster.lending`)."""
        st = self._st
        st.write(t, np.asarray(wanted, dtype=np.int64), None if order is None else np.asarray(order, dtype=np.int64),
                 self.write_limit, self.run, self.record_batches, self.explain, sleep=keep is not None)
        if keep is not None and st.tier.on:
            st.tier.keep(np.asarray(keep, dtype=np.int64), self.inp.gpus, st.batch)
        st.retry_pending(t, self.run)
        st.account(t, self.run, self.sample_s)


def _zero_run(s: _State) -> ClusterRun:
    """Accounting with nothing counted yet, sized for ``s``'s services."""
    return ClusterRun(gpu_s=np.zeros(s.s), batch_gpu_s=np.zeros(s.b), batch_unserved_gpu_s=np.zeros(s.b),
                      batch_demand_gpu_s=np.zeros(s.b), requests=np.zeros(s.s), violations=np.zeros(s.s),
                      max_skew=np.zeros(s.s, dtype=np.int64), skew_breach_s=0, writes=0,
                      max_writes_per_100ms=0, preemptions=0, quota_breach_s=0, pending_replica_s=0.0,
                      asleep_gpu_s=np.zeros(s.s), lent_gpu_s=np.zeros(s.b), batch_lost_gpu_s=np.zeros(s.b))


class _State:
    def __init__(self, inp: ClusterInputs) -> None:
        self.inp = inp
        self.s, self.z, self.b = len(inp.names), len(inp.zones), len(inp.batch_names)
        self.tier = TierState(inp.tiers, services=self.s, zones=self.z, batch=self.b, drain_s=DRAIN_S, seed=inp.seed)
        wake = int(inp.tiers.wake_steps.max(initial=0)) if inp.tiers is not None else 0
        self.ring = max(int(inp.cold_start_s.max(initial=1)), wake) + inp.checkpoint_s + 2
        self.ready = np.zeros((self.s, self.z), dtype=np.int64)
        self.inc = np.zeros((self.ring, self.s, self.z), dtype=np.int64)
        self.drain = np.zeros((DRAIN_S + 1, self.s, self.z), dtype=np.int64)
        self.batch = np.zeros((self.b, self.z), dtype=np.int64)
        self.queue = np.zeros(self.s)
        self.pending = np.zeros(self.s, dtype=np.int64)
        self.spec = np.zeros(self.s, dtype=np.int64)
        self.n_ns = len(inp.namespace_names)
        self._governed = (inp.quota_min > 0) | (inp.quota_max >= 0)
        """Namespaces with a quota; elsewhere nothing borrows and nothing is limited."""
        for _ in range(int(inp.initial.max(initial=0))):
            self._place(np.where(inp.initial > self.ready.sum(axis=1), 1, 0), ready_now=True, t=0)
        self.spec = self.ready.sum(axis=1)

    # -- GPUs --------------------------------------------------------------------------------------
    def starting(self) -> IntArray:
        return np.asarray(self.inc.sum(axis=0))

    def online_gpus(self) -> IntArray:
        """GPUs per (service, zone) serving held: ready, starting, draining, asleep (lent or not)."""
        per = self.ready + self.starting() + self.drain.sum(axis=0)
        if self.tier.on:  # a run without tiers pays nothing for them on this path (called several times a second)
            per = per + self.tier.held()
        return np.asarray(per * self.inp.gpus[:, None])

    def free(self) -> IntArray:
        used = self.online_gpus().sum(axis=0) + self.batch.sum(axis=0)
        return np.asarray(self.inp.zone_gpus - used)

    def ns_usage(self) -> IntArray:
        on = np.bincount(self.inp.namespaces, weights=self.online_gpus().sum(axis=1), minlength=self.n_ns)
        bt = np.bincount(self.inp.batch_namespaces, weights=self.batch.sum(axis=1), minlength=self.n_ns) \
            if self.b else np.zeros(self.n_ns)
        return np.asarray((on + bt).astype(np.int64))

    # -- step parts --------------------------------------------------------------------------------
    def lifecycle(self, t: int) -> None:
        slot = t % self.ring
        self.ready += self.inc[slot]
        self.inc[slot] = 0
        self.drain[t % (DRAIN_S + 1)] = 0
        self.tier.settle(t, self.inp.gpus, self.batch)

    def place_batch(self, t: int, run: ClusterRun) -> None:
        if not self.b:
            return
        want = np.ceil(self.inp.batch_demand[:, t] - 1e-9).astype(np.int64)
        lent = self.tier.lent
        # give back what the demand no longer needs: lent GPUs first (their sleepers may wake), then
        # from the fullest zone
        for k in np.flatnonzero(self.batch.sum(axis=1) + lent.sum(axis=1) > want):
            self.tier.give_back(int(k), int(self.batch[k].sum() + lent[k].sum() - want[k]))
        for _ in range(int(np.max(self.batch.sum(axis=1) + lent.sum(axis=1) - want, initial=0))):
            over = self.batch.sum(axis=1) + lent.sum(axis=1) > want
            zi = np.argmax(self.batch, axis=1)
            self.batch[np.flatnonzero(over), zi[over]] -= 1
        short = want - self.batch.sum(axis=1) - lent.sum(axis=1)
        if short.max(initial=0) > 0:
            cap = self._ns_room()
            for k in np.argsort(-self.inp.batch_priority, kind="stable"):  # higher priority first
                free = self.free()
                ns = int(self.inp.batch_namespaces[k])
                usage = self.ns_usage()
                unmet = np.maximum(self.inp.quota_min - usage, 0)
                spare = int(free.sum()) - (int(unmet.sum()) - int(unmet[ns]))  # others' unmet min stays free
                n = int(min(short[k], max(spare, 0), cap[ns]))
                own_only = self._governed[ns] and not self.inp.batch_may_borrow[k]
                if own_only:
                    n = min(n, max(int(self.inp.quota_min[ns] - usage[ns]), 0))  # within its min only
                while n > 0:
                    zi = int(np.argmax(free))
                    put = int(min(n, free[zi]))
                    if put <= 0:
                        break
                    self.batch[k, zi] += put
                    free[zi] -= put
                    cap[ns] -= put
                    short[k] -= put
                    n -= put
                if self.tier.on and not own_only and short[k] > 0 and cap[ns] > 0:
                    # free GPUs ran out: borrow sleepers' (held by serving, so no one's min is touched)
                    cap[ns] -= self.tier.lend(int(k), int(min(short[k], cap[ns])), self.inp.gpus)
        held = self.batch.sum(axis=1) + lent.sum(axis=1)
        run.batch_gpu_s += held
        run.lent_gpu_s += lent.sum(axis=1)
        run.batch_demand_gpu_s += self.inp.batch_demand[:, t]
        run.batch_unserved_gpu_s += np.maximum(self.inp.batch_demand[:, t] - held, 0.0)

    def _ns_room(self) -> IntArray:
        """GPUs each namespace may still take under its quota ``max``: its usage plus what its batch
        services borrow from sleepers (that counts against the borrower's max, not its min)."""
        usage = self.ns_usage()
        if self.b and self.tier.on:
            usage = usage + np.bincount(self.inp.batch_namespaces, weights=self.tier.lent.sum(axis=1),
                                        minlength=self.n_ns).astype(np.int64)
        return np.asarray(np.where(self.inp.quota_max >= 0, self.inp.quota_max - usage, 1 << 40))

    def serve(self, t: int, run: ClusterRun) -> PolicyStep:
        inp = self.inp
        a = inp.arrivals[:, t].astype(float)
        ready = self.ready.sum(axis=1)
        mu = ready * inp.capacity_rps
        q0 = self.queue
        work = q0 + a
        served = np.minimum(work, mu)
        q1 = work - served
        q1 = np.minimum(q1, mu * MAX_WAIT_S)  # older than MAX_WAIT_S: dropped (violations already)
        with np.errstate(divide="ignore", invalid="ignore"):
            w0 = np.where(mu > 0, q0 / mu, np.inf)
            w1 = np.where(mu > 0, (q0 + a - mu).clip(min=0.0) / mu, np.inf)
            theta = inp.slo_s - inp.service_s
            late = np.where(w1 <= theta, 0.0,
                            np.where(w0 >= theta, 1.0, (w1 - theta) / np.where(w1 > w0, w1 - w0, 1.0)))
            late = np.clip(np.nan_to_num(late, nan=1.0), 0.0, 1.0)
            lat = np.where(a > 0, (np.minimum(w1, 10 * inp.slo_s) + inp.service_s) / inp.slo_s, np.nan)

        run.requests += a
        run.violations += a * late
        self.queue = q1
        starting = self.starting()
        return PolicyStep(t_s=float(t), arrivals=a, served=served, queue=q1, ready=ready,
                          starting=starting.sum(axis=1), ready_by_zone=self.ready.copy(),
                          starting_by_zone=starting, latency_ratio=lat, wait_s=w1, wait_first_s=w0,
                          borrowed=self._borrowed(),
                          pending=self.pending.copy(), asleep=self.tier.asleep.sum(axis=1))

    def _borrowed(self) -> IntArray:
        """Replicas above their namespace's min, of the ready and starting ones (the rule of
        :func:`~ebb.decide.fleet_quota.borrowed_replicas`: highest priority first, then service order)."""
        inp = self.inp
        return borrowed_replicas(replicas=(self.ready + self.starting()).sum(axis=1), namespace=inp.namespaces,
                                 priority=inp.priority, gpu_milli=inp.gpus * 1000,
                                 quota_min_milli=inp.quota_min * 1000, governed=self._governed)

    def write(self, t: int, wanted: IntArray, order: IntArray | None, limit: int | None, run: ClusterRun,
              record: bool, explain: Explain | None = None, *, sleep: bool = False) -> None:
        inp = self.inp
        spec = self.ready.sum(axis=1) + self.starting().sum(axis=1) + self.pending
        wanted = np.clip(wanted, inp.min_replicas, inp.max_replicas)
        diff = wanted - spec
        ups = np.flatnonzero(diff > 0)
        ups = ups[np.argsort(-diff[ups], kind="stable")]
        downs_mask = diff < 0
        if order is not None:
            downs = np.asarray(order)[downs_mask[np.asarray(order)]]
        else:
            downs = np.flatnonzero(downs_mask)
        todo = np.concatenate([ups, downs]).astype(np.int64)
        if limit is not None:
            todo = todo[:10 * limit]
        if len(todo) == 0:
            return
        per = limit if limit is not None else len(todo)
        if record:
            for k in range(0, len(todo), per):
                idx = todo[k:k + per]
                why = [explain(int(i)) for i in idx] if explain is not None else []
                run.batches.append(WriteBatch(t + 0.1 * (k // per), tuple(int(i) for i in idx),
                                              tuple(int(spec[i]) for i in idx), tuple(int(wanted[i]) for i in idx),
                                              tuple(w[0] for w in why), tuple(w[1] for w in why)))
        run.writes += len(todo)
        run.max_writes_per_100ms = max(run.max_writes_per_100ms, min(per, len(todo)))
        add = np.zeros(self.s, dtype=np.int64)
        add[todo] = np.maximum(diff[todo], 0)
        cut = np.zeros(self.s, dtype=np.int64)
        cut[todo] = np.maximum(-diff[todo], 0)
        # fewer wanted: cancel pending first, then remove
        cancel = np.minimum(cut, self.pending)
        self.pending -= cancel
        self._remove(cut - cancel, t, sleep=sleep and self.tier.on)
        cold = add - self._wake(t, add, run) if self.tier.on else add
        self.pending += cold
        self.spec = spec + add - cut

    def _wake(self, t: int, add: IntArray, run: ClusterRun) -> IntArray:
        """Scale-ups take sleepers first (:mod:`ebb.sim.cluster.lending`); returns those woken per
        service (a failed wake is not among them: its replica is asked for cold)."""
        woken = np.zeros(self.s, dtype=np.int64)
        for i in np.flatnonzero((add > 0) & (self.tier.asleep.sum(axis=1) > 0)):
            ready, wakes, taken = self.tier.wake(t, int(i), int(add[i]), self.inp.gpus, self.inp.batch_priority,
                                                 self.inp.checkpoint_s)
            for z, delay in ready:
                self.inc[(t + delay) % self.ring, i, z] += 1
            woken[i] = len(ready)
            run.wakes.extend(wakes)
            self._record_preemptions(taken, run)
        return woken

    def _record_preemptions(self, taken: list[Preemption], run: ClusterRun | None) -> None:
        """Count and record preemptions, and charge each its restart cost."""
        if run is None:
            return
        run.preemptions += len(taken)
        run.preemption_log.extend(taken)
        for p in taken:
            run.batch_lost_gpu_s[p.batch] += self.inp.restart_gpu_s * p.gpus

    def retry_pending(self, t: int, run: ClusterRun) -> None:
        if self.pending.max(initial=0) == 0:
            return
        for _ in range(int(self.pending.max())):
            want = (self.pending > 0).astype(np.int64)
            if not want.any():
                break
            placed = self._place(want, ready_now=False, t=t, run=run)
            self.pending -= placed
            if not placed.any():
                break
        run.pending_replica_s += float(self.pending.sum())

    def _place(self, want: IntArray, *, ready_now: bool, t: int, run: ClusterRun | None = None) -> IntArray:
        """Place one replica for each service with ``want > 0``; returns what was placed.

        Free GPUs, namespace usage and room are computed once per call and kept up to date locally:
        a saturated pool costs O(services wanting) per second, not O(services × pool scans).
        """
        inp = self.inp
        placed = np.zeros(self.s, dtype=np.int64)
        room = self._ns_room()
        usage = self.ns_usage()
        free = self.free()
        count = self.ready + self.starting()
        rows = np.flatnonzero(want > 0)
        for i in rows[np.argsort(-inp.priority[rows], kind="stable")]:
            g = int(inp.gpus[i])
            ns = int(inp.namespaces[i])
            unmet = np.maximum(inp.quota_min - usage, 0)
            own = int(min(unmet[ns], g))
            # a guaranteed minimum stays available to its owner: others' unmet min is not free to take
            if room[ns] < g or (own < g and int(free.sum()) - g < int(unmet.sum()) - int(unmet[ns])):
                continue
            if self._governed[ns] and not inp.may_borrow[i] and usage[ns] + g > inp.quota_min[ns]:
                continue  # its QoS class may not borrow: it runs within its namespace's min only
            zones = np.flatnonzero(inp.zone_mask[i])
            zs = zones[np.lexsort((zones, count[i, zones]))]
            low = zs[count[i, zs] <= count[i, zs[0]]]  # max skew 1: only the least-populated zones qualify
            target = -1
            for zi in low:
                if free[zi] >= g:
                    target = int(zi)
                    break
            grace = 0
            if target < 0:
                for zi in low:
                    got = self._preempt(int(zi), g - int(free[zi]), int(inp.priority[i]), run, t=t, service=int(i))
                    if got:
                        free[zi] += got
                        target = int(zi)
                        grace = inp.checkpoint_s  # the evicted job checkpoints before the GPU is free
                        break
            if target < 0:
                continue
            if ready_now:
                self.ready[i, target] += 1
            else:
                self.inc[(t + int(inp.cold_start_s[i]) + grace) % self.ring, i, target] += 1
            count[i, target] += 1
            free[target] -= g
            usage[ns] += g
            room[ns] -= g
            placed[i] += 1
        return placed

    def _preempt(self, zi: int, gpus: int, priority: int, run: ClusterRun | None, *, t: int = 0,
                 service: int = -1) -> int:
        """Free ``gpus`` in zone ``zi`` by evicting batch GPUs its namespace borrows, lowest priority
        first; returns the GPUs freed (0 = not possible, nothing evicted)."""
        inp = self.inp
        if not self.b:
            return 0
        usage = self.ns_usage()
        avail = 0
        plan: list[tuple[int, int]] = []
        for k in np.argsort(inp.batch_priority, kind="stable"):
            if inp.batch_priority[k] >= priority:
                continue
            ns = inp.batch_namespaces[k]
            borrowed = int(usage[ns] - inp.quota_min[ns])
            take = int(min(self.batch[k, zi], max(borrowed, 0), gpus - avail))
            if take > 0:
                plan.append((int(k), take))
                usage[ns] -= take
                avail += take
            if avail >= gpus:
                break
        if avail < gpus:
            return 0
        for k, take in plan:
            self.batch[k, zi] -= take
        self._record_preemptions([Preemption(float(t), k, zi, take, "placement", service) for k, take in plan], run)
        return avail

    def _remove(self, cut: IntArray, t: int, *, sleep: bool = False) -> None:
        """Remove ``cut`` replicas per service (module docstring, step 7); with ``sleep``, ready ones of
        services with a tier drain to sleep instead of going (:mod:`ebb.sim.cluster.lending`)."""
        tiered = self.inp.tiers.tiered if sleep and self.inp.tiers is not None else np.zeros(self.s, dtype=bool)
        if cut.max(initial=0) == 0:
            return
        for _ in range(int(cut.max())):
            rows = np.flatnonzero(cut > 0)
            if len(rows) == 0:
                break
            starting = self.starting()
            count = self.ready + starting
            for i in rows:
                top = int(np.max(np.where(self.inp.zone_mask[i], count[i], -1)))
                # a starting replica first, but only from a most-populated zone (skew never grows);
                # else a ready one from a most-populated zone
                zs = np.flatnonzero((starting[i] > 0) & (count[i] == top))
                if len(zs):
                    zi = int(zs[0])
                    slots = np.flatnonzero(self.inc[:, i, zi] > 0)
                    far = slots[np.argmax((slots - t) % self.ring)]  # the newest request
                    self.inc[far, i, zi] -= 1
                    starting[i, zi] -= 1
                else:
                    zr = np.flatnonzero((self.ready[i] > 0) & (count[i] == top))
                    if not len(zr):
                        cut[i] = 0
                        continue
                    zi = int(zr[0])
                    self.ready[i, zi] -= 1
                    if tiered[i]:
                        self.tier.drain_to_sleep(t, int(i), zi)
                    else:
                        self.drain[(t + DRAIN_S) % (DRAIN_S + 1), i, zi] += 1
                count[i, zi] -= 1
                cut[i] -= 1

    def account(self, t: int, run: ClusterRun, sample_s: int) -> None:
        inp = self.inp
        gpus = self.online_gpus()
        run.gpu_s += gpus.sum(axis=1)
        if self.tier.on:
            run.asleep_gpu_s += (self.tier.held() * inp.gpus[:, None]).sum(axis=1)
        count = self.ready + self.starting()
        hi = np.where(inp.zone_mask, count, -1).max(axis=1)
        lo = np.where(inp.zone_mask, count, 1 << 30).min(axis=1)
        skew = hi - lo
        run.max_skew = np.maximum(run.max_skew, skew)
        if (skew > 1).any():
            run.skew_breach_s += 1
        if self.b:
            usage = self.ns_usage()
            demand = np.bincount(inp.batch_namespaces, weights=np.ceil(inp.batch_demand[:, t] - 1e-9),
                                 minlength=self.n_ns)
            # a namespace held below min(its demand, its min) while another namespace borrows
            short = usage < np.minimum(demand, inp.quota_min)
            borrowing = usage > inp.quota_min
            run.quota_breach_s += int(short.any() and borrowing.any())
        if t % sample_s == 0:
            run.series_t_s.append(float(t))
            run.series_gpus.append(gpus.astype(np.int64))
            run.series_batch_gpus.append(self.batch.copy())
