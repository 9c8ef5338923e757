"""Signal rows written only when something changed (ebb.sim.request_signals), and reconciles skipped
where a policy's answer is known ahead (ebb.sim.policy.Scheduled), change no decision.

Each case runs one policy twice on one sparse request trace: with the pipelines' signal rows written
every simulated second and every reconcile run (the reference), and as every run goes — rows only at
the seconds something changed, and a scheduled policy's (oracle, static) holds skipped. Every request's outcome, every change of the replica target, every noteworthy decision (with
its signals and reasons) and every scorecard number must be the same, bit for bit. The traces are the
ones whose span dwarfs their work: rare requests, bursts hours apart, a single request; on the LLM
model and on the service-time model (a diffusion-like service holding a slot 5–600 s a request).
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass, field, replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.policy_specs import parse_policies
from ebb.model.decision import Decision
from ebb.model.ids import ReplicaId, TraceName
from ebb.model.observation import Observation, Pipeline, PodView
from ebb.model.spans import NO_SPANS, Spans
from ebb.model.trace import RequestTrace
from ebb.sim.lifecycle import Lifecycles
from ebb.sim.policies import KNOWN_POLICIES, build_policy
from ebb.sim.policy_context import PolicyContext
from ebb.sim.request_engine import simulate_requests
from ebb.sim.request_signals import SignalRows
from ebb.sim.scoring import score_requests
from ebb.sim.service_time import ServiceTimeModel
from ebb.sim.settings import ClusterSettings, SimSettings, SloSettings
from ebb.testing.policies import answer

LLM = SimSettings(cluster=ClusterSettings(cold_start_s=30.0), drain_horizon_s=900.0)
SERVICE = SimSettings(slo=SloSettings(ttft_ms=30_000.0, e2e_ms=630_000.0), drain_horizon_s=900.0,
                      cluster=ClusterSettings(cold_start_s=30.0, service=ServiceTimeModel(concurrency=1)))


def _trace(arrival: np.ndarray, seed: int, service: bool) -> RequestTrace:
    rng = np.random.default_rng(seed)
    n = len(arrival)
    svc = np.exp(rng.uniform(np.log(5.0), np.log(600.0), n)) if service else None
    return RequestTrace(TraceName("sparse"), np.sort(arrival), rng.integers(50, 2000, n), rng.integers(1, 300, n),
                        service_s=svc)


def rare(seed: int, span_s: float) -> np.ndarray:
    """Poisson arrivals at one every few minutes."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0.0, span_s, max(1, rng.poisson(span_s / 240.0)))


def bursts(seed: int, span_s: float) -> np.ndarray:
    """Two to four bursts of 5–60 requests within seconds, spread over the span (hours apart at its longest)."""
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.uniform(0.0, span_s, rng.integers(2, 5)))
    return np.concatenate([s + rng.uniform(0.0, rng.uniform(0.5, 20.0), rng.integers(5, 61)) for s in starts])


def one(seed: int, span_s: float) -> np.ndarray:
    """A single request, late in the span."""
    return np.array([np.random.default_rng(seed).uniform(0.5, 1.0) * span_s])


FAMILIES = {"rare": rare, "bursts": bursts, "one": one}


def _schedule(seconds: int, peak: int, seed: int) -> np.ndarray:
    """An oracle schedule for the context: 1 to ``peak`` replicas, changing every 30 s to 20 min."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(30, 1200, seconds // 30 + 1)
    return np.repeat(rng.integers(1, peak + 1, len(lengths)), lengths)[:seconds].astype(np.int64)


def _runs(spec: str, trace: RequestTrace, sim: SimSettings, peak: int) -> list[tuple[object, ...]]:
    """The policy's run with rows every second and every reconcile, then as every run goes (rows on
    change, a scheduled policy's holds skipped): outcome, fleet, scorecard."""
    item = parse_policies(spec, KNOWN_POLICIES)[0]
    ctx = PolicyContext(sim, _schedule(int(trace.duration_s) + 2, peak, len(trace.arrival_s)))
    out = []
    for every in (True, False):
        outcome, fleet = simulate_requests(trace, build_policy(item, ctx), sim, every_second=every)
        card = replace(score_requests(spec, trace, outcome, fleet, sim, wall_s=0.0).scorecard, wall_s=0.0)
        out.append((outcome.first_token_s.tobytes(), outcome.finish_s.tobytes(), outcome.replica.tobytes(),
                    repr(fleet.replicas), fleet.decisions, repr(fleet.noteworthy), fleet.end_s, repr(card)))  # repr: NaN == NaN
    return out


def _assert_same(spec: str, family: str, seed: int, span_s: float, service: bool, peak: int) -> None:
    trace = _trace(FAMILIES[family](seed, span_s), seed, service)
    every, on_change = _runs(spec, trace, SERVICE if service else LLM, peak)
    for name, a, b in zip(("first tokens", "finishes", "replicas", "lifecycles", "decisions", "noteworthy",
                           "end", "scorecard"), every, on_change, strict=True):
        assert a == b, f"{spec} on {family} (seed {seed}, {span_s:.0f} s, service={service}): {name} differ"


@settings(max_examples=16, deadline=None)
@given(spec=st.sampled_from(["hpa", "hpa:metric=inflight", "static", "keda", "keda:min=0", "oracle"]),
       family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 10_000),
       span_s=st.floats(600.0, 4 * 3600.0), service=st.booleans(), peak=st.integers(1, 6))
