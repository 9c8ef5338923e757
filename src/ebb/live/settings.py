"""What the live controller is configured with and what each of its cycles returns.

:class:`ControllerSettings` (validated on construction, :class:`ValueError` quoting the settings),
:class:`CycleOutcome` (one cycle's result, drawn by the demo's view and counted by the metrics) and
the :class:`Elector` seam the controller uses for leader election. Pure records: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ebb.live.resume import ResumeLimits
from ebb.live.ttft_seen import NO_TTFT, TtftSeen
from ebb.model.ids import DecisionId

__all__ = ["ControllerSettings", "CycleOutcome", "Elector", "Mode"]

Mode = Literal["recommend", "act"]


class Elector(Protocol):
    """What the controller needs from leader election (:class:`ebb.ledger.election.LeaderElector`)."""

    def is_leader(self) -> bool: ...

    def fence(self) -> Any: ...


@dataclass(frozen=True)
class ControllerSettings:
    """How the live loop runs. Every field: unit, default, why."""

    run_id: str = "live"
    """Ledger run id; decisions are ``<run_id>-<n>``. Keep it stable across restarts and replicas of
    one controller so a successor continues the sequence."""
    target: str = "serving"
    """The scaled workload's name in the ledger (``namespace/deployment``)."""
    mode: Mode = "recommend"
    """``recommend`` records decisions without acting (the safe default); ``act`` applies them."""
    interval_s: float = 1.0
    """Cycle period (s): the policy's reconcile interval (it sizes on 100 ms samples)."""
    max_staleness_s: float = 5.0
    """Samples older than this (s) count as missing: no scale-down (fail static)."""
    lookback_s: float = 30.0
    """On start (and after an outage) read at most this much history (s) from the source."""
    keep_outcomes: int | None = 3600
    """Cycle outcomes kept in memory for views and reports (an hour at 1 s); None keeps all (a
    bounded demo run). A long-running controller must not grow without bound."""
    min_replicas: int = 1
    """Floor for every applied decision, the policy's and a resumed one (the policy's own ``min``)."""
    max_replicas: int = 1000
    """Ceiling for every applied decision."""
    resume_max_age_s: float = 60.0
    """An unfinished decision older than this is not resumed after a restart (re-decided instead)."""
    react_interval_s: float = 0.1
    """Period (s) of the fast path between cycles, for a policy that has one
    (:class:`~ebb.decide.base.Reactive`): each tick reads the source's new samples and lets the policy
    request a scale-up at once. 0 turns it off (a source with coarse samples, such as Prometheus
    scraped every few seconds, gains nothing from reading it 10 times a second)."""
    review_poll_s: float = 5.0
    """How often (s) the leader looks in the review queue for items of its run an operator retried
    (``ebb review retry``): one read of the queue; 5 s keeps a retry prompt without reading it every
    cycle."""

    def __post_init__(self) -> None:
        if self.mode not in ("recommend", "act"):
            raise ValueError(f"mode must be 'recommend' or 'act', got {self.mode!r}")
        if not (self.interval_s > 0 and self.max_staleness_s > 0 and self.lookback_s > 0):
            raise ValueError(f"interval_s, max_staleness_s and lookback_s must be > 0: {self!r}")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"need 1 <= min_replicas <= max_replicas: {self!r}")
        if not self.resume_max_age_s > 0:
            raise ValueError(f"resume_max_age_s must be > 0: {self!r}")
        if not 0 <= self.react_interval_s < self.interval_s:
            raise ValueError(f"react_interval_s must be within [0, interval_s): {self!r}")
        if not self.review_poll_s > 0:
            raise ValueError(f"review_poll_s must be > 0: {self!r}")

    @property
    def resume_limits(self) -> ResumeLimits:
        return ResumeLimits(min_replicas=self.min_replicas, max_replicas=self.max_replicas,
                            max_age_s=self.resume_max_age_s)


@dataclass(frozen=True)
class CycleOutcome:
    """What one cycle did (returned by :meth:`Controller.cycle`, also drawn in the demo's view)."""

    n: int
    """Cycle number (0 for a follower's or a skipped cycle)."""
    t_s: float
    """Seconds since the controller started (monotonic)."""
    action: str
    """``hold``, ``scale_up``, ``scale_down``, ``veto``, ``follower`` or ``error``; a fast-path tick that
    asked for capacity is a ``scale_up`` with ``fast`` set."""
    spec_replicas: int
    to_replicas: int
    ready_replicas: int
    staleness_s: float | None
    """Age of the freshest sample (s); None when the source has never answered."""
    decision_id: DecisionId | None = None
    acted: bool = False
    note: str = ""
    signals: dict[str, float] = field(default_factory=dict)
    fast: bool = False
    """Whether the fast path (a tick between cycles) made this decision."""
    ttft: TtftSeen = NO_TTFT
    """TTFT of the completions the controller read since the previous cycle's read, the fast path's
    reads between them included (:class:`~ebb.live.sensed.Sensor`); empty for a cycle that read
    nothing (an error before the read, a fast-path tick: the next cycle carries its reads)."""
