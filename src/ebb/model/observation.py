"""What a scaling policy observes: its metric pipeline, the pods, and (optionally) fine signals.

Pure records shared by the simulator (virtual clock), the live loop (wall clock) and the
decision code, so ``ebb.decide`` can read observations without importing the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ebb.model.ids import ReplicaId

FloatArray = npt.NDArray[np.float64]
_EMPTY = np.zeros(0)


@dataclass(frozen=True)
class Pipeline:
    """How a metric reaches the policy: sampled every ``period_s`` and averaged over ``window_s``.

    The value a policy sees at time t is the average of the true signal over
    ``[s − window_s, s]`` where ``s`` is the last sample instant ≤ t (multiples of ``period_s``
    shifted by ``offset_s``). Examples: Prometheus scraping every 30 s a gauge averaged by its
    exporter over 30 s (DCGM defaults) → ``Pipeline(30, 30)``; metrics-server at
    ``--metric-resolution=60s`` → ``Pipeline(60, 60)``; an Ebb agent → ``Pipeline(1, 1)``.
    """

    period_s: int = 30
    """Sampling period (s) of the last hop before the policy (scrape / resolution). Integer."""
    window_s: int = 30
    """Averaging window (s) of the sampled value (exporter interval / rate() range). Integer."""
    offset_s: int = 0
    """Phase of the sampling grid (s); real scrapes are not aligned with the policy's sync."""
    per_pod: bool = True
    """Whether the policy reads per-pod values; False skips building them (the oracle reads none)."""
    fine_ms: int | None = None
    """When set, the observation also carries :class:`FineSignals` sampled every ``fine_ms``
    milliseconds since the previous decision (an Ebb node agent streams at 100 ms)."""
    serving: bool = False
    """Whether the policy reads :attr:`Observation.serving` (cumulative request counters, as a
    model server's ``/metrics`` has them); off, the simulator skips their bookkeeping."""

    def __post_init__(self) -> None:
        if self.period_s < 1 or self.window_s < 1 or self.offset_s < 0:
            raise ValueError(f"Pipeline needs period_s>=1, window_s>=1, offset_s>=0; got {self!r}")


@dataclass(frozen=True)
class PodView:
    """One replica as the policy sees it (values through its pipeline; None = no sample yet)."""

    replica: ReplicaId
    created_s: float
    """When the replica was requested (pod creation)."""
    ready_s: float | None
    """When it became ready to serve; None while it is cold-starting."""
    util_ratio: float | None
    """GPU busy fraction in [0, 1] (NVML/DCGM ``GPU_UTIL`` / 100) averaged over the pipeline window."""
    inflight: float | None
    """Requests running or queued on the replica at the sample instant (vLLM-style gauge)."""
    qps: float | None
    """Requests completed per second on the replica over the pipeline window."""
    zone: str = ""
    """Availability zone of the replica's node (the simulator spreads replicas over 3 zones)."""
    running: float | None = None
    """Sequences running on the replica at the sample instant (``vllm:num_requests_running``)."""
    waiting: float | None = None
    """Requests waiting for the replica at the sample instant (``vllm:num_requests_waiting``). The
    simulator's router holds one FIFO queue; an engine-side queue behind a spreading router would
    hold the same requests, so each ready replica reports an equal share of it."""
    kv_usage_ratio: float | None = None
    """KV-cache fraction in use at the sample instant, in [0, 1] (``vllm:kv_cache_usage_perc``).
    Simulator: tokens held by the replica's running sequences (prompt + half the output, a
    sequence's mean footprint over its life) / :attr:`~ebb.model.latency.LatencyModel.kv_capacity_tokens`,
    capped at 1 (the simulator admits on slots; past 1 a real engine would preempt)."""

    @staticmethod
    def sharing(values: Mapping[str, float | None], replica: ReplicaId, created_s: float,
                ready_s: float | None, zone: str) -> PodView:
        """A view equal to ``PodView(replica, created_s, ready_s, zone=zone, **values)`` built in
        ~0.4 µs instead of ~2.3 µs: the fluid simulator gives every ready replica the fleet's same
        ``values`` (util_ratio, inflight, qps, running, waiting, kv_usage_ratio), 20 views a simulated
        second. It fills the instance's attributes directly (the frozen ``__setattr__`` is the cost),
        so ``values`` must name exactly those six fields; equality, hashing and repr are the
        dataclass's own."""
        view = object.__new__(PodView)
        attrs = view.__dict__
        attrs.update(values)
        attrs["replica"], attrs["created_s"], attrs["ready_s"], attrs["zone"] = replica, created_s, ready_s, zone
        return view


