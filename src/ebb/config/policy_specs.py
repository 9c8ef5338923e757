"""Parse ``--policy`` strings: several policies, each with inline parameters, side by side.

Grammar: comma-separated tokens. A token ``name`` or ``name:key=value`` starts a policy; a
following ``key=value`` token (no colon) adds a parameter to the policy before it. So
``hpa:target=0.5,max=40,hpa:target=0.8,keda:threshold=40,oracle`` is three baselines and the
oracle. The scorecard's ``policy`` field carries each policy's canonical text
(``hpa:target=0.5,max=40``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ebb.errors import ConfigError

MAX_KNOB = 1e12
"""Largest magnitude a numeric knob may have: past every meaningful target, window or rate (Ray Serve
LLM's "unset" target is 1e9), and small enough that a knob × 1000 (milli-units) stays an exact int."""


@dataclass(frozen=True)
class PolicySpecItem:
    """One parsed policy: its name, parameters (strings, in given order) and canonical text."""

    name: str
    params: tuple[tuple[str, str], ...]

    @property
    def text(self) -> str:
        if not self.params:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in self.params)

    def get(self, key: str) -> str | None:
        for k, v in self.params:
            if k == key:
                return v
        return None


def parse_policies(text: str, known: tuple[str, ...]) -> list[PolicySpecItem]:
    """Split ``text`` into policies; unknown names or malformed tokens raise ConfigError."""
    items: list[tuple[str, list[tuple[str, str]]]] = []
    for raw in text.split(","):
        tok = raw.strip()
        if not tok:
            continue
        if ":" in tok or "=" not in tok:
            name, _, rest = tok.partition(":")
            name = name.strip()
            if name not in known:
                raise ConfigError(
                    f"unknown policy {name!r} in --policy {text!r}; known policies: {', '.join(known)}"
                )
            items.append((name, []))
            if rest:
                tok = rest
            else:
                continue
        if not items:
            raise ConfigError(f"--policy {text!r}: parameter {tok!r} comes before any policy name")
        key, eq, value = tok.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise ConfigError(f"--policy {text!r}: expected key=value, got {tok!r}")
        items[-1][1].append((key.strip(), value.strip()))
    if not items:
        raise ConfigError(f"--policy {text!r} names no policy; known policies: {', '.join(known)}")
    return [PolicySpecItem(n, tuple(p)) for n, p in items]


def param_float(item: PolicySpecItem, key: str, default: float, *, lo: float | None = None,
                hi: float | None = None) -> float:
    """A float parameter with bounds, or ConfigError naming the policy, key and value."""
    raw = item.get(key)
    if raw is None:
        return default
    try:
        v = float(raw)
    except ValueError:
        raise ConfigError(f"policy {item.text!r}: {key}={raw!r} is not a number") from None
    if not math.isfinite(v) or abs(v) > MAX_KNOB:
        raise ConfigError(f"policy {item.text!r}: {key}={raw!r} must be a finite number of at most {MAX_KNOB:g}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ConfigError(f"policy {item.text!r}: {key}={raw!r} must be within [{lo}, {hi}]")
    return v


def param_int(item: PolicySpecItem, key: str, default: int, *, lo: int = 0) -> int:
    """An integer parameter ≥ ``lo``, or ConfigError."""
    raw = item.get(key)
    if raw is None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise ConfigError(f"policy {item.text!r}: {key}={raw!r} is not an integer") from None
    if v < lo or v > MAX_KNOB:
        raise ConfigError(f"policy {item.text!r}: {key}={raw!r} must be >= {lo} and at most {MAX_KNOB:g}")
    return v


def param_choice(item: PolicySpecItem, key: str, default: str, choices: tuple[str, ...]) -> str:
    """A parameter from a fixed set, or ConfigError listing the choices."""
    raw = item.get(key)
    if raw is None:
        return default
    if raw not in choices:
        raise ConfigError(f"policy {item.text!r}: {key}={raw!r}; choose one of {', '.join(choices)}")
    return raw


def check_keys(item: PolicySpecItem, allowed: tuple[str, ...]) -> None:
    """Reject parameters the policy does not know (a typo must not silently use a default)."""
    for k, _ in item.params:
        if k not in allowed:
            raise ConfigError(f"policy {item.text!r}: unknown parameter {k!r}; allowed: {', '.join(allowed)}")
