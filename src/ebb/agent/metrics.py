"""The agent's own metrics, served at ``GET /metrics``: one private registry per agent.

:class:`AgentMetrics` holds every series :mod:`ebb.agent.server` documents for ``/metrics`` in a
:class:`~prometheus_client.CollectorRegistry` of its own, never the process-wide default one, so two
agents in one process (tests, ``ebb demo``) neither share nor collide on a series. Label values are
bounded by their callers: ``endpoint`` by the polled set (at most ``max_endpoints``, 256, and the
discovery URL; the series of an endpoint discovery drops is removed), ``reason`` by fixed lists,
``series`` by the samplers' series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["AgentMetrics"]


class AgentMetrics:
    """The agent's counters and gauges, registered in ``registry`` only."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.buckets = Counter("ebb_agent_buckets", "Buckets closed.", registry=r)
        self.poll_errors = Counter("ebb_agent_poll_errors", "Polls that failed (refused, timeout, "
                                   "bad answer).", ["endpoint"], registry=r)
        self.last_poll_age = Gauge("ebb_agent_last_poll_age_seconds", "Seconds since the newest "
                                   "successful poll of any endpoint (NaN before the first).", registry=r)
        self.late = Counter("ebb_agent_late_completions", "Completions fetched after their bucket "
                            "closed (placed in the next bucket).", registry=r)
        self.skipped = Counter("ebb_agent_skipped_buckets", "Bucket ends the loop was too late for.",
                               registry=r)
        self.dropped = Counter("ebb_agent_dropped_completions", "Completion rows dropped: bad_row "
                               "(malformed), future / too_old (implausible time), pending_cap.",
                               ["reason"], registry=r)
        self.tick_errors = Counter("ebb_agent_tick_errors", "Buckets whose closing raised (logged; the "
                                   "loop goes on).", registry=r)
        self.refused_endpoints = Gauge("ebb_agent_refused_endpoints", "Endpoints the last /workers "
                                       "answer listed but the agent refused: invalid, over_cap.",
                                       ["reason"], registry=r)
        self.asleep = Gauge("ebb_agent_asleep_workers", "Workers whose engine said it sleeps (or wakes only "
                            "in part) in the newest bucket: no capacity.", registry=r)
        self.collisions = Gauge("ebb_agent_name_collisions", "Names reported by more than one endpoint.",
                                registry=r)
        self.refused_requests = Counter("ebb_agent_refused_requests", "Requests refused: unauthorized "
                                        "(401), busy (503).", ["reason"], registry=r)
        self.refused_connections = Counter("ebb_agent_refused_connections", "Connections refused at "
                                           "accept: total_cap, peer_cap.", ["reason"], registry=r)
        self.gpu = Gauge("ebb_agent_gpu", "Latest NVML sample per series (unit in the name).", ["series"],
                         registry=r)
        self.host = Gauge("ebb_agent_host", "Latest host sample per series (unit in the name).", ["series"],
                          registry=r)