@dataclass(frozen=True)
class FineSignals:
    """Fleet signals an agent streams at ``fine_ms`` resolution, plus recent completions.

    ``prefill_replicas[k]``: prefill busy time of the fleet over sample k's interval, in
    replica units (1.0 = one replica prefilling all the time). ``slot_replicas[k]``: sequences
    running / max batch, in replica units (the router queue is ``queued``: backlog, not demand). Completion arrays hold the requests that
    finished since the previous decision: finish time, TTFT and end-to-end latency (ms), and a
    weight (1 per request; the fluid engine reports bins as weighted samples). ``done_wait_ms`` is
    the part of each TTFT spent waiting before the request's own prefill began (router queue and the
    replica's prefill queue): the part more replicas can shorten. Sources that cannot tell leave it
    empty (or NaN per row), and the policy falls back to TTFT.
    """

    t_s: FloatArray = field(default_factory=lambda: _EMPTY)
    prefill_replicas: FloatArray = field(default_factory=lambda: _EMPTY)
    slot_replicas: FloatArray = field(default_factory=lambda: _EMPTY)
    queued: FloatArray = field(default_factory=lambda: _EMPTY)
    done_t_s: FloatArray = field(default_factory=lambda: _EMPTY)
    done_ttft_ms: FloatArray = field(default_factory=lambda: _EMPTY)
    done_e2e_ms: FloatArray = field(default_factory=lambda: _EMPTY)
    done_weight: FloatArray = field(default_factory=lambda: _EMPTY)
    done_wait_ms: FloatArray = field(default_factory=lambda: _EMPTY)


QUEUE_TIME_BOUNDS_S: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0)
"""Upper bounds (s) of ``vllm:request_queue_time_seconds`` (vLLM ``v1/metrics/loggers.py``,
``request_latency_buckets``; saved in ``shared/data/engine-metrics/vllm/source``)."""


