"""A quiet stretch planned at once (ebb.decide.quiet_stretch): react's answers, sample by sample, known ahead."""

from __future__ import annotations

import numpy as np
from test_ebb_policy import fine, observe, pod, policy

from ebb.decide.policy import EbbPolicy
from ebb.model.observation import FineSignals, Observation


def _warmed() -> EbbPolicy:
    pol = policy()
    pods = [pod(i) for i in range(4)]
    for t in range(1, 21):
        pol.decide(observe(float(t), pods, fine(t, 1.5)))
    return pol


def _times(t0: float, n: int) -> list[float]:
    return [t0 + 0.1 * k for k in range(1, n + 1)]


def test_no_stretch_is_planned_before_the_first_reconcile() -> None:
    assert policy().quiet_stretch(_times(0.0, 20), [True] * 20, [0.0] * 20, [1.0] * 20, [0.0] * 20, 4, 4) is None


def test_the_first_sample_react_would_scale_up_on_ends_the_quiet_part() -> None:
    # 12 replicas of demand on a ready fleet of 4: the need outgrows it within a few samples.
    times = _times(20.0, 30)
    planned = _warmed().quiet_stretch(times, [True] * 30, [0.0] * 30, [12.0] * 30, [0.0] * 30, 4, 4)
    assert planned is not None and 0 < planned.quiet < 30
    one = _warmed()
    answers = [one.react(Observation(t, 4, 4, (), None, None, None,
                                     FineSignals(np.array([t]), np.zeros(1), np.array([12.0]), np.zeros(1))))
               for t in times[:planned.quiet + 1]]
    assert all(a is None for a in answers[:-1]) and answers[-1] is not None
    assert answers[-1].to_replicas > 4


def test_a_steady_fleet_is_quiet_throughout_and_its_samples_are_taken_in_order() -> None:
    pol = _warmed()
    times = _times(20.0, 30)
    planned = pol.quiet_stretch(times, [True] * 30, [0.0] * 30, [1.5] * 30, [0.0] * 30, 4, 4)
    assert planned is not None and planned.quiet == 30
    assert planned.take(12) and pol.state.last_signal_t == times[11]
    assert planned.take(30) and pol.state.last_signal_t == times[29]


def test_a_capacity_learned_after_the_plan_voids_the_rest() -> None:
    pol = _warmed()
    planned = pol.quiet_stretch(_times(20.0, 30), [True] * 30, [0.0] * 30, [1.5] * 30, [0.0] * 30, 4, 4)
    assert planned is not None and planned.take(10)
    pol.state.capacity = 0.5  # a decide between the samples learned it: react's test read the old one
    assert not planned.take(20)
    assert pol.state.last_signal_t < 21.05  # nothing past the 10th sample was taken
