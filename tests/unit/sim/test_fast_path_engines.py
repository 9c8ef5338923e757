"""Both engines call a policy's fast path between reconciles, and report first tokens as an agent does."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ebb.model.decision import Decision
from ebb.model.ids import TraceName
from ebb.model.observation import Observation, Pipeline
from ebb.model.spans import NO_SPANS, Spans
from ebb.model.trace import RequestTrace
from ebb.sim.fluid_engine import FluidDemand, simulate_fluid
from ebb.sim.request_engine import simulate_requests
from ebb.sim.settings import ClusterSettings, SimSettings
from ebb.testing.policies import answer

SETTINGS = SimSettings(cluster=ClusterSettings(cold_start_s=5.0))


@dataclass
class Reacting:
    """Holds ``replicas`` at every reconcile; its fast path asks for ``to`` once, at ``at`` or after."""

    replicas: int
    at: float = 1e9
    to: int = 0
    spec: str = "reacting"
    interval_s: float = 1.0
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(1, 1, fine_ms=100))
    react_interval_s: float | None = 0.1
    reacted: list[Observation] = field(default_factory=list)
    decided: list[Observation] = field(default_factory=list)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        self.decided.append(obs)
        return answer(obs, max(self.replicas, obs.spec_replicas), self.spec)

    def react(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision | None:
        self.reacted.append(obs)
        if obs.t_s >= self.at and self.to > obs.spec_replicas:
            self.replicas = self.to
            return Decision(obs.t_s, "scale_up", obs.spec_replicas, self.to, policy=self.spec)
        return None

    def observe(self, obs: Observation) -> None:
        return None

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def trace(n: int = 400, span_s: float = 20.0) -> RequestTrace:
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0.0, span_s, n))
    return RequestTrace(TraceName("t"), t, rng.integers(500, 1500, n), rng.integers(5, 30, n))


def test_the_request_engine_asks_the_fast_path_at_every_fine_sample_between_reconciles() -> None:
    pol = Reacting(2)
    simulate_requests(trace(), pol, SETTINGS)
    times = np.array([o.t_s for o in pol.reacted])
    assert len(times) > 100
    inner = times[times < times.max()]  # the run may end on a sample after its last reconcile
    assert np.all(np.abs(inner - np.round(inner)) > 1e-6), "never at a reconcile: decide follows there"
    assert np.allclose(np.diff(times[:8]), 0.1)
    # Each fine sample reaches the policy once, through react or decide.
    samples = np.concatenate([o.fine.t_s for o in pol.reacted + pol.decided if o.fine is not None])
    assert len(samples) == len(np.unique(samples))


def test_a_fast_path_scale_up_is_applied_at_once() -> None:
    pol = Reacting(2, at=3.25, to=5)
    _, fleet = simulate_requests(trace(), pol, SETTINGS)
    (t, a, b), = [d for d in fleet.decisions if d[2] > d[1]]
    assert (a, b) == (2, 5) and abs(t - 3.3) < 1e-6


def test_first_tokens_reach_the_policy_at_the_next_fine_sample_with_their_wait() -> None:
    pol = Reacting(2)
    tr = trace()
    out, _ = simulate_requests(tr, pol, SETTINGS)
    rows = [(t, ttft, e2e, wait) for o in pol.reacted + pol.decided if o.fine is not None
            for t, ttft, e2e, wait in zip(o.fine.done_t_s, o.fine.done_ttft_ms, o.fine.done_e2e_ms,
                                          o.fine.done_wait_ms)]
    ttft_rows = [r for r in rows if not np.isnan(r[1])]
    e2e_rows = [r for r in rows if not np.isnan(r[2])]
    assert tr.requests - 1 <= len(ttft_rows) <= tr.requests  # one per request at its first token...
    assert tr.requests - 2 <= len(e2e_rows) <= tr.requests  # ...and one at its end (the last may end after the run's last sample)
    assert all(np.isnan(r[2]) and 0.0 <= r[3] <= r[1] for r in ttft_rows)
    first = np.sort((out.first_token_s - tr.arrival_s) * 1000.0)
    seen = np.array([r[1] for r in ttft_rows])
    k = np.clip(np.searchsorted(first, seen), 1, len(first) - 1)
    assert np.all(np.minimum(np.abs(first[k] - seen), np.abs(first[k - 1] - seen)) < 1e-6)  # the true TTFTs


def test_the_fluid_engine_asks_the_fast_path_at_sub_second_bin_starts() -> None:
    counts = np.full(200, 3.0)  # 20 s in 100 ms bins
    demand = FluidDemand("f", 0.1, counts, np.full(64, 800.0), np.full(64, 20.0))
    pol = Reacting(2, at=2.45, to=4)
    _, fleet = simulate_fluid(demand, pol, SETTINGS)
    times = np.array([o.t_s for o in pol.reacted])
    assert len(times) > 100 and np.all(np.abs(times - np.round(times)) > 1e-6)
    (t, a, b), = [d for d in fleet.decisions if d[2] > d[1]]
    assert (a, b) == (2, 4) and abs(t - 2.5) < 1e-6


def test_one_second_fluid_bins_leave_everything_to_the_reconcile() -> None:
    demand = FluidDemand("f", 1.0, np.full(30, 30.0), np.full(64, 800.0), np.full(64, 20.0))
    pol = Reacting(2)
    simulate_fluid(demand, pol, SETTINGS)
    assert pol.reacted == [] and len(pol.decided) >= 30
