"""Fluid (bin-level) simulation: demand per bin through a queueing model of the same replicas.

For months of per-second counts, simulating every request is wasteful; this engine advances one
bin (default 1 s) at a time with the same fleet rules (cold start, drain, billing, policy ticks,
metric pipelines) and the same calibrated :class:`~ebb.model.latency.LatencyModel`:

* **Admission.** Requests in the router queue and new arrivals take free slots
  (``max_batch × ready − active``), FIFO.
* **Prefill.** Admitted prefill work (seconds) joins a fleet prefill backlog served at
  ``ready`` seconds per second; a request's TTFT = router wait + backlog / ready + its own prefill.
* **Decode.** With ``b = active / ready`` sequences per replica and ``u`` the prefill share of
  the bin, a sequence whose prefill is done finishes at rate ``μ = (1 − u) / (step(b) ×
  mean_out)``; that decoding pool drains as ``decoding × (1 − e^(−μ·dt))`` per bin, capped at ``ready × max_batch × μ × dt`` (the batch
  cap). Per-token time ``τ = step(b) / (1 − u)``.
* **Violations.** For arrivals of a bin, P(ok) = P(prefill(in) ≤ TTFT_slo − wait) ×
  P(out ≤ (E2E_slo − TTFT) / τ) over the trace's empirical token distributions (independence of
  prompt and output lengths assumed); violations = arrivals × (1 − P(ok)).
* **Signals.** Time-average occupancy ``L̄`` over the bin; with least-loaded routing a replica is
  busy whenever occupancy reaches it, so GPU busy fraction = ``min(1, L̄ / ready)``; in-flight
  per replica = ``L̄ / ready``; completions per replica; policies read them through their pipeline.

Replica phases move only along :data:`ebb.sim.lifecycle.TRANSITIONS` (shared with the request
engine). Agreement with the request engine is tested on the Azure traces (GPU-hours within 5 %,
violation rates within the tolerance documented in ``docs/simulator.md``).
Cost: O(1) Python work per bin; ~5 M bins (58 days at 1 s) in well under 2 minutes for the engine
(static: 4–5 µs per bin). A policy that reconciles every bin costs more than that; one that can
prove holds (:class:`~ebb.decide.base.HoldsInBlocks`, Ebb's) gets blocks of bins (:data:`_BLOCK_BINS`) at a
time while the fleet is steady, and ``decide`` only where it could act (``docs/simulator.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.decide.base import HoldsInBlocks, Policy, holds_in_blocks, react_of
from ebb.model.decision import Decision
from ebb.model.ids import ReplicaId
from ebb.model.observation import Observation, PodView, ServingCounters
from ebb.sim.fine import FineBuffer
from ebb.sim.fleet import FleetLog, choose_victims, zone_of
from ebb.sim.fluid_pool import Pool, PoolState
from ebb.sim.lifecycle import DRAINING, READY, STARTING, STOPPED, Lifecycles
from ebb.sim.settings import SimSettings
from ebb.sim.sleepers import Sleeps, sleep_tier

FloatArray = npt.NDArray[np.float64]
_BLOCK_BINS = (64, 256)
"""Bins served ahead for a policy to prove holds over (:class:`~ebb.decide.base.HoldsInBlocks`): the
first block after a reconcile gets the fewest, each block held to its end doubles the next up to the
most. The bins after a block's last proven hold are served again (the pool goes back to that bin's
journaled state), so long blocks pay only where the fleet stays steady. Counted on two days of
ServeGen counts (``bench/fluid_long.py``'s workload at load ×0.7504): 64–256 serves 1.26 bins per
simulated second in 2,344 blocks; 128–512 1.44 in 1,989; 64–1,024 1.48 in 2,163; 32–256 1.21 in 2,691
(wall times within this machine's noise)."""


@dataclass(frozen=True)
class FluidDemand:
    """Demand per bin plus the token-size distributions used for per-request latency."""

    name: str
    bin_s: float
    counts: FloatArray
    """Arrivals per bin (requests)."""
    tokens_in_sample: FloatArray
    """A sample of prompt lengths (sorted), the empirical distribution of ``tokens_in``."""
    tokens_out_sample: FloatArray
    """A sample of output lengths (sorted)."""

    @property
    def requests(self) -> int:
        return int(round(float(self.counts.sum())))

    @property
    def duration_s(self) -> float:
        return float(len(self.counts) * self.bin_s)


@dataclass(frozen=True)
class FluidOutcome:
    """Per-bin results: arrivals, violations, router wait (s), per-token time (s), served."""

    violations: FloatArray
    ttft_base_s: FloatArray
    """TTFT excluding the request's own prefill (router wait + prefill backlog), per bin."""
    tau_s: FloatArray
    """Per-token decode time of requests admitted in the bin."""
    dropped: float


def simulate_fluid(demand: FluidDemand, policy: Policy, settings: SimSettings) -> tuple[FluidOutcome, FleetLog]:
    """Advance bin by bin; see the module docstring for the model."""
    run = FluidRun(demand, policy, settings)
    run.start_fleet()
    run.run_bins()
    return run.finish_run()


class FluidRun:
    """One run's state and its steps: the fleet (:attr:`fleet`), the fluid pool (active, decoding,
    queue, prefill backlog), the per-second signals the pipelines read, and the per-bin outputs."""

    __slots__ = ("sleeper", "policy", "settings", "dt", "cold", "mb", "slo_ttft", "slo_e2e", "pf_list", "out_list",
                 "ns",
                 "mean_pf", "mean_out", "d_base", "d_per", "u_cap", "counts", "nb", "viol", "ttft_base", "tau_arr",
                 "n_sec", "cum_busy", "cum_done", "inflight_g", "cum_arr", "total_inflight", "queued_g",
                 "fleet", "starting", "draining", "spec", "waiting_g", "serving_on", "cum_serving",
                 "kv_per_seq", "mean_in",
                 "scale_ups", "scale_downs", "decisions", "noteworthy", "fine_on", "fine_buf", "q_out", "pf_q",
                 "pool", "t", "pod_names", "idle_pods")

    def __init__(self, demand: FluidDemand, policy: Policy, settings: SimSettings) -> None:
        lat = settings.cluster.latency
        self.policy, self.settings = policy, settings
        self.dt = demand.bin_s
        self.cold = settings.cluster.cold_start_s
        self.mb = float(lat.max_batch)
        self.slo_ttft = settings.slo.ttft_ms / 1000.0
        self.slo_e2e = settings.slo.e2e_ms / 1000.0
        tin = np.sort(demand.tokens_in_sample)
        tout = np.sort(demand.tokens_out_sample)
        pf_s = lat.prefill_ms(tin) / 1000.0  # sorted too (monotone in tokens)
        self.pf_list: list[float] = pf_s.tolist()
        self.out_list: list[float] = tout.tolist()
        ns = self.ns = len(self.out_list)
        self.mean_pf = float(pf_s.mean()) if ns else 0.0
        self.mean_out = max(1.0, float(tout.mean())) if ns else 1.0
        self.mean_in = float(tin.mean()) if ns else 0.0
        # A running sequence's mean KV footprint (prompt + half its output) as a share of capacity.
        self.kv_per_seq = (self.mean_in + 0.5 * self.mean_out) / float(lat.kv_capacity_tokens)
        self.serving_on = policy.pipeline.serving
        self.d_base, self.d_per = lat.decode_base_ms / 1000.0, lat.decode_ms_per_seq / 1000.0
        self.u_cap = lat.max_prefill_share
        # Typical and tail request (p50, p99) for the fine completions' two weighted samples.
        self.q_out = np.quantile(tout, [0.5, 0.99]) if ns else np.ones(2)
        self.pf_q = lat.prefill_ms(np.quantile(tin, [0.5, 0.99]) if ns else np.zeros(2)) / 1000.0
        self.counts: list[float] = demand.counts.tolist()
        nb = self.nb = len(self.counts)
        self.viol, self.ttft_base, self.tau_arr = np.zeros(nb), np.zeros(nb), np.zeros(nb)
        self._init_signals(int(math.ceil(nb * self.dt + settings.drain_horizon_s)) + 2)
        tier = sleep_tier(policy, settings.cluster.sleep)
        self.fleet = Lifecycles(tier, settings.seed)
        self.sleeper: Sleeps | None = policy if tier is not None and isinstance(policy, Sleeps) else None
        self.starting: list[tuple[float, int]] = []  # (ready at, rid), in request order
        self.draining: list[tuple[float, int]] = []  # (stops at, rid)
        self.spec = self.scale_ups = self.scale_downs = 0
        self.decisions: list[tuple[float, int, int]] = []
        self.noteworthy: list[Decision] = []
        self.fine_on = policy.pipeline.fine_ms is not None
        self.fine_buf = FineBuffer()
        self.pool = Pool(self)
        self.t = 0.0
        # Per replica id: its ReplicaId and zone (fixed for life), and the views of a replica that
        # reads no fleet values (cold-starting, or not yet requested at the sample), which never
        # change for one (id, ready, requested-by-sample) — built once, not every reconcile.
        self.pod_names: list[tuple[ReplicaId, str]] = []
        self.idle_pods: dict[tuple[int, bool, bool], PodView] = {}

    def _init_signals(self, n_sec: int) -> None:
        """Per-second cumulative signals for the pipelines (index = whole second)."""
        self.n_sec = n_sec
        self.cum_busy = np.zeros(n_sec)  # per ready replica
        self.cum_done = np.zeros(n_sec)  # per ready replica
        self.inflight_g = np.zeros(n_sec)  # per ready replica gauge
        self.cum_arr = np.zeros(n_sec)
        self.total_inflight = np.zeros(n_sec)
        self.queued_g = np.zeros(n_sec)
        self.waiting_g = np.zeros(n_sec)  # router queue per ready replica
        # Cumulative completions and their TTFT, inter-token, end-to-end and queue-time sums (s):
        # only when the policy reads ServingCounters (5 × 8 bytes per second otherwise saved).
        self.cum_serving = np.zeros((5, n_sec)) if self.serving_on else np.zeros((5, 0))

    # -- fleet -----------------------------------------------------------------------------------

    def start_fleet(self) -> None:
        """t = 0: the policy's first answer starts warm (the fleet was already serving)."""
        init = self.settings.cluster.initial_replicas
        if init is None:
            init = max(1, self.policy.decide(Observation(0.0, 0, 0, (), None, None, None)).to_replicas)
        for _ in range(init):
            self.fleet.add(0.0, warm=True)
        self.spec = init

    def _lifecycle_step(self, t: float) -> None:
        """Cold starts due by ``t`` become ready (at their own instant); drains due by ``t`` stop."""
        fleet = self.fleet
        phase = fleet.phase
        if self.starting:
            still = []
            for ra, rid in self.starting:
                if phase[rid] != STARTING:
                    continue  # cancelled by a scale-down
                if ra <= t:
                    fleet.move(rid, READY, ra)
                else:
                    still.append((ra, rid))
            self.starting[:] = still
        if self.draining:
            rest = []
            for te, rid in self.draining:
                if te <= t:
                    if phase[rid] == DRAINING:
                        fleet.move(rid, STOPPED, te)
                else:
                    rest.append((te, rid))
            self.draining[:] = rest

    # -- the bin loop ----------------------------------------------------------------------------

    def run_bins(self) -> None:
        """Bin by bin: move the fleet, tick the policy, serve bins until one of those is due again;
        until every bin is served and the pool is empty, or the drain horizon passed."""
        policy, dt, nb, starting, draining = self.policy, self.dt, self.nb, self.starting, self.draining
        stop_after = nb * dt + self.settings.drain_horizon_s
        serve, empty = self.pool.serve, self.pool.empty
        interval = float(policy.interval_s)
        next_tick = interval
        fast = react_of(policy) if self.fine_on else None
        # The fast path runs at each bin start that is no policy tick (bins are its finest samples).
        react_dt = max(dt, fast.react_interval_s or dt) if fast is not None else math.inf
        next_react = react_dt
        # Blocks of proven holds: a policy that can prove them, one reconcile per whole-second bin
        # (so the fast path never runs between reconciles and every time is an exact integer).
        holder = holds_in_blocks(policy) if self.fine_on and interval == dt and dt == int(dt) else None
        try_block = True  # off after a block that stopped early, until the next reconcile
        block_bins = _BLOCK_BINS[0]
        k = 0
        t = 0.0
        while True:
            t = k * dt
            if starting or draining:
                self._lifecycle_step(t)
            if fast is not None and next_react <= t + 1e-9:
                while next_react <= t + 1e-9:
                    next_react += react_dt
                if next_tick > t + 1e-9:
                    d = fast.react(Observation(t, self.spec, len(self.fleet.ready), (), None, None, None,
                                               self.fine_buf.take(), asleep_replicas=self.fleet.sleep.asleep(t)))
                    if d is not None:
                        self._apply(d, t)
            while next_tick <= t:
                self._apply(policy.decide(self._observe(next_tick)), next_tick)
                next_tick += interval
                try_block, block_bins = True, _BLOCK_BINS[0]
            if k >= nb and empty():
                break
            if t > stop_after:
                break
            if holder is not None and try_block and next_tick == t + dt and k + block_bins <= nb:
                # The block's last reconcile comes before the fleet changes (a cold start done or a
                # drain over, at the bin start where the loop moves it): that one sees the new fleet.
                k_end = k + min(block_bins, holder.hold_limit())
                if starting or draining:
                    t_change = min([ra for ra, _ in starting] + [te for te, _ in draining])
                    k_end = min(k_end, int(math.ceil(t_change / dt - 1e-9)) - 1)
                k_held = self._serve_held(holder, k, k_end, next_tick, stop_after) if k_end > k + 1 else k
                try_block = k_held == k_end and k_held > k
                block_bins = min(2 * block_bins, _BLOCK_BINS[1])
                next_tick += (k_held - k) * interval  # whole seconds: exact
                k = k_held
                while next_react <= k * dt + 1e-9:  # as the held ticks' loop passes would have
                    next_react += react_dt
                continue
            # The next bin start at which the fleet or the policy acts (cancelled cold starts included:
            # an early stop there only costs one more pass through this loop).
            t_event = min(next_tick, next_react - 1e-9)  # accumulated 0.1 s steps drift past k × dt
            if starting:
                t_event = min(t_event, min(starting)[0])
            if draining:
                t_event = min(t_event, min(draining)[0])
            k = serve(k, t_event, stop_after, None)
        self.t = t

    def _serve_held(self, holder: HoldsInBlocks, k: int, k_end: int, next_tick: float, stop_after: float) -> int:
        """Serve bins ``k`` to ``k_end`` with the fleet as it is (no lifecycle event before ``k_end``),
        journaling the pool after each bin, hand the policy their reconciles at once, keep the bins
        up to the last proven hold (the pool back to that bin's journaled state when it stops early;
        the bins after it are served again, their outputs overwritten, and the policy already has
        the kept bins' samples), and return the next bin."""
        pool, dt = self.pool, self.dt
        before = pool.snapshot()
        journal: list[PoolState] = []
        end = pool.serve(k, k_end * dt, stop_after, journal)
        ticks = next_tick + dt * np.arange(end - k, dtype=np.float64)  # whole seconds: exact
        held = holder.hold_through(ticks, self.fine_buf.take(), self.spec, len(self.fleet.ready))
        if 0 < held < end - k:
            pool.restore(journal[held - 1])  # the pool after the last proven hold's bin
        elif held == 0:
            pool.restore(before)
        return k + held

    # -- the policy ------------------------------------------------------------------------------

    def _observe(self, t: float) -> Observation:
        """What the policy sees at ``t``: the newest pipeline sample's window. Every ready replica
        reads the fleet's per-replica values (replicas are interchangeable in the fluid model)."""
        pipe = self.policy.pipeline
        sec_now = min(int(t), self.n_sec - 1)
        s = (sec_now - pipe.offset_s) // pipe.period_s * pipe.period_s + pipe.offset_s
        lo = max(s - pipe.window_s, 0)
        pods = self._pods(s, lo) if pipe.per_pod else ()
        cum_arr = self.cum_arr
        tq = float((cum_arr[s] - cum_arr[lo]) / (s - lo)) if s > lo else None
        ti = float(self.total_inflight[s]) if s >= 0 else None
        qq = float(self.queued_g[s]) if s >= 0 else None
        fine = self.fine_buf.take() if self.fine_on else None
        return Observation(t, self.spec, len(self.fleet.ready), pods, tq, ti, qq, fine,
                           serving=self._serving(s) if self.serving_on and s >= 0 else None,
                           asleep_replicas=self.fleet.sleep.asleep(t))

    def _serving(self, s: int) -> ServingCounters:
        """The fleet's cumulative serving counters at second ``s``. Fluid approximation: a bin's
        completions carry that bin's wait and per-token time and the trace's mean token counts; no
        queue-time histogram (the per-bucket counts would cost 21 values per second)."""
        done, ttft, itl, e2e, queue = (float(v) for v in self.cum_serving[:, s])
        return ServingCounters(done, done * self.mean_in, done * self.mean_out, ttft, itl,
                               done * (self.mean_out - 1.0), e2e, queue)

    def _pods(self, s: int, lo: int) -> tuple[PodView, ...]:
        """Live replicas but the draining ones, oldest first, read over the window ``[lo, s]``: ready
        ones since before ``s`` see the fleet's values, others requested by ``s`` zeros, later ones none.
        Views that read no fleet values are shared between reconciles (they are frozen and equal)."""
        util = qps = infl = kv = wait = None
        if s > lo:
            util = float((self.cum_busy[s] - self.cum_busy[lo]) / (s - lo))
            qps = float((self.cum_done[s] - self.cum_done[lo]) / (s - lo))
        if s >= 0:
            infl = float(self.inflight_g[s])
            kv = min(1.0, infl * self.kv_per_seq)
            wait = float(self.waiting_g[s])
        shared = {"util_ratio": util, "inflight": infl, "qps": qps, "running": infl, "waiting": wait,
                  "kv_usage_ratio": kv}
        sharing = PodView.sharing
        fleet, names, idle = self.fleet, self.pod_names, self.idle_pods
        phase, requested, ready = fleet.phase, fleet.requested_s, fleet.ready_s
        while len(names) < len(phase):
            names.append((ReplicaId(len(names)), zone_of(len(names))))
        pods: list[PodView] = []
        append = pods.append
        for rid in fleet.live:
            st = phase[rid]
            if st == DRAINING:
                continue
            if st == READY and ready[rid] <= s:
                name, zone = names[rid]
                append(sharing(shared, name, requested[rid], ready[rid], zone))
                continue
            key = (rid, st == READY, requested[rid] <= s)
            view = idle.get(key)
            if view is None:
                name, zone = names[rid]
                ready_s = ready[rid] if st == READY else None
                if key[2]:
                    view = PodView(name, requested[rid], ready_s, 0.0, 0.0, 0.0, zone, running=0.0, waiting=0.0,
                                   kv_usage_ratio=0.0)
                else:
                    view = PodView(name, requested[rid], ready_s, None, None, None, zone)
                idle[key] = view
            append(view)
        if len(idle) > 3 * len(fleet.live) + 64:  # ids are never reused: forget stopped replicas' views
            live = set(fleet.live)
            self.idle_pods = {k: v for k, v in idle.items() if k[0] in live}
        return tuple(pods)

    def _apply(self, decision: Decision, t: float) -> None:
        """Record ``decision`` and move the fleet to its target: add cold-starting replicas, or cancel
        and drain victims in the ReplicaSet's order. Replicas are interchangeable in the fluid model:
        named victims change nothing."""
        if decision.noteworthy:
            self.noteworthy.append(decision)
        desired, spec = decision.to_replicas, self.spec
        if desired == spec:
            return
        self.decisions.append((t, spec, desired))
        if desired > spec:
            self.scale_ups += 1
            for _ in range(desired - spec):
                rid, delay = self.fleet.request(t, self.cold)  # a sleeper wakes first (asleep tier)
                self.starting.append((t + delay, rid))
        else:
            self.scale_downs += 1
            fleet = self.fleet
            cancel, drain = choose_victims(fleet.starting(), fleet.ready, spec - desired)
            for rid in cancel:
                fleet.move(rid, STOPPED, t)
            self._drain(drain, t)
        self.spec = desired
        if self.sleeper is not None:  # sleepers past what the policy counts on are released
            self.fleet.keep_asleep(t, self.sleeper.asleep_wanted(desired))

    def _drain(self, victims: list[int], t: float) -> None:
        """Ready ``victims`` drain: each takes its share of the pool and stops after the expected drain."""
        fleet, pool = self.fleet, self.pool
        drain_s = pool.drain_s()
        for rid in victims:
            pool.shed()
            fleet.move(rid, DRAINING, t)
            # It stops after drain_s (above); billing runs until then.
            self.draining.append((t + drain_s, rid))

    def finish_run(self) -> tuple[FluidOutcome, FleetLog]:
        """Stop every replica at the end (the last bin or the last served instant, whichever is later)."""
        t_end = max(self.nb * self.dt, self.t)
        self.fleet.stop_all(t_end)
        fleet_log = self.fleet.fleet_log(scale_ups=self.scale_ups, scale_downs=self.scale_downs, end_s=t_end,
                                         decisions=self.decisions, noteworthy=self.noteworthy)
        return FluidOutcome(self.viol, self.ttft_base, self.tau_arr, self.pool.unserved()), fleet_log
