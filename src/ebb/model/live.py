"""Records and names shared by the live loop's processes: workers, router, agent, sources, controller.

The serving system on one machine (``ebb demo --live``, the integration tests) is:

    load generator → router (least-loaded, FIFO queue) → workers (continuous batching)
                       ↑ /stats, /metrics                  ↑ /stats, /metrics
                     agent (100 ms buckets, /v1/buckets, /metrics) ← Prometheus scrapes all three
                       ↑
                     controller (``ebb run``): source → Observation → Ebb policy → ledger → actuator

Every component exposes the same two read endpoints so a poller needs no per-kind code:

* ``GET /stats?since=<seq>`` → :data:`STATS_VERSION`-versioned JSON (see ``ebb.demo.stats.stats_envelope`` for the fields), the
  completions newer than ``seq`` (a monotonically increasing per-process counter).
* ``GET /metrics`` → Prometheus text exposition with the metric names below.

Units are in names: ``_s`` seconds, ``_ms`` milliseconds, ``_ns`` nanoseconds since the Unix epoch.
Time on the wire is always Unix time; the controller rebases it to its own start for the policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ebb.model.observation import FineSignals

STATS_VERSION: Final = 1
"""Version of the ``/stats`` JSON. A reader refuses other versions (InputError naming the URL)."""

BUCKETS_VERSION: Final = 1
"""Version of the agent's ``/v1/buckets`` JSON. A reader refuses other versions."""

# Prometheus metric names (gauges unless marked counter/histogram). Label ``worker`` = worker name.
WORKER_RUNNING: Final = "ebb_worker_running"
"""Sequences decoding on the worker (gauge)."""
WORKER_WAITING: Final = "ebb_worker_waiting"
"""Requests accepted by the worker but not yet admitted to a batch slot (gauge)."""
WORKER_MAX_BATCH: Final = "ebb_worker_max_batch"
"""Batch slots of the worker (gauge)."""
WORKER_READY: Final = "ebb_worker_ready"
"""1 once warm-up has finished, else 0 (gauge)."""
WORKER_SLEEP_STATE: Final = "ebb_worker_sleep_state"
"""The worker's sleep state in vLLM's ``vllm:engine_sleep_state`` style (gauge): one sample per label
``sleep_state`` = awake | weights_offloaded (sleep level 1) | discard_all (level 2), 1 for the state
the worker is in and 0 for the others; a waking worker still reads asleep."""
WORKER_PREFILL_BUSY: Final = "ebb_worker_prefill_busy_seconds_total"
"""Seconds spent prefilling (counter); its rate is the prefill busy share in replica units."""
WORKER_REQUESTS: Final = "ebb_worker_requests_total"
"""Requests completed by the worker (counter)."""
ROUTER_QUEUED: Final = "ebb_router_queued"
"""Requests waiting at the router for a free slot anywhere (gauge)."""
ROUTER_INFLIGHT: Final = "ebb_router_inflight"
"""Requests forwarded and not yet answered (gauge)."""
ROUTER_REQUESTS: Final = "ebb_router_requests_total"
"""Requests answered by the router, label ``outcome`` = ok | failed (counter)."""
ROUTER_TTFT: Final = "ebb_router_ttft_seconds"
"""Time to first token as the client sees it: router queue + worker TTFT (histogram)."""
ROUTER_E2E: Final = "ebb_router_e2e_seconds"
"""End-to-end latency through the router (histogram)."""
LATENCY_BUCKETS_S: Final = (0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0,
                            15.0, 20.0, 30.0, 60.0)
"""Histogram bucket bounds (s) for TTFT and end-to-end latency; dense around the 2 s TTFT SLO."""


@dataclass(frozen=True)
class LiveSignals:
    """What a live source returns for one controller cycle.

    ``fine`` holds the samples newer than the cursor the controller passed, in *Unix* seconds
    (``t_s``, ``done_t_s``); the controller rebases them. Completions may be weighted rows (the
    agent sends sketches: one row per non-empty bin, weight = count); a row carries NaN in the
    latency column it does not describe. ``inflight_by_replica`` maps a replica name (worker name /
    pod name) to requests running or waiting on it at the newest sample. ``newest_sample_s`` is the
    Unix time of the freshest sample behind these values (None: no data at all) — staleness is
    measured from it by the controller, never assumed by the source.

    ``replicas_seen`` is the fewest distinct replicas behind any fine sample returned (None when
    there is none): the controller's fleet-completeness check treats a read that covers fewer
    replicas than are ready as no data (no scale-down), whatever the source.

    ``asleep_replicas`` is how many replicas the engines say sleep (vLLM's ``vllm:engine_sleep_state``)
    at the newest sample (None: the source cannot tell): what the controller passes as
    :attr:`~ebb.model.observation.Observation.asleep_replicas`. Sleepers are never among ``replicas_seen``
    and add nothing to the fine sums.
    """

    fine: FineSignals
    inflight_by_replica: Mapping[str, float] = field(default_factory=dict)
    total_qps: float | None = None
    queued: float | None = None
    newest_sample_s: float | None = None
    replicas_seen: int | None = None
    asleep_replicas: int | None = None