def test_the_peers_decide_and_score_the_same_with_rows_only_on_change(spec: str, family: str, seed: int,
                                                                      span_s: float, service: bool,
                                                                      peak: int) -> None:
    _assert_same(spec, family, seed, span_s, service, peak)


@settings(max_examples=4, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 10_000), span_s=st.floats(600.0, 3600.0),
       service=st.booleans(), peak=st.integers(1, 6))
def test_ebb_decides_and_scores_the_same_with_rows_only_on_change(family: str, seed: int, span_s: float,
                                                                  service: bool, peak: int) -> None:
    _assert_same("ebb", family, seed, span_s, service, peak)


@dataclass
class _SteppingRecorder:
    """Answers the count of the last step at or before the reconcile, and keeps what it saw."""

    steps: tuple[tuple[float, int], ...]
    pipeline: Pipeline
    interval_s: float
    spec: str = "stepping"
    seen: list[str] = field(default_factory=list)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        self.seen.append(repr(obs))
        n = self.steps[0][1]
        for t, k in self.steps:
            if obs.t_s >= t:
                n = k
        return answer(obs, n, self.spec)

    def observe(self, obs: Observation) -> None:
        """Nothing to ingest."""

    def gate_queries(self) -> tuple[str, ...]:
        return ()


@dataclass
class _ReactingRecorder(_SteppingRecorder):
    """Also a fast path at every fine sample: one replica more at each of ``ups`` (s), once."""

    ups: list[float] = field(default_factory=list)
    react_interval_s: float = 0.1

    def react(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision | None:
        if self.ups and obs.t_s >= self.ups[0]:
            self.ups.pop(0)
            return answer(obs, obs.spec_replicas + 1, self.spec)
        return None


@settings(max_examples=40, deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), seed=st.integers(0, 10_000), span_s=st.floats(60.0, 1800.0),
       service=st.booleans(), interval=st.sampled_from([1.0, 2.0, 3.0, 5.0, 15.0]),
       period=st.sampled_from([1, 2, 3, 10, 30]), window=st.sampled_from([1, 2, 5, 30, 60]),
       offset=st.integers(0, 2), steps=st.lists(st.tuples(st.integers(0, 1800), st.integers(0, 5)), min_size=1,
                                                 max_size=8),
       ups=st.one_of(st.none(), st.lists(st.floats(0.0, 1800.0), max_size=6)))
def test_every_observation_a_policy_sees_is_the_same_with_rows_only_on_change(
        family: str, seed: int, span_s: float, service: bool, interval: float, period: int, window: int,
        offset: int, steps: list[tuple[int, int]], ups: list[float] | None) -> None:
    # Changes at reconciles (scale-ups, drains) and at events land in the row of the second a
    # pipeline reading every second would first see them — never one second early or late.
    trace = _trace(FAMILIES[family](seed, span_s), seed, service)
    sim = replace(SERVICE if service else LLM, cluster=replace((SERVICE if service else LLM).cluster, cold_start_s=7.0))
    seen = []
    for every in (True, False):
        pipe = Pipeline(period, window, offset, fine_ms=None if ups is None else 100)
        step = tuple((float(t), n) for t, n in sorted(steps))
        policy = _SteppingRecorder(step, pipe, interval) if ups is None else \
            _ReactingRecorder(step, pipe, interval, ups=sorted(ups))  # fast-path scale-ups between reconciles
        simulate_requests(trace, policy, sim, every_second=every)  # type: ignore[arg-type]
        seen.append(policy.seen)
    assert seen[0] == seen[1]


def test_two_requests_28_h_apart_keep_memory_proportional_to_events_not_to_the_span() -> None:
    # Rows every second hold 100,800 seconds of fleet and replica counters (~20 MB here); rows on
    # change hold the handful of seconds something happened.
    trace = _trace(np.array([0.0, 28 * 3600.0]), 1, service=True)
    item = parse_policies("hpa", KNOWN_POLICIES)[0]
    ctx = PolicyContext(SERVICE, np.full(int(trace.duration_s) + 2, 1, dtype=np.int64))
    peaks = []
    for every in (True, False):
        policy = build_policy(item, ctx)
        tracemalloc.start()
        simulate_requests(trace, policy, SERVICE, every_second=every)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 4_000_000 < peaks[0], peaks


def test_a_busy_replica_reads_one_busy_second_per_second_between_its_rows() -> None:
    fleet = Lifecycles()
    for _ in range(2):
        fleet.add(0.0, warm=True)
    rows = SignalRows()
    rows.dirty.update((0, 1))
    # Second 0: replica 0 serves one request since t = 0, replica 1 is idle; nothing changes until 100.
    rows.record(0, fleet, 1, 0, [1, 0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [500.0, 0.0], None)
    rows.dirty.add(0)
    rows.record(100, fleet, 1, 0, [0, 0], [100.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0], None)
    assert rows.secs == [0, 100] and rows.r_secs == {0: [0, 100], 1: [0]}
    busy, idle = rows.pods(60, 30, fleet, 1000.0)
    assert busy == PodView(ReplicaId(0), 0.0, 0.0, 1.0, 1.0, 0.0, "zone-a", running=1.0, waiting=0.0,
                           kv_usage_ratio=0.5)
    assert (idle.util_ratio, idle.inflight, idle.qps) == (0.0, 0.0, 0.0)
    # Over [90, 120]: busy until its finish at 100, then idle; one completion in the window.
    late = rows.pods(120, 30, fleet, 1000.0)[0]
    assert (late.util_ratio, late.inflight, late.qps) == (10.0 / 30.0, 0.0, 1.0 / 30.0)
