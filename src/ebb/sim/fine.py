"""The fine-signal buffer both simulator engines fill between two decisions (what an agent streams).

Engines append to the public lists directly (bound ``append`` in their hot loops, no call per
sample); :meth:`FineBuffer.take` hands the policy one :class:`~ebb.model.observation.FineSignals`
and empties the buffer, so each sample and each completion reaches the policy exactly once.
"""

from __future__ import annotations

import numpy as np

from ebb.model.observation import FineSignals

__all__ = ["FineBuffer"]

_NONE = np.zeros(0)
"""The empty completion array every take without completions hands out."""


class FineBuffer:
    """Samples (time, prefill share, slot share, router queue) and completions since the last take."""

    __slots__ = ("t", "prefill", "slot", "queued", "done_t", "done_ttft_ms", "done_e2e_ms", "done_weight",
                 "done_wait_ms")

    def __init__(self) -> None:
        self.t: list[float] = []
        self.prefill: list[float] = []
        self.slot: list[float] = []
        self.queued: list[float] = []
        self.done_t: list[float] = []
        self.done_ttft_ms: list[float] = []
        self.done_e2e_ms: list[float] = []
        self.done_weight: list[float] = []
        """Empty when every completion weighs 1 (the request engine); else one weight per completion."""
        self.done_wait_ms: list[float] = []
        """Wait before each completion's own prefill began (ms), one per completion."""

    def clear(self) -> None:
        """Drop everything since the previous take (samples a policy already had another way)."""
        for buf in (self.t, self.prefill, self.slot, self.queued, self.done_t, self.done_ttft_ms,
                    self.done_e2e_ms, self.done_weight, self.done_wait_ms):
            buf.clear()

    def take(self) -> FineSignals:
        """Everything since the previous take, as arrays; the buffer is empty afterwards."""
        n = len(self.done_t)
        if n == 0 and not (self.done_ttft_ms or self.done_e2e_ms or self.done_weight or self.done_wait_ms):
            # No completion (most fast-path samples): the five completion arrays are one shared empty
            # array — it has no element to write, so sharing it is safe — not five new ones.
            fs = FineSignals(np.asarray(self.t), np.asarray(self.prefill), np.asarray(self.slot),
                             np.asarray(self.queued), _NONE, _NONE, _NONE, _NONE, _NONE)
            for buf in (self.t, self.prefill, self.slot, self.queued):
                buf.clear()  # in place: the engines hold these lists' bound appends
            return fs
        w = np.asarray(self.done_weight) if self.done_weight else np.ones(n)
        fs = FineSignals(np.asarray(self.t), np.asarray(self.prefill), np.asarray(self.slot),
                         np.asarray(self.queued), np.asarray(self.done_t), np.asarray(self.done_ttft_ms),
                         np.asarray(self.done_e2e_ms), w, np.asarray(self.done_wait_ms))
        self.clear()
        return fs
