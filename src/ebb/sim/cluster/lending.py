"""Cluster mode's asleep tier and lending: replicas that sleep on their GPU, best-effort work that borrows it.

A service with a tier (``tier: asleep:wake_s=2,max=8`` in the scenario) run by a policy that decides
tiers (Ebb: :meth:`~ebb.sim.cluster.policies.ClusterPolicy.keep_asleep` is not None) keeps the replicas
it removes, asleep, on their GPUs. The rules are the single-workload simulator's
(:mod:`ebb.sim.sleepers`) on the cluster's 1-second clock, per (service, zone):

* **Who sleeps.** A removed ready replica drains (``DRAIN_S``, billed) and then sleeps in its zone
  when fewer than the tier's ``max`` replicas of its service sleep; otherwise it is removed.
* **Who wakes.** A scale-up takes sleepers first, newest first; each is ready
  ``ceil(wake_s)`` seconds later (the engine's clock is whole seconds), plus the lending
  ``checkpoint_s`` when its GPU was lent and had to be taken back. With the tier's ``fail`` > 0
  that share of wakes fails (drawn from ``numpy.random.default_rng([seed, 0x51EE9])``, one uniform
  per wake): the sleeper is released and the replica cold-starts instead.
* **How long.** A sleeper asleep ``ttl_s`` is released; after each decision the policy's
  ``keep_asleep`` count per service (−1: no opinion) releases the oldest past it.
* **Lending.** A sleeping replica's GPU is *held* (billed to its service: the device stays
  allocated) but its HBM is free, so best-effort services whose QoS class may borrow
  (:class:`~ebb.decide.quota.QuotaPolicy`) borrow it once free GPUs run out, within their
  namespace's quota ``max``. A wake on a lent GPU preempts the borrower (lowest priority first): a
  **reclaim**, recorded with its delay. A sleeper released (TTL, ``keep_asleep``) while lent hands its
  GPU to the borrower outright: no preemption.
* **Costs.** Every preemption — a reclaim, or a cold replica placed on borrowed GPUs
  (:mod:`ebb.sim.cluster.engine`) — is one :class:`Preemption` record and costs the job
  ``restart_gpu_s`` GPU-seconds per GPU (its restart and lost progress), counted in
  ``ClusterRun.batch_lost_gpu_s``.

Pure and vectorised over services and zones; Python loops run only over the replicas that change
tier in a second (sleepers put, woken, released), never per service per second.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ClusterTiers", "Preemption", "TierState", "Wake"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_FAULT_TAG = 0x51EE9
"""The single-workload simulator's second seed word for wake faults (:mod:`ebb.sim.sleepers`)."""


@dataclass(frozen=True)
class ClusterTiers:
    """Per online service (S): the asleep tier, NaN ``wake_s`` = none."""

    wake_s: FloatArray
    max_replicas: IntArray
    ttl_s: FloatArray
    fail: FloatArray
    reserve: FloatArray | None = None
    """The tier's reserve headroom (``reserve=H``); NaN or None: none."""

    @property
    def tiered(self) -> BoolArray:
        return np.asarray(~np.isnan(self.wake_s))

    @property
    def wake_steps(self) -> IntArray:
        """Seconds from a wake's request to ready on the engine's whole-second clock (0 without a tier)."""
        return np.asarray(np.ceil(np.nan_to_num(self.wake_s, nan=0.0) - 1e-9).astype(np.int64))


@dataclass(frozen=True)
class Preemption:
    """Best-effort GPUs taken back by serving."""

    t_s: float
    batch: int
    """The preempted batch service's index."""
    zone: int
    gpus: int
    cause: str
    """``placement`` (a cold replica found no free GPU) or ``reclaim`` (a sleeper woke on a lent GPU)."""
    service: int
    """The online service that took them."""


