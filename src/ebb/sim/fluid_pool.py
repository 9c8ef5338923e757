"""The fluid engine's pool of requests: admission, prefill, decode, signals and scores, bin by bin.

:class:`Pool` is one run's pool: its state (the admitted, decoding and queued requests, the prefill
backlog, the per-token time and the running sums the pipelines read) and its operations. It reads
the run through :class:`PoolRun` (the engine's :class:`~ebb.sim.fluid_engine.FluidRun` is one). The
model is :mod:`ebb.sim.fluid_engine`'s docstring; cost: O(1) Python work per bin (``serve`` copies
the state and the run's constants to locals for its run of bins and back: a policy ticking every bin
makes runs of one bin, and both copies cost ~1 µs).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ebb.sim.fine import FineBuffer
from ebb.sim.lifecycle import Lifecycles

__all__ = ["Pool", "PoolRun", "PoolState"]

FloatArray = npt.NDArray[np.float64]

PoolState = tuple[float, ...]
"""The pool's scalars and serving sums at one instant (:meth:`Pool.snapshot`)."""


class PoolRun(Protocol):
    """What the pool reads and writes of its run: the demand, the latency model's constants, the fleet's
    ready replicas, and the per-second signals and per-bin outputs it fills."""

    counts: list[float]
    """Arrivals per bin."""
    nb: int
    dt: float
    mb: float
    u_cap: float
    d_base: float
    d_per: float
    mean_pf: float
    mean_out: float
    slo_ttft: float
    slo_e2e: float
    pf_list: list[float]
    out_list: list[float]
    ns: int
    pf_q: FloatArray
    q_out: FloatArray
    fleet: Lifecycles
    fine_on: bool
    fine_buf: FineBuffer
    serving_on: bool
    n_sec: int
    cum_busy: FloatArray
    cum_done: FloatArray
    cum_arr: FloatArray
    inflight_g: FloatArray
    total_inflight: FloatArray
    queued_g: FloatArray
    waiting_g: FloatArray
    cum_serving: FloatArray
    viol: FloatArray
    ttft_base: FloatArray
    tau_arr: FloatArray


