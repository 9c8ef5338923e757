"""The tier and lending keys of a cluster scenario (``tier:`` per online service, ``lending:`` at the
top) and of a fleet file (``tier:`` per workload, :mod:`ebb.config.fleet`).

Parsed once into :class:`LendingSettings` and :class:`~ebb.config.tiers.SleepTier`; every problem is a
one-line :class:`~ebb.errors.ConfigError` naming the scenario file, the key path and the fix. The
engine's use of them: :mod:`ebb.sim.cluster.lending`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ebb.config.tiers import SleepTier, parse_tier
from ebb.config.yamlio import config_error, describe, finite_value, known_keys, whole_number
from ebb.errors import ConfigError

__all__ = ["LendingSettings", "parse_lending", "parse_service_tier"]


@dataclass(frozen=True)
class LendingSettings:
    """What taking a GPU back from best-effort work costs (``lending:``; :mod:`ebb.sim.cluster.lending`).

    Best-effort (batch, training) services borrow free GPUs and the GPUs of sleeping replicas; serving
    takes them back by preemption. Both costs are 0 without the key, so a scenario without it scores
    as before tiers existed."""

    checkpoint_s: int = 0
    """Grace a preempted best-effort pod gets to checkpoint before its GPU is free (s, whole): a
    serving replica that reclaims the GPU starts (or wakes) that much later."""
    restart_gpu_s: float = 0.0
    """Work a preemption costs the job, per GPU taken (GPU-seconds): its restart plus the progress
    since its last checkpoint. Subtracted from the best-effort GPU-hours done."""



def parse_lending(raw: Any, source: str) -> LendingSettings:
    """``lending: {checkpoint_s: 30, restart_gpu_s: 120}`` (both optional, default 0)."""
    d = known_keys(source, "lending", raw or {}, ("checkpoint_s", "restart_gpu_s"),
                   "write lending: {checkpoint_s: 30, restart_gpu_s: 120}")
    return LendingSettings(
        checkpoint_s=whole_number(source, "lending.checkpoint_s", d.get("checkpoint_s", 0), 0, 3600,
                                  fix="the seconds a preempted job needs to checkpoint, e.g. checkpoint_s: 30"),
        restart_gpu_s=finite_value(source, "lending.restart_gpu_s", d.get("restart_gpu_s", 0.0), 0.0, 86400.0,
                                   fix="GPU-seconds of work a preemption loses, e.g. restart_gpu_s: 120"))


def parse_service_tier(raw: Any, where: str, source: str, online: bool, *,
                       asleep_only: str = "cluster mode models the asleep tier only") -> SleepTier | None:
    """A service's or a fleet workload's ``tier:`` text (the simulator's ``--tier`` syntax): asleep
    tiers of online services only (``asleep_only`` says why in the refusal of another kind)."""
    if raw is None:
        return None
    if not online:
        raise config_error(source, where, "a batch service (demand:) has no tier", "drop tier: from it")
    if not isinstance(raw, str):
        raise config_error(source, where, f"expected text, got {describe(raw)}", "write tier: asleep:wake_s=2,max=8")
    try:
        tier = parse_tier(raw)
    except ConfigError as e:
        raise config_error(source, where, str(e), "write tier: asleep:wake_s=2,max=8,ttl_s=1800") from None
    if tier.kind != "asleep":
        raise config_error(source, where, f"{asleep_only}, got {tier.kind}",
                           "write tier: asleep:wake_s=2,max=8 (snapshots: ebb simulate --tier on one workload)")
    return tier
