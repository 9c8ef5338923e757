"""A return tier's configuration: how fast a put-away replica comes back, how many, how long, and whether it holds its GPU.

Two kinds, both parsed into one :class:`SleepTier`:

* ``--tier asleep:wake_s=2,max=8,ttl_s=1800[,fail=0.05]``: engine sleep (vLLM ``/sleep``). The
  replica keeps its pod and GPU (billed; its HBM freed) and wakes in seconds.
* ``--tier snapshot:restore_s=15,save_s=10,max=8,ttl_s=86400[,fail=0.05]``: a GPU snapshot (CRIU +
  cuda-checkpoint: NVIDIA Dynamo Snapshot, Modal GPU memory snapshots). The replica's state is saved
  (``save_s``, GPU still held) and its GPU released (not billed); a restore takes ``restore_s``
  (gpt-oss-120b: 119 s cold → 15 s restored, under 5 s from local NVMe; NVIDIA blog 2026-05-27).

The simulator reads ``--tier``; the live actuators read the same dataclass. What the tier does is the simulator's :mod:`ebb.sim.sleepers` and the
actuators' (:class:`ebb.actuate.base.SleepingActuator`); how Ebb decides with it is
``EbbPolicy._tiered``; the engines' sleep modes and published wake times are in ``docs/tiers.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ebb.errors import ConfigError

__all__ = ["DEFAULT_FAIL", "DEFAULT_MAX", "DEFAULT_RESTORE_S", "DEFAULT_SAVE_S", "DEFAULT_SNAPSHOT_TTL_S",
           "DEFAULT_TTL_S", "DEFAULT_WAKE_S", "KINDS", "MIN_WAKE_DEADLINE_S", "SleepTier", "parse_tier"]

DEFAULT_MAX = 8
"""Default number of replicas asleep at once at most."""
DEFAULT_WAKE_S = 2.0
"""Default wake time (s): vLLM sleep level 1 wakes in 0.1-6 s, level 2 in 0.8-2.6 s (vLLM blog,
2025-10-26; docs/tiers.md)."""
DEFAULT_TTL_S = 1800.0
"""Default time a replica may sleep before it is released (s)."""
DEFAULT_FAIL = 0.0
"""Default share of wakes that fail (the simulator's tier faults): none."""
DEFAULT_RESTORE_S = 15.0
"""Default snapshot restore time (s): gpt-oss-120b restored in 15 s instead of a 119 s cold start
(NVIDIA Dynamo Snapshot, NVIDIA blog 2026-05-27; under 5 s from local NVMe)."""
DEFAULT_SAVE_S = 10.0
"""Default time (s) a snapshot takes to save, GPU still held: an assumption (no upstream figure for
the checkpoint side was found); set it from a measured save."""
DEFAULT_SNAPSHOT_TTL_S = 86400.0
"""Default time a snapshot is kept (s): it holds no GPU, only storage."""
MIN_WAKE_DEADLINE_S = 10.0
"""A wake is given at least this long before it counts as failed (:attr:`SleepTier.wake_deadline_s`)."""
KINDS = ("asleep", "snapshot")
"""The tier kinds: engine sleep (GPU held) and GPU snapshot (GPU released)."""


@dataclass(frozen=True)
class SleepTier:
    """A return tier: comeback time, how many replicas may be put away at once, how long each may
    stay, and (:attr:`kind`) whether a put-away replica holds its GPU."""

    wake_s: float = DEFAULT_WAKE_S
    """From a wake (asleep) or restore (snapshot) request to serving (s)."""
    max_replicas: int = DEFAULT_MAX
    """Replicas asleep at once at most; a drain past it removes its replica."""
    ttl_s: float = DEFAULT_TTL_S
    """A replica asleep this long (s) is released (its GPU freed)."""
    fail: float = DEFAULT_FAIL
    """Share of wakes that fail (the simulator's tier faults, :mod:`ebb.sim.sleepers`): a failed wake
    releases its sleeper and falls back to a cold start at once. 0: every wake succeeds."""
    kind: str = "asleep"
    """``asleep``: engine sleep, the GPU stays held (billed). ``snapshot``: the GPU is released once
    the state is saved (:attr:`save_s`), so only the save is billed."""
    save_s: float = 0.0
    """Snapshot: seconds from the drain's end until the GPU is released (billed); 0 for ``asleep``."""
    reserve: float | None = None
    """Asleep only, opt-in (``reserve=H``, H in [1, 100]): keep a **reserve** — sleepers are kept up
    to :attr:`max_replicas` until their TTL (not only those the history's cold floor counts on), a
    scale-up wakes every one at once, and ``H`` × the sized need stays running so a burst up to H×
    is absorbed while the rest wake. Holds GPU-hours near a static fleet's (lendable, not running);
    buys safety against bursts the history has never shown. None: off (the history decides)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"--tier: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        where, back = f"--tier {self.kind}", "wake_s" if self.kind == "asleep" else "restore_s"
        if not (0 <= self.wake_s < 3600 and math.isfinite(self.wake_s)):
            raise ConfigError(f"{where}: {back} must be in [0, 3600) s, got {self.wake_s!r}")
        if not 1 <= self.max_replicas <= 100_000:
            raise ConfigError(f"{where}: max must be in [1, 100000], got {self.max_replicas!r}")
        if not (0 < self.ttl_s <= 30 * 86400 and math.isfinite(self.ttl_s)):
            raise ConfigError(f"{where}: ttl_s must be in (0, 2592000] s, got {self.ttl_s!r}")
        if not 0 <= self.fail <= 1:  # NaN fails both comparisons
            raise ConfigError(f"{where}: fail must be in [0, 1], got {self.fail!r}")
        if not (0 <= self.save_s < 3600 and math.isfinite(self.save_s)) or (self.kind == "asleep" and self.save_s):
            raise ConfigError(f"{where}: save_s must be in [0, 3600) s (snapshots only), got {self.save_s!r}")
        if self.reserve is not None and (self.kind != "asleep" or not 1.0 <= self.reserve <= 100.0):
            raise ConfigError(f"{where}: reserve must be in [1, 100] (the asleep tier only), got {self.reserve!r}")

    @property
    def wake_deadline_s(self) -> float:
        """How long a wake may take before it counts as failed and falls back to a cold start:
        ``max(10 s, 5 × wake_s)`` (every live actuator: :class:`ebb.actuate.base.SleepingActuator`)."""
        return max(MIN_WAKE_DEADLINE_S, 5.0 * self.wake_s)

    @property
    def holds_gpu(self) -> bool:
        """Whether a put-away replica keeps its GPU (engine sleep) rather than releasing it (snapshot)."""
        return self.kind == "asleep"

    def describe(self) -> str:
        """``asleep:wake_s=2,max=8,ttl_s=1800`` or ``snapshot:restore_s=15,save_s=10,max=8,ttl_s=86400``
        (what :func:`parse_tier` reads back; ``,fail=F`` when wakes fail, ``,reserve=H`` with a reserve)."""
        fail = f",fail={self.fail!r}" if self.fail else ""
        fail += f",reserve={self.reserve:g}" if self.reserve is not None else ""
        back = f"wake_s={self.wake_s:g}" if self.holds_gpu else f"restore_s={self.wake_s:g},save_s={self.save_s:g}"
        return f"{self.kind}:{back},max={self.max_replicas},ttl_s={self.ttl_s:g}{fail}"


_KEYS = {"asleep": {"wake_s": float, "max": int, "ttl_s": float, "fail": float, "reserve": float},
         "snapshot": {"restore_s": float, "save_s": float, "max": int, "ttl_s": float, "fail": float}}
_FIX = {"asleep": "write --tier asleep:wake_s=2,max=8,ttl_s=1800 (every key optional)",
        "snapshot": "write --tier snapshot:restore_s=15,save_s=10,max=8,ttl_s=86400 (every key optional)"}


def parse_tier(text: str) -> SleepTier:
    """``asleep[:wake_s=S,max=N,ttl_s=S,fail=F,reserve=H]`` or ``snapshot[:restore_s=S,save_s=S,max=N,ttl_s=S,fail=F]``
    → :class:`SleepTier`; ConfigError naming the part and the fix."""
    name, _, params = text.strip().partition(":")
    if name not in _KEYS:
        raise ConfigError(f"--tier {text!r}: unknown tier {name!r}; known: {', '.join(KINDS)} "
                          f"(fix: {_FIX['asleep']}, or {_FIX['snapshot'].removeprefix('write ')})")
    fix, keys = _FIX[name], _KEYS[name]
    values: dict[str, float | int] = {}
    for part in filter(None, (p.strip() for p in params.split(","))):
        key, eq, raw = part.partition("=")
        if not eq or key not in keys:
            raise ConfigError(f"--tier {text!r}: {part!r} is not one of {', '.join(keys)}=VALUE (fix: {fix})")
        if key in values:
            raise ConfigError(f"--tier {text!r}: {key} given twice (fix: {fix})")
        try:
            values[key] = keys[key](raw)
        except ValueError:
            raise ConfigError(f"--tier {text!r}: {key}={raw!r} is not a number (fix: {fix})") from None
    most, fail = int(values.get("max", DEFAULT_MAX)), float(values.get("fail", DEFAULT_FAIL))
    if name == "snapshot":
        return SleepTier(wake_s=float(values.get("restore_s", DEFAULT_RESTORE_S)), max_replicas=most,
                         ttl_s=float(values.get("ttl_s", DEFAULT_SNAPSHOT_TTL_S)), fail=fail, kind="snapshot",
                         save_s=float(values.get("save_s", DEFAULT_SAVE_S)))
    reserve = values.get("reserve")
    return SleepTier(wake_s=float(values.get("wake_s", DEFAULT_WAKE_S)), max_replicas=most,
                     ttl_s=float(values.get("ttl_s", DEFAULT_TTL_S)), fail=fail,
                     reserve=None if reserve is None else float(reserve))