@dataclass(frozen=True)
class ServingCounters:
    """Cumulative fleet-wide serving counters at one sample instant, as a model server's
    ``/metrics`` exposes them (vLLM names in each field's docstring). Monotone over a run: a policy
    takes the rate over its own interval with :meth:`minus`. Requests count when they finish."""

    requests_total: float = 0.0
    """Finished requests (``vllm:request_success_total``; the histograms' ``_count``)."""
    prompt_tokens_total: float = 0.0
    """Prompt tokens of finished requests (``vllm:prompt_tokens_total``)."""
    generation_tokens_total: float = 0.0
    """Output tokens of finished requests (``vllm:generation_tokens_total``)."""
    ttft_sum_s: float = 0.0
    """Σ time to first token (s) (``vllm:time_to_first_token_seconds_sum``)."""
    itl_sum_s: float = 0.0
    """Σ inter-token gaps (s) = Σ (finish − first token) (``vllm:inter_token_latency_seconds_sum``)."""
    itl_count: float = 0.0
    """Number of inter-token gaps = Σ (output tokens − 1) (``..._count``)."""
    e2e_sum_s: float = 0.0
    """Σ end-to-end latency (s) (``vllm:e2e_request_latency_seconds_sum``)."""
    queue_time_sum_s: float = 0.0
    """Σ time waiting for a slot (s) (``vllm:request_queue_time_seconds_sum``)."""
    queue_time_le: tuple[float, ...] = ()
    """Cumulative bucket counts of queue time ≤ each of :data:`QUEUE_TIME_BOUNDS_S` (the +Inf
    bucket is :attr:`requests_total`); empty = no histogram."""

    def minus(self, earlier: ServingCounters) -> ServingCounters:
        """The increase since ``earlier`` (a counter reset — a smaller value — counts from zero)."""
        def d(a: float, b: float) -> float:
            return a - b if a >= b else a
        le = tuple(d(a, b) for a, b in zip(self.queue_time_le, earlier.queue_time_le)) \
            if len(self.queue_time_le) == len(earlier.queue_time_le) else self.queue_time_le
        return ServingCounters(
            d(self.requests_total, earlier.requests_total), d(self.prompt_tokens_total, earlier.prompt_tokens_total),
            d(self.generation_tokens_total, earlier.generation_tokens_total), d(self.ttft_sum_s, earlier.ttft_sum_s),
            d(self.itl_sum_s, earlier.itl_sum_s), d(self.itl_count, earlier.itl_count),
            d(self.e2e_sum_s, earlier.e2e_sum_s), d(self.queue_time_sum_s, earlier.queue_time_sum_s), le)

    @property
    def mean_ttft_s(self) -> float:
        """Mean TTFT (s); NaN without requests."""
        return self.ttft_sum_s / self.requests_total if self.requests_total > 0 else float("nan")

    @property
    def mean_itl_s(self) -> float:
        """Mean inter-token latency (s); NaN without gaps."""
        return self.itl_sum_s / self.itl_count if self.itl_count > 0 else float("nan")

    @property
    def mean_isl(self) -> float:
        """Mean prompt length (tokens); NaN without requests."""
        return self.prompt_tokens_total / self.requests_total if self.requests_total > 0 else float("nan")

    @property
    def mean_osl(self) -> float:
        """Mean output length (tokens); NaN without requests."""
        return self.generation_tokens_total / self.requests_total if self.requests_total > 0 else float("nan")


@dataclass(frozen=True)
class ScaleRequest:
    """A policy's answer when it also names victims: replicas to keep, and which to remove first
    (ids of ready or cold-starting replicas; the engine falls back to its default order for the
    rest). The actuator's request: a :class:`~ebb.model.decision.Decision`'s ``to_replicas`` and
    ``victims`` once the controller has accepted it."""

    replicas: int
    victims: tuple[ReplicaId, ...] = ()


@dataclass(frozen=True)
class Observation:
    """What a policy sees at one reconcile."""

    t_s: float
    spec_replicas: int
    """The current target (``scale.spec.replicas``): starting + ready, draining excluded."""
    ready_replicas: int
    pods: tuple[PodView, ...]
    """Replicas counted in ``spec_replicas``, oldest first."""
    total_qps: float | None
    """Arrivals per second over the pipeline window, as a Prometheus ``sum(rate(...))`` shows it."""
    total_inflight: float | None
    """Requests running or queued anywhere (router queue included), at the last sample."""
    queued: float | None
    """Requests waiting at the router for a free slot, at the last sample."""
    fine: FineSignals | None = None
    """High-resolution signals since the previous decision (only when the pipeline asks)."""
    gate_values: Mapping[str, float] | None = None
    """Values of metrics-gate queries at this reconcile, keyed by query text (NaN = no data). The
    live controller measures them (PromQL) while a canary step is gated; None in the simulator,
    where gates read L1 signals."""
    serving: ServingCounters | None = None
    """Cumulative serving counters (requests, tokens, TTFT/ITL/queue-time sums and the queue-time
    histogram) at the newest pipeline sample; None where the source has none."""
    asleep_replicas: int = 0
    """Replicas asleep (an asleep tier): not serving, not in ``spec_replicas``, back within the tier's
    wake time; 0 without a tier."""
    wake_s_seen: float | None = None
    """The slowest wake the actuator measured (s; the live loop's
    :attr:`~ebb.actuate.base.FleetState.wake_s_seen`); None before any, and in the simulator, whose
    wakes take exactly the tier's ``wake_s``."""
