"""Knative KPA's decider: one ``Scale`` tick as a pure function of the windows' values and its state.

Upstream: ``knative/serving`` @ ``98e5ef90aa7033797aa0a61ef97f3ff7e49a3944`` (knative-v1.23.0-5),
``pkg/autoscaler/scaling/autoscaler.go`` (``newAutoscaler``, ``Scale``). The excess-burst-capacity
output (which decides whether the activator stays in the request path) is not modelled: it never
changes the pod count. Ported upstream cases: ``tests/data/upstream/knative/autoscaler.json``.

Rules, as upstream (``ready`` = max(1, ready pods); ``target`` = per-pod target after utilisation):

* ``stable_pods = ceil(stable / target)``, ``panic_pods = ceil(panic / target)``, each clamped to
  ``[floor(ready / max_scale_down_rate), ceil(max_scale_up_rate · ready)]`` (the lower bound is 0
  for an unreachable revision).
* Panic starts (or is extended to ``now``) while ``panic_pods / ready ≥ panic_threshold``; it ends
  at the first tick not over the threshold more than ``stable_window_s`` after the last extension.
* In panic the answer is the highest ``max(stable, panic)`` count seen since panic began: **panic
  never scales down**. Out of panic it is ``stable_pods``.
* A scale-down delay keeps the maximum recommendation of the last ``scale_down_delay_s`` (2 s
  buckets, the tick).
* A new decider over more than one ready pod starts in panic at the current count, so a restart
  (or, here, switching the autoscaler on over a warm fleet) never drops pods before a window fills.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ebb.sim.peers.kpa_window import MaxWindow, max_window_current, max_window_record, time_window_index

TICK_S = 2.0
"""``tickInterval`` in ``pkg/autoscaler/scaling/multiscaler.go``: how often ``Scale`` runs."""


@dataclass(frozen=True)
class KpaSpec:
    """Knative's ``DeciderSpec`` fields the pod count depends on."""

    target_value: float
    """Per-pod target of the metric (concurrency × target utilisation), > 0."""
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    panic_threshold_ratio: float = 2.0
    """Panic when the panic-window pod count reaches this multiple of the ready pods (200 % → 2.0)."""
    stable_window_s: float = 60.0
    scale_down_delay_s: float = 0.0
    reachable: bool = True
    """Whether a route points at the revision; an unreachable one may drop to 0 at once."""
    activation_scale: int = 0
    """Minimum non-zero scale (``autoscaling.knative.dev/activation-scale``); ≤ 1 = off."""


@dataclass(frozen=True)
class KpaState:
    """What the decider remembers between ticks."""

    panic_time_s: float | None
    """Start or last extension of panic mode; None when stable."""
    max_panic_pods: int
    delay: MaxWindow | None = None
    """Scale-down-delay window; None when the decider was built without a delay."""


def kpa_initial_state(spec: KpaSpec, ready_pods: int | None, now_s: float) -> KpaState:
    """The state of a decider created at ``now_s`` over ``ready_pods`` (None: count failed → 0)."""
    cur = ready_pods if ready_pods is not None else 0
    return KpaState(panic_time_s=now_s if cur > 1 else None, max_panic_pods=cur,
                    delay=() if spec.scale_down_delay_s > 0 else None)


def kpa_scale(spec: KpaSpec, state: KpaState, observed: tuple[float, float] | None,
              ready_pods: int | None, now_s: float) -> tuple[int | None, KpaState]:
    """One ``Scale`` tick: the desired pod count (None = not valid, keep the scale) and the new state.

    ``observed`` is (stable-window, panic-window) average of the fleet-wide metric, None when the
    windows hold no data; ``ready_pods`` None means the pod count could not be read.
    """
    if observed is None or ready_pods is None:
        return None, state
    stable, panic = observed
    ready = max(1.0, float(ready_pods))
    max_up = math.ceil(spec.max_scale_up_rate * ready)
    max_down = math.floor(ready / spec.max_scale_down_rate) if spec.reachable else 0
    dspc = math.ceil(stable / spec.target_value)
    dppc = math.ceil(panic / spec.target_value)
    want_stable = int(min(max(dspc, max_down), max_up))
    want_panic = int(min(max(dppc, max_down), max_up))
    if spec.activation_scale > 1:
        if dspc > 0 and spec.activation_scale > want_stable:
            want_stable = spec.activation_scale
        if dppc > 0 and spec.activation_scale > want_panic:
            want_panic = spec.activation_scale

    over = dppc / ready >= spec.panic_threshold_ratio
    panic_time, max_panic = state.panic_time_s, state.max_panic_pods
    if over:
        panic_time = now_s  # enter, or extend
    elif panic_time is not None and panic_time + spec.stable_window_s < now_s:
        panic_time, max_panic = None, 0  # the surge has reached the stable window

    desired = want_stable
    if panic_time is not None:
        desired = max(desired, want_panic)
        max_panic = max(max_panic, desired)
        desired = max_panic  # panic never scales down

    delay = state.delay
    if spec.reachable and delay is not None:
        size = int(math.ceil(spec.scale_down_delay_s / TICK_S))
        delay = max_window_record(delay, size, time_window_index(now_s, TICK_S), desired)
        desired = max_window_current(delay)
    return desired, replace(state, panic_time_s=panic_time, max_panic_pods=max_panic, delay=delay)
