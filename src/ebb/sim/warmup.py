"""Warm-up: the first S seconds of a run feed every policy's memory but are not judged or billed.

``ebb simulate --warmup-s S`` (``warmup_s`` in a sweep's knobs and in a cluster scenario) replays
the whole trace through every policy, peer, the static fleet and the oracle, as without a warm-up;
only the scorecard changes. It counts

* requests arriving at ``t >= S`` (request fidelity) and fluid bins starting at ``t >= S`` (a bin
  that straddles S is left out whole): violations, latency percentiles, dropped, breach episodes;
* replica-seconds billed from S to the end of the run (GPU-hours, cost, mean replicas), the most
  replicas billed at once from S on, and scale decisions taken at ``t >= S`` (ups/downs, misjudged
  scale-downs; :class:`~ebb.sim.fleet.FleetLog`'s ``from_s`` arguments).

The oracle's search judges the same span (its SLO is met on what is scored); the ``--peak-replicas``
calibration still measures the whole trace. S = 0 scores the whole run, figure for figure as before.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ebb.errors import ConfigError

__all__ = ["check_warmup", "scored_arrivals", "scored_bins"]

BoolArray = npt.NDArray[np.bool_]
_BIN_EPS = 1e-9
"""Tolerance (in bins) when a warm-up ends on a bin edge: S = 0.3 s with 0.1 s bins scores from bin 3."""


def check_warmup(warmup_s: float, duration_s: float, *, flag: str = "--warmup-s") -> None:
    """Refuse a warm-up that leaves nothing of a ``duration_s``-long trace to score (a negative one is
    refused where it is read: the settings, the sweep's knobs, the scenario file)."""
    if warmup_s > 0 and warmup_s >= duration_s:
        raise ConfigError(f"{flag} {warmup_s:g}: the trace lasts {duration_s:,.0f} s, so nothing would be scored "
                          f"(fix: a {flag} below {duration_s:g}, e.g. {flag} {_example(duration_s)})")


def _example(duration_s: float) -> str:
    """A warm-up that leaves most of the trace scored: a quarter of it, in whole seconds where it can."""
    quarter = duration_s / 4.0
    return f"{int(quarter)}" if quarter >= 1 else f"{quarter:.3g}"


def scored_arrivals(arrival_s: npt.NDArray[np.float64], warmup_s: float) -> BoolArray:
    """Which requests are judged: those arriving at or after ``warmup_s`` (all of them at 0)."""
    return np.asarray(arrival_s >= warmup_s, dtype=np.bool_)


def scored_bins(n_bins: int, bin_s: float, warmup_s: float) -> BoolArray:
    """Which of ``n_bins`` bins of ``bin_s`` seconds are judged: those starting at or after ``warmup_s``."""
    first = int(np.ceil(warmup_s / bin_s - _BIN_EPS)) if warmup_s > 0 else 0
    return np.asarray(np.arange(n_bins) >= first, dtype=np.bool_)
