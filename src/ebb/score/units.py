"""Human units for spans and counts, so a 58.6-day trace does not print as ``84332.5 min``.

Guarantees: :func:`human_span` always returns a number and a unit a person reads without
arithmetic (``45 s``, ``12 min 05 s``, ``2 h 05 min``, ``58.6 days``); :func:`human_count` keeps at
least two significant digits and is exact (with thousands separators) below 100,000; :func:`plural`
puts a counted noun in the number its count asks for (``1 policy``, ``2 policies``, ``0 scale-downs``).
"""

from __future__ import annotations

import math

__all__ = ["human_count", "human_span", "plural"]


def human_span(seconds: float) -> str:
    """A duration in the largest unit that keeps it readable.

    < 60 s: seconds (``45 s``, ``2.5 s``, ``0.25 s``); < 1 h: ``M min SS s`` (``20 min`` when whole);
    < 48 h: ``H h MM min``; from 48 h: days with one decimal (``58.6 days``). Not finite → ``—``.
    Negative spans are shown with a leading minus.
    """
    if not math.isfinite(seconds):
        return "—"
    if seconds < 0:
        return "-" + human_span(-seconds)
    if seconds < 60:
        if seconds >= 10 or seconds == round(seconds):
            return f"{round(seconds):d} s"
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.1f} s"
    if seconds < 3600:
        m, s = divmod(round(seconds), 60)
        return f"{m} min" if s == 0 else f"{m} min {s:02d} s"
    if seconds < 48 * 3600:
        h, m = divmod(round(seconds / 60), 60)
        return f"{h} h" if m == 0 else f"{h} h {m:02d} min"
    return f"{seconds / 86400:.1f} days"


def human_count(n: float) -> str:
    """A count: exact with separators below 100,000 (``5,050``), then ``245 k``, ``1.2 M``, ``3.4 G``."""
    if not math.isfinite(n):
        return "—"
    a = abs(n)
    if a < 100_000:
        return f"{n:,.0f}"
    div, suffix = next((d, s) for d, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")) if a >= d)
    v = n / div
    return f"{v:.1f} {suffix}" if abs(v) < 100 else f"{v:,.0f} {suffix}"


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and ``noun``, the noun singular only when ``n`` is 1: ``1 policy``, ``3 policies``, ``0 pods``.

    The count keeps thousands separators (``1,200 requests``). The plural is ``many`` when given (``series``,
    ``replica-s``), else English's regular one: a consonant + ``y`` → ``ies``, ``s``/``x``/``z``/``ch``/``sh`` →
    ``es``, otherwise ``s`` (``scale-down`` → ``scale-downs``, ``GPU`` → ``GPUs``).
    """
    if n == 1:
        return f"{n:,} {noun}"
    if many is None:
        if noun.endswith("y") and len(noun) > 1 and noun[-2].lower() not in "aeiou":
            many = noun[:-1] + "ies"
        elif noun.endswith(("s", "x", "z", "ch", "sh")):
            many = noun + "es"
        else:
            many = noun + "s"
    return f"{n:,} {many}"