class Pool:
    """The pool of a run: admitted requests (prefilling + decoding), the router queue and the prefill
    backlog, served by the fleet's ready replicas."""

    __slots__ = ("_run", "_consts", "active", "decoding", "l_avg", "queue", "backlog", "tau", "service_s",
                 "acc_busy", "acc_done", "acc_arr", "sec", "sv")

    def __init__(self, run: PoolRun) -> None:
        self._run = run
        # What serve reads of the run, bound once (the run never rebinds them; the arrays and the
        # ready list change in place): one tuple unpacked per call, not ~25 attribute reads.
        self._consts = (run.counts, run.nb, run.dt, run.mb, run.u_cap, run.d_base, run.d_per, run.mean_pf,
                        run.mean_out, run.slo_e2e, run.fleet.ready, run.fine_on, _fine_sampler(run), _bin_scorer(run),
                        run.cum_busy, run.cum_done, run.cum_arr, run.n_sec, run.inflight_g, run.total_inflight,
                        run.queued_g, run.waiting_g, run.serving_on, run.cum_serving)
        self.active = 0.0
        """Admitted, not finished (prefilling + decoding)."""
        self.decoding = 0.0
        """Admitted and past their prefill."""
        self.l_avg = 0.0
        """Time-average occupancy of the last bin."""
        self.queue = 0.0
        """The router queue."""
        self.backlog = 0.0
        """Prefill seconds not yet done, fleet-wide."""
        self.tau = run.d_base + run.d_per
        """Per-token decode time (s)."""
        self.service_s = run.mean_pf + run.mean_out * self.tau
        """Mean request service time (s)."""
        self.acc_busy = self.acc_done = self.acc_arr = 0.0
        """Cumulative busy seconds, completions (per ready replica) and arrivals."""
        self.sec = 1
        """First second boundary not yet recorded (second 0 holds zeros: nothing happened yet)."""
        self.sv = [0.0] * 5
        """Cumulative completions, TTFT, inter-token, end-to-end and queue-time sums (s)."""

    def serve(self, k: int, t_event: float, stop_after: float, journal: list[PoolState] | None) -> int:
        """Serve bins k, k+1, ... with the fleet's ready replicas (admission, prefill, decode, signals,
        fine samples, violations: the model in :mod:`ebb.sim.fluid_engine`), recording each second
        boundary passed; stop at the first bin ``k'`` starting at or after ``t_event``, past
        ``stop_after``, or after the last bin with the pool empty — where the caller acts, then resumes;
        return ``k'``. With a ``journal``, the state after each bin is appended to it (a snapshot)."""
        (counts, nb, dt, mb, u_cap, d_base, d_per, mean_pf, mean_out, slo_e2e, ready, fine_on, fine_sample, score,
         cum_busy, cum_done, cum_arr, n_sec, inflight_g, total_inflight, queued_g, waiting_g, serving_on,
         cum_serving) = self._consts
        gaps = mean_out - 1.0
        p_sv = self.sv
        exp = math.exp
        queue, active, backlog, decoding, l_avg, tau = self.queue, self.active, self.backlog, self.decoding, \
            self.l_avg, self.tau
        acc_arr, acc_done, acc_busy, service_s, sec = self.acc_arr, self.acc_done, self.acc_busy, self.service_s, \
            self.sec
        ready_n, t = len(ready), k * dt
        while True:
            a = counts[k] if k < nb else 0.0
            acc_arr += a
            # Admission (FIFO: the router queue first).
            want = queue + a
            slots = mb * ready_n - active
            adm = want if want < slots else (slots if slots > 0 else 0.0)
            queue = want - adm
            active += adm
            backlog += adm * mean_pf
            cap = ready_n * dt
            done_pf = backlog if backlog < cap else cap
            backlog -= done_pf
            # Requests whose prefill completed start decoding; only they can finish.
            decoding += done_pf / mean_pf if mean_pf > 0 else adm
            if decoding > active:
                decoding = active
            u = done_pf / cap if cap > 0 else 0.0
            if u > u_cap:
                u = u_cap
            fin = 0.0
            if ready_n:
                b = active / ready_n
                bb = 1.0 if b < 1.0 else (mb if b > mb else b)
                step = d_base + d_per * bb
                tau = step / (1.0 - u)
                # Each sequence finishes at rate mu (1/s); below the batch cap the pool drains
                # exponentially (exact for a constant rate over the bin), at the cap it is
                # throughput-bound: ready × max_batch × mu completions per second.
                mu = (1.0 - u) / (step * mean_out)
                x = mu * dt
                drained = 1.0 - exp(-x)
                fin = decoding * drained
                cap_fin = ready_n * mb * mu * dt
                if fin > cap_fin:
                    fin = cap_fin
                # Time-average occupancy over the bin (prefilling + exponentially decaying decode):
                # with least-loaded routing a replica is busy whenever occupancy reaches it, so the
                # busy fraction is min(1, occupancy / ready), and the in-flight gauge reads it too.
                l_avg = (active - decoding) + (decoding * drained / x if x > 1e-9 else decoding)
                active -= fin
                decoding -= fin
                acc_done += fin / ready_n
                occ = l_avg / ready_n
                acc_busy += (occ if occ < 1.0 else 1.0) * dt
                wait_q = queue / (fin / dt) if fin > 1e-12 else (slo_e2e * 10 if queue > 0 else 0.0)
                wait_p = backlog / ready_n
            else:
                wait_q = slo_e2e * 10 if (queue + active) > 0 else 0.0
                wait_p = 0.0
            if fine_on:
                fine_sample(t + dt, done_pf, l_avg / mb if ready_n else 0.0, queue, fin, wait_q + wait_p, tau)
            if serving_on and fin > 0:
                ttft_s = wait_q + wait_p + mean_pf
                p_sv[0] += fin
                p_sv[1] += fin * ttft_s
                p_sv[2] += fin * gaps * tau
                p_sv[3] += fin * (ttft_s + gaps * tau)
                p_sv[4] += fin * wait_q
            if k < nb:
                service_s = mean_pf + mean_out * tau
                score(k, a, wait_q + wait_p, tau)
            k += 1
            t = k * dt
            while sec <= t and sec < n_sec:  # the seconds up to the next bin's start
                cum_busy[sec], cum_done[sec], cum_arr[sec] = acc_busy, acc_done, acc_arr
                inflight_g[sec] = l_avg / ready_n if ready_n else 0.0
                total_inflight[sec], queued_g[sec] = active + queue, queue
                waiting_g[sec] = queue / ready_n if ready_n else 0.0
                if serving_on:
                    cum_serving[:, sec] = p_sv
                sec += 1
            if journal is not None:
                journal.append((active, decoding, l_avg, queue, backlog, tau, service_s, acc_busy, acc_done, acc_arr,
                                float(sec), *p_sv))
            if t >= t_event or t > stop_after or (k >= nb and active < 1e-6 and queue < 1e-6):
                break
        self.queue, self.active, self.backlog, self.decoding, self.l_avg, self.tau = \
            queue, active, backlog, decoding, l_avg, tau
        self.acc_arr, self.acc_done, self.acc_busy, self.service_s, self.sec = acc_arr, acc_done, acc_busy, service_s, sec
        return k

    def shed(self) -> None:
        """One ready replica starts draining: its 1/ready share of the pool finishes on it, off the books."""
        ready_n = len(self._run.fleet.ready)
        if ready_n > 0:
            self.active -= self.active / ready_n
            self.decoding -= self.decoding / ready_n
            self.backlog -= self.backlog / ready_n

    def drain_s(self) -> float:
        """Expected drain time (s) of a replica chosen now: 0 when idle (prob. e^-b), else the mean service
        time × the harmonic number of its ~b sequences (~ 1 + ln b)."""
        ready = self._run.fleet.ready
        b_now = self.l_avg / len(ready) if ready else 0.0
        return (1.0 - math.exp(-b_now)) * self.service_s * (1.0 + math.log(max(b_now, 1.0)))

    def empty(self) -> bool:
        """Whether the router queue and the admitted-unfinished requests are both below 1e-6 (the end test)."""
        return self.active < 1e-6 and self.queue < 1e-6

    def unserved(self) -> float:
        """Requests queued or in flight (dropped, at the end of the run)."""
        return self.queue + self.active

    def snapshot(self) -> PoolState:
        """The pool's state now (every scalar, the next second to record and the serving sums)."""
        return (self.active, self.decoding, self.l_avg, self.queue, self.backlog, self.tau, self.service_s,
                self.acc_busy, self.acc_done, self.acc_arr, float(self.sec), *self.sv)

    def restore(self, state: PoolState) -> None:
        """Back to a snapshot: serving the same bins again gives the same bins (the engine is deterministic)."""
        (self.active, self.decoding, self.l_avg, self.queue, self.backlog, self.tau, self.service_s, self.acc_busy,
         self.acc_done, self.acc_arr) = state[:10]
        self.sec = int(state[10])
        self.sv[:] = state[11:]


