"""The value checks settings run on their numbers: one line naming the flag, the value and the fix.

Each helper raises :class:`~ebb.errors.ConfigError` ``--flag VALUE: must be ... (fix: ...)`` and
returns the value it checked, so a caller can write ``x = positive("--x", x)``. They live with the
settings (:mod:`ebb.config.run_settings`, :mod:`ebb.config.simulate_settings`), which validate
themselves when built; :mod:`ebb.cli.checks` re-exports them for the other commands' flags. A value
from a ``--config`` file is named by its flag too: a key is its flag's long name (docs/config.md).

NaN and infinities fail every check but :func:`int_in_range` (integers have neither): ``not x > 0``
would let NaN through, so every comparison here is written to be False for NaN.
"""

from __future__ import annotations

import math

from ebb.errors import ConfigError

__all__ = ["at_least", "finite", "in_range", "int_in_range", "non_negative", "positive"]


def _fail(flag: str, value: object, must: str, fix: str | None) -> ConfigError:
    text = f"{flag} {value!r}: must be {must}"
    return ConfigError(text + (f" (fix: {fix})" if fix else ""))


def finite(flag: str, value: float, *, fix: str | None = None) -> float:
    """``value`` unless it is NaN or infinite."""
    if not math.isfinite(value):
        raise _fail(flag, value, "a finite number", fix)
    return value


def positive(flag: str, value: float, *, fix: str | None = None) -> float:
    """A finite number > 0."""
    if not (math.isfinite(value) and value > 0):
        raise _fail(flag, value, "a finite number > 0", fix)
    return value


def non_negative(flag: str, value: float, *, fix: str | None = None) -> float:
    """A finite number >= 0."""
    if not (math.isfinite(value) and value >= 0):
        raise _fail(flag, value, "a finite number >= 0", fix)
    return value


def at_least(flag: str, value: float, low: float, *, fix: str | None = None) -> float:
    """A finite number >= ``low``."""
    if not (math.isfinite(value) and value >= low):
        raise _fail(flag, value, f"a finite number >= {low:g}", fix)
    return value


def in_range(flag: str, value: float, low: float, high: float, *, fix: str | None = None) -> float:
    """A finite number in ``[low, high]``."""
    if not (math.isfinite(value) and low <= value <= high):
        raise _fail(flag, value, f"a number from {low:g} to {high:g}", fix)
    return value


def int_in_range(flag: str, value: int, low: int, high: int, *, fix: str | None = None) -> int:
    """An integer in ``[low, high]``."""
    if not low <= value <= high:
        raise _fail(flag, value, f"an integer from {low:,} to {high:,}", fix)
    return value
