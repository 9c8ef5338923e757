"""Short labels for long policy specs, so a table cell never hides the numbers next to it.

A spec longer than the limit is shown as ``P1``, ``P2``, ... (in first-seen order) and spelled out
once in a legend below the table; shorter specs are shown as they are. Guarantee: every label is at
most ``max(max_len, len("P") + digits)`` characters and distinct labels map to distinct specs.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["abbreviate", "legend"]


def abbreviate(policies: Iterable[str], max_len: int) -> dict[str, str]:
    """Spec → label: the spec itself when at most ``max_len`` characters long, else ``P<n>``."""
    out: dict[str, str] = {}
    n = 0
    for p in policies:
        if p in out:
            continue
        if len(p) <= max_len and not (p.startswith("P") and p[1:].isdigit()):
            out[p] = p
        else:
            n += 1
            out[p] = f"P{n}"
    return out


def legend(labels: dict[str, str]) -> list[tuple[str, str]]:
    """(label, spec) for every abbreviated spec, in label order; empty when none was abbreviated."""
    return [(short, spec) for spec, short in labels.items() if short != spec]