def _fine_sampler(run: PoolRun) -> Callable[[float, float, float, float, float, float, float], None]:
    """``sample(t, done_pf, slot, queue, fin, base, tau)``: the bin's fine sample at its end ``t``, and
    its ``fin`` completions as two weighted samples — the typical (p50, weight 0.99) and the tail
    (p99, weight 0.01) request at router + backlog wait ``base``."""
    buf, dt = run.fine_buf, run.dt
    pf_typ, pf_tail = (float(x) for x in run.pf_q)
    out_typ, out_tail = (float(x) for x in run.q_out)
    f_t, f_pf, f_slot, f_q = buf.t.append, buf.prefill.append, buf.slot.append, buf.queued.append
    d_t, d_ttft, d_e2e, d_w = buf.done_t.extend, buf.done_ttft_ms.extend, buf.done_e2e_ms.extend, buf.done_weight.extend
    d_wait = buf.done_wait_ms.extend

    def sample(t: float, done_pf: float, slot: float, queue: float, fin: float, base: float, tau: float) -> None:
        f_t(t)
        f_pf(done_pf / dt)
        f_slot(slot)
        f_q(queue)
        if fin > 0:  # the typical row, then the tail row
            typ, tail = base + pf_typ, base + pf_tail
            d_t((t, t))
            d_ttft((typ * 1000.0, tail * 1000.0))
            d_e2e(((typ + out_typ * tau) * 1000.0, (tail + out_tail * tau) * 1000.0))
            d_w((fin * 0.99, fin * 0.01))
            wait_ms = base * 1000.0
            d_wait((wait_ms, wait_ms))

    return sample


def _bin_scorer(run: PoolRun) -> Callable[[int, float, float, float], None]:
    """``score(k, a, base, tau)``: bin ``k``'s outputs for its ``a`` arrivals at wait ``base`` and
    per-token time ``tau`` — violations = a × (1 − P(ok)) over the empirical token distributions."""
    viol, ttft_base, tau_arr = run.viol, run.ttft_base, run.tau_arr
    pf_list, out_list, ns, mean_pf = run.pf_list, run.out_list, run.ns, run.mean_pf
    slo_ttft, slo_e2e = run.slo_ttft, run.slo_e2e
    bisect_right = bisect.bisect_right

    def score(k: int, a: float, base: float, tau: float) -> None:
        ttft_base[k] = base
        tau_arr[k] = tau
        if a > 0:
            p_ttft = bisect_right(pf_list, slo_ttft - base) / ns if ns else 1.0
            lim = (slo_e2e - base - mean_pf) / tau
            p_e2e = bisect_right(out_list, lim) / ns if ns else 1.0
            viol[k] = a * (1.0 - p_ttft * p_e2e)

    return score