@dataclass(frozen=True)
class Wake:
    """One sleeper asked to wake."""

    t_s: float
    service: int
    zone: int
    delay_s: float
    """Request → ready (s); NaN when the wake failed (a cold start replaces it)."""
    reclaimed_gpus: int
    """GPUs taken back from best-effort borrowers for it (0: its GPU was not lent)."""


class TierState:
    """The sleepers and the GPUs lent from them (module docstring). The engine owns one."""

    def __init__(self, tiers: ClusterTiers | None, *, services: int, zones: int, batch: int, drain_s: int,
                 seed: int = 0) -> None:
        self.tiers = tiers
        self.drain_s = drain_s
        self.asleep = np.zeros((services, zones), dtype=np.int64)
        self.to_sleep = np.zeros((drain_s + 1, services, zones), dtype=np.int64)
        """Removed replicas draining before they sleep, by the second their drain ends."""
        self.lent = np.zeros((batch, zones), dtype=np.int64)
        """GPUs of sleepers each batch service borrows, per zone."""
        self._starts: list[deque[tuple[float, int]]] = [deque() for _ in range(services)]
        """Per service, its sleepers' (start s, zone), oldest first."""
        self._expires = np.full(services, np.inf)
        """Per service, when its oldest sleeper's TTL ends (inf: none asleep): the TTL sweep is one
        vectorised comparison a second, not a loop over the services."""
        self.on = tiers is not None and bool(tiers.tiered.any())
        """Some service has a tier (else every method is a no-op and the engine skips the tier)."""
        self._faults = np.random.default_rng([seed, _FAULT_TAG]) \
            if tiers is not None and bool(np.any(tiers.fail > 0)) else None

    # -- GPUs --------------------------------------------------------------------------------------
    def held(self) -> IntArray:
        """Replicas per (service, zone) holding a GPU without serving: asleep, or draining to sleep."""
        return np.asarray(self.asleep + self.to_sleep.sum(axis=0))

    def lendable(self, gpus: IntArray) -> IntArray:
        """GPUs per zone asleep and not lent."""
        return np.asarray((self.asleep * gpus[:, None]).sum(axis=0) - self.lent.sum(axis=0))

    # -- the tier's lifecycle ----------------------------------------------------------------------
    def drain_to_sleep(self, t: int, i: int, zone: int) -> None:
        """Service ``i``'s replica in ``zone`` was removed at ``t``: it drains, then sleeps (or goes)."""
        self.to_sleep[(t + self.drain_s) % (self.drain_s + 1), i, zone] += 1

    def settle(self, t: int, gpus: IntArray, batch: IntArray) -> None:
        """Second ``t``'s start: drains that end now sleep (room under ``max``) or go; sleepers past
        their TTL go. A released sleeper's lent GPU becomes its borrower's own (``batch``, in place)."""
        if self.tiers is None:
            return
        slot = t % (self.drain_s + 1)
        ending = self.to_sleep[slot].copy()
        self.to_sleep[slot] = 0
        for i, z in zip(*np.nonzero(ending)):
            room = int(self.tiers.max_replicas[i]) - int(self.asleep[i].sum())
            n = min(int(ending[i, z]), max(room, 0))
            self.asleep[i, z] += n
            self._starts[i].extend([(float(t), int(z))] * n)
            self._expiry(int(i))
        for i in np.flatnonzero(self._expires <= t):
            q = self._starts[i]
            while q and q[0][0] + float(self.tiers.ttl_s[i]) <= t:
                self.asleep[i, q.popleft()[1]] -= 1
            self._expiry(int(i))
        self._hand_over(gpus, batch)

    def _expiry(self, i: int) -> None:
        """Service ``i``'s next TTL end, after its sleepers changed."""
        assert self.tiers is not None
        q = self._starts[i]
        self._expires[i] = q[0][0] + float(self.tiers.ttl_s[i]) if q else np.inf

    def keep(self, keep: IntArray, gpus: IntArray, batch: IntArray) -> None:
        """Release each service's oldest sleepers past ``keep`` (−1: keep all); lent GPUs as in :meth:`settle`."""
        over = np.flatnonzero((keep >= 0) & (self.asleep.sum(axis=1) > keep))
        for i in over:
            q = self._starts[i]
            for _ in range(int(self.asleep[i].sum() - keep[i])):
                self.asleep[i, q.popleft()[1]] -= 1
            self._expiry(int(i))
        if len(over):
            self._hand_over(gpus, batch)

    def _hand_over(self, gpus: IntArray, batch: IntArray) -> None:
        """Lent GPUs whose sleeper is gone are the borrower's own now (highest-indexed first: any
        order gives the same totals)."""
        excess = -self.lendable(gpus)
        for z in np.flatnonzero(excess > 0):
            for k in range(self.lent.shape[0] - 1, -1, -1):
                move = int(min(self.lent[k, z], excess[z]))
                self.lent[k, z] -= move
                batch[k, z] += move
                excess[z] -= move

    def wake(self, t: int, i: int, n: int, gpus: IntArray, batch_priority: IntArray,
             checkpoint_s: int) -> tuple[list[tuple[int, int]], list[Wake], list[Preemption]]:
        """Wake up to ``n`` of service ``i``'s sleepers, newest first. Returns (zone, seconds to ready)
        per woken replica, the wake records (failed ones included: they are not in the first list),
        and the preemptions that took lent GPUs back."""
        assert self.tiers is not None
        q = self._starts[i]
        woken: list[tuple[int, int]] = []
        wakes: list[Wake] = []
        taken: list[Preemption] = []
        steps = int(self.tiers.wake_steps[i])
        for _ in range(min(n, len(q))):
            z = q.pop()[1]
            self.asleep[i, z] -= 1
            got = self._reclaim(t, i, z, gpus, batch_priority)
            taken.extend(got)
            reclaimed = sum(p.gpus for p in got)
            if self._faults is not None and self._faults.random() < float(self.tiers.fail[i]):
                wakes.append(Wake(float(t), i, z, math.nan, reclaimed))
                continue
            delay = steps + (checkpoint_s if reclaimed else 0)
            woken.append((z, delay))
            wakes.append(Wake(float(t), i, z, float(delay), reclaimed))
        self._expiry(i)
        return woken, wakes, taken

    def _reclaim(self, t: int, i: int, z: int, gpus: IntArray, batch_priority: IntArray) -> list[Preemption]:
        """Take back what zone ``z`` lends beyond its sleepers now, lowest-priority borrower first."""
        excess = int(-self.lendable(gpus)[z])
        out: list[Preemption] = []
        for k in np.argsort(batch_priority, kind="stable"):
            if excess <= 0:
                break
            take = int(min(self.lent[k, z], excess))
            if take > 0:
                self.lent[k, z] -= take
                excess -= take
                out.append(Preemption(float(t), int(k), z, take, "reclaim", i))
        return out

    # -- lending -----------------------------------------------------------------------------------
    def lend(self, k: int, want: int, gpus: IntArray) -> int:
        """Lend batch service ``k`` up to ``want`` sleeper GPUs, from the zones with the most lendable;
        returns how many."""
        if want <= 0:
            return 0
        room = self.lendable(gpus)
        got = 0
        while got < want:
            z = int(np.argmax(room))
            put = int(min(want - got, room[z]))
            if put <= 0:
                break
            self.lent[k, z] += put
            room[z] -= put
            got += put
        return got

    def give_back(self, k: int, n: int) -> int:
        """Batch service ``k`` no longer needs ``n`` GPUs: return lent ones first; returns how many."""
        back = 0
        while back < n and self.lent[k].sum() > 0:
            z = int(np.argmax(self.lent[k]))
            put = int(min(n - back, self.lent[k, z]))
            self.lent[k, z] -= put
            back += put
        return back
