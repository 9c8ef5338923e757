"""Bursts and triggers in a recorded CSV (``ebb bursts``), found by the L1 code replaying it.

The CSV (:mod:`ebb.analysis.csv_series`) is replayed in time order through a
:class:`~ebb.window.sliding.SlidingWindow` (``window_ms`` split into ``bucket_ms`` buckets); at every
bucket boundary the windowed quantile is compared with the threshold (less the sketch's 1 % relative
error, so the sketch never hides a true crossing); a burst is a stretch over threshold lasting at
least ``min_duration_ms`` (:func:`~ebb.decide.burst.detect_bursts` has the exact definition).
:func:`evaluate_trigger_csv` replays each rule's column through the same window as its own quantile
and asks :func:`~ebb.decide.triggers.evaluate_trigger` whether the trigger fires at the last sample.

Limits, checked before any replay (each a :class:`~ebb.errors.ConfigError` naming the flag and the
setting that fits): at most :data:`MAX_WINDOW_BUCKETS` buckets in a window and :data:`MAX_STEPS`
evaluation steps in one replay.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ebb.analysis.csv_series import read_series
from ebb.config.triggers import Trigger
from ebb.decide.burst import Burst, detect_bursts
from ebb.decide.triggers import TriggerResult, evaluate_trigger
from ebb.errors import ConfigError
from ebb.window.sliding import SlidingWindow
from ebb.window.stream import windowed_quantiles

__all__ = ["MAX_STEPS", "MAX_WINDOW_BUCKETS", "burst_window", "evaluate_trigger_csv", "find_bursts"]

MAX_WINDOW_BUCKETS = 10_000
"""Most buckets one window may hold (``--window-ms / --bucket-ms``). The sliding window keeps one ring
slot per bucket; 10,000 is 100 times the validated 1000/100 ms setting and already a 10 µs bucket
in a 100 ms window, finer than any sampler this reads (NVML's fastest is about 1 ms)."""

MAX_STEPS = 1_000_000
"""Most evaluation steps (bucket boundaries from the first sample to the last) one replay may take.
The replay loops once per bucket at about 100 µs a step, so the cap is about 2 minutes: one day of
data at 100 ms buckets (864,000 steps) fits; 30 days of 300 s samples at 100 ms (26 million steps,
most of them empty) is refused with the --bucket-ms that fits instead of running for an hour."""


def find_bursts(
    t_s: np.ndarray, value: np.ndarray, *, threshold: float, min_duration_ms: float,
    quantile: float = 0.99, window_ms: float = 1000.0, bucket_ms: float = 100.0,
) -> list[Burst]:
    """Replay one series through the sliding window and detect bursts (pure apart from numpy)."""
    window = burst_window(window_ms, bucket_ms)
    if not 0.0 <= quantile <= 1.0:
        raise ConfigError(f"--quantile {quantile:g} must be in [0, 1] (fix: e.g. --quantile 0.99)")
    if not (min_duration_ms >= 0 and math.isfinite(min_duration_ms)):
        raise ConfigError(f"--min-duration-ms {min_duration_ms:g} must be a finite number >= 0 "
                          "(fix: e.g. --min-duration-ms 200)")
    if not math.isfinite(threshold):
        raise ConfigError(f"--threshold {threshold!r}: must be a finite number (fix: e.g. --threshold 55)")
    _check_steps(t_s, bucket_ms, window_ms)
    ts_ns = np.round(t_s * 1e9).astype(np.int64)
    times, qs = windowed_quantiles(window, np.zeros(len(ts_ns), dtype=np.int64), value, ts_ns, quantile)
    return detect_bursts(times / 1e9, qs, threshold, min_duration_ms, rel_tolerance=window.mapping.alpha)


def burst_window(window_ms: float, bucket_ms: float) -> SlidingWindow:
    """The sliding window of ``window_ms`` in ``bucket_ms`` buckets; ConfigError naming the flag when
    either is not a finite number > 0, the window is not a whole number of buckets, or it holds more
    than :data:`MAX_WINDOW_BUCKETS` buckets."""
    for flag, value in (("--bucket-ms", bucket_ms), ("--window-ms", window_ms)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{flag} {value!r}: must be a finite number > 0 "
                              "(fix: e.g. --window-ms 1000 --bucket-ms 100)")
    n_buckets = window_ms / bucket_ms
    if n_buckets > MAX_WINDOW_BUCKETS:
        raise ConfigError(
            f"--window-ms {window_ms:g} / --bucket-ms {bucket_ms:g} is {n_buckets:,.0f} buckets, more than the "
            f"{MAX_WINDOW_BUCKETS:,} a window holds (fix: a --bucket-ms of at least "
            f"{window_ms / MAX_WINDOW_BUCKETS:g}, e.g. --window-ms 1000 --bucket-ms 100)")
    if n_buckets < 1 or abs(n_buckets - round(n_buckets)) > 1e-9 or round(bucket_ms * 1e6) < 1:
        raise ConfigError(
            f"--window-ms {window_ms:g} must be a positive multiple of --bucket-ms {bucket_ms:g} "
            "(fix: e.g. --window-ms 1000 --bucket-ms 100)"
        )
    return SlidingWindow(1, buckets=int(round(n_buckets)), bucket_ms=bucket_ms)


def _check_steps(t_s: np.ndarray, bucket_ms: float, window_ms: float) -> None:
    """Refuse a replay of more than :data:`MAX_STEPS` buckets before starting it (it loops per bucket)."""
    if not len(t_s):
        return
    span_ms = (float(np.max(t_s)) - float(np.min(t_s))) * 1000.0
    steps = span_ms / bucket_ms + 1
    if steps > MAX_STEPS:
        need = span_ms / (MAX_STEPS - 1)
        raise ConfigError(
            f"--bucket-ms {bucket_ms:g} over {span_ms / 1000:,.0f} s of data is {steps:,.0f} evaluation steps, "
            f"more than the {MAX_STEPS:,} one replay takes (about 100 µs each) (fix: a --bucket-ms of at least "
            f"{math.ceil(need) if need >= 1 else need:,.3g} with a --window-ms that is a multiple of it (now {window_ms:g}), or a shorter stretch "
            "of the CSV)")


def evaluate_trigger_csv(path: Path, trigger: Trigger, *, time_col: str = "t", window_ms: float = 1000.0,
                         bucket_ms: float = 100.0) -> TriggerResult:
    """Each rule's windowed quantile over its column of ``path``, then the trigger at the last sample.

    A signal missing from the CSV raises InputError naming it (the user asked for it).
    """
    quantiles = {(r.signal, r.quantile) for r in trigger.rules}
    if len(quantiles) != len({s for s, _ in quantiles}):
        # evaluate_trigger takes one stream per signal: two quantiles of one signal would need two.
        raise ConfigError(f"trigger {trigger.name!r}: rules on one signal use different quantiles "
                          "(fix: give every rule on a signal the same quantile)")
    quantile_of = dict(quantiles)
    # One pass over the file for every signal the rules name.
    t_s, values = read_series(path, time_col, {
        s: f"make each rule's signal in trigger {trigger.name!r} one of those names" for s in quantile_of})
    _check_steps(t_s, bucket_ms, window_ms)
    ts_ns = np.round(t_s * 1e9).astype(np.int64)
    bins = np.zeros(len(ts_ns), dtype=np.int64)
    streams: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for signal, q in quantile_of.items():
        times, qs = windowed_quantiles(burst_window(window_ms, bucket_ms), bins, values[signal], ts_ns, q)
        streams[signal] = (times / 1e9, qs[:, 0])  # one series: column 0 of (T, 1)
    return evaluate_trigger(trigger, streams)
