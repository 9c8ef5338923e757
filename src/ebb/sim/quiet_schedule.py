"""The request engine's own order of fine samples and reconciles over a stretch with no event in it.

The request engine's loop takes fine samples every ``fine_dt`` (a running sum of 0.1 s steps, so
their times drift from the reconciles' whole seconds) and reconciles every ``interval_s``; at equal
times a sample comes first. A sample within a microsecond of a reconcile is not the fast path's: one
at or just before the reconcile is that reconcile's own sample, one just after it waits for the next
fast-path call, which then takes two. :func:`quiet_schedule` replays that order for a stretch, so the
engine can hand its samples to the policy at once (:class:`~ebb.decide.base.QuietStretches`) and
still run each reconcile at its turn. Pure: floats in, lists out; the same float additions as the loop.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NEAR_S", "QuietSchedule", "between", "quiet_schedule"]

NEAR_S = 1e-6
"""A sample this close to a reconcile is not the fast path's (the loop's test)."""


@dataclass(frozen=True)
class QuietSchedule:
    """Samples and reconciles of a stretch, in the loop's order."""

    times_s: list[float]
    """Fine sample times, increasing."""
    reacts: list[bool]
    """Per sample: the fast path's (True) or the next reconcile's own (False)."""
    cuts: list[int]
    """Per reconcile: how many samples come before it."""
    ticks_s: list[float]
    """Reconcile times."""
    next_sample_s: float
    """The first sample after the schedule (the loop's next)."""
    next_tick_s: float
    """The first reconcile after the schedule."""
    two_ahead: bool
    """Whether it ends at a sample just past a reconcile (the next fast-path call takes two)."""


def between(t: float, tick: float, interval_s: float) -> bool:
    """Whether the sample at ``t`` is the fast path's: not within :data:`NEAR_S` of the reconcile
    due at ``tick`` nor of the one just past (``tick − interval_s``)."""
    return abs(t - tick) > NEAR_S and abs(t - tick + interval_s) > NEAR_S


def quiet_schedule(t0: float, tick: float, interval_s: float, dt_s: float, stop_s: float, horizon_s: float,
                   max_samples: int) -> QuietSchedule:
    """The samples from ``t0`` (every ``dt_s``) and reconciles from ``tick`` (every ``interval_s``)
    before ``stop_s`` and not past ``horizon_s``, in the loop's order, through ``max_samples``
    samples and before a sample just past a reconcile."""
    times: list[float] = []
    reacts: list[bool] = []
    cuts: list[int] = []
    ticks: list[float] = []
    t, two = t0, False
    while len(times) < max_samples:
        if t <= tick:  # a sample first at equal times
            if t >= stop_s or t > horizon_s:
                break
            if between(t, tick, interval_s):
                reacts.append(True)
            elif abs(t - tick) <= NEAR_S:
                reacts.append(False)  # the reconcile's own sample
            else:
                two = True
                break
            times.append(t)
            t += dt_s
        else:
            if tick >= stop_s or tick > horizon_s:
                break
            cuts.append(len(times))
            ticks.append(tick)
            tick += interval_s
    return QuietSchedule(times, reacts, cuts, ticks, t, tick, two)
