"""Decisions over windowed signals: burst detection (L1) and multi-signal trigger evaluation.

Everything here is pure: arrays and frozen dataclasses in, records out; no I/O, no clocks.
"""

from __future__ import annotations

from ebb.decide.burst import Burst, detect_bursts

__all__ = ["Burst", "detect_bursts"]
