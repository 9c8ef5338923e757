"""Pure decisions: L1 signals (bursts, triggers, the need, the latency window), L2 workload semantics, the
comeback bound, L3 plans, the Ebb policy on its explicit state, and the fleet step both loops share.

Everything here is pure: arrays and frozen dataclasses in, records out; no I/O, no clocks.
"""

from __future__ import annotations

from ebb.decide.burst import Burst, detect_bursts

__all__ = ["Burst", "detect_bursts"]
