"""How far each agent's clock is from the controller's, and the correction its bucket times get.

Agents stamp buckets with their own wall clock; the controller merges agents by those stamps and
judges freshness against its own clock. An agent whose clock is 3 s behind therefore looks like an
agent 3 s late, and its buckets land on the wrong times of the merge. :class:`AgentClocks` measures
each agent's offset from the ``now_ns`` its page carries (the agent's clock as it wrote the page):

* **Measurement.** ``offset = now_ns − (sent + received) / 2`` on the controller's clock, exact to
  within half the request's round trip (the page is written between send and receipt); the
  estimate is the median of the last :data:`WINDOW` (5) pages, so one slow answer moves nothing.
* **Correction.** When the estimate is off by more than its own uncertainty and at least half a
  bucket, the agent's bucket times are shifted by the estimate rounded to whole buckets (so they
  stay on the bucket grid every agent shares) and its ``since_ns`` is asked in its own clock; else
  nothing is shifted. A 3 s-behind agent is then merged where its buckets belong, and its data
  is as fresh as it really is.
* **Not a lag detector.** A page without ``now_ns`` (an older agent, a test double) gets no offset
  and no correction; lateness that is not a clock offset (a stalled agent) keeps its age, and the
  controller's freshness rule judges it (``ebb.live.sensed``).

Pure: the caller passes the times; no I/O, no clock of its own.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque
from typing import Final

__all__ = ["WINDOW", "AgentClocks"]

log = logging.getLogger("ebb.sources.agents")

WINDOW: Final = 5
"""Pages whose offsets the estimate is the median of."""


class AgentClocks:
    """Per-agent clock offsets and bucket-time corrections (see the module docstring)."""

    def __init__(self) -> None:
        self._offsets: dict[str, deque[tuple[float, float]]] = {}
        self._shift_ns: dict[str, int] = {}

    def observe(self, agent: str, now_ns: int | None, sent_s: float, received_s: float, bucket_ms: int) -> None:
        """Take one page's stamp (``now_ns``, None when the page has none) read between ``sent_s``
        and ``received_s`` (controller wall clock, Unix s); update the agent's correction."""
        if now_ns is None or received_s < sent_s:
            return
        seen = self._offsets.setdefault(agent, deque(maxlen=WINDOW))
        seen.append((now_ns / 1e9 - (sent_s + received_s) / 2, (received_s - sent_s) / 2))
        offset_s = statistics.median(o for o, _ in seen)
        uncertainty_s = statistics.median(u for _, u in seen)
        bucket_ns = bucket_ms * 1_000_000
        shift = 0
        if abs(offset_s) > max(uncertainty_s, bucket_ms / 2000):
            shift = round(offset_s * 1e9 / bucket_ns) * bucket_ns
        if shift != self._shift_ns.get(agent, 0):
            if shift:
                log.warning("agent %s: its clock is %+.2f s off the controller's (median of %d pages, ±%.3f s): "
                            "its bucket times are corrected by %+.1f s (fix: run NTP/chrony on that node)",
                            agent, offset_s, len(seen), uncertainty_s, -shift / 1e9)
            else:
                log.info("agent %s: its clock agrees with the controller's again (%+.3f s)", agent, offset_s)
        self._shift_ns[agent] = shift

    def shift_ns(self, agent: str) -> int:
        """What to subtract from ``agent``'s bucket times (and add to the ``since_ns`` it is asked)."""
        return self._shift_ns.get(agent, 0)

    def offsets_s(self) -> dict[str, float]:
        """Agent → its measured clock offset (s; + ahead of the controller), for agents that send ``now_ns``."""
        return {a: statistics.median(o for o, _ in seen) for a, seen in self._offsets.items() if seen}
