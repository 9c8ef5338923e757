"""Bursts and triggers in a recorded CSV (``ebb bursts``), found by the L1 code replaying it.

The CSV's columns (:mod:`ebb.analysis.csv_series`, read once) are replayed in time order through a
:class:`~ebb.window.sliding.SlidingWindow` (``window_ms`` split into ``bucket_ms`` buckets); at every
bucket boundary the windowed quantile is compared with the threshold (less the sketch's 1 % relative
error, so the sketch never hides a true crossing); a burst is a stretch over threshold lasting at
least ``min_duration_ms`` (:func:`~ebb.decide.burst.detect_bursts` has the exact definition).
:func:`evaluate_trigger_series` replays each rule's column (:func:`trigger_columns`) through the
same window as its own quantile and asks :func:`~ebb.decide.triggers.evaluate_trigger` whether the
trigger fires at the last sample.

Checks: :func:`check_burst_settings` checks every number before the CSV is read (one
:class:`~ebb.errors.ConfigError` naming the flag, the value and the fix), at most
:data:`MAX_WINDOW_BUCKETS` buckets in a window among them; once the data's span is known, a replay
of more than :data:`MAX_STEPS` evaluation steps is refused with the ``--bucket-ms`` that fits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ebb.config import settings_checks as checks
from ebb.config.triggers import Trigger
from ebb.decide.burst import Burst, detect_bursts
from ebb.decide.triggers import TriggerResult, evaluate_trigger
from ebb.errors import ConfigError
from ebb.window.sliding import SlidingWindow
from ebb.window.stream import windowed_quantiles

__all__ = ["MAX_STEPS", "MAX_WINDOW_BUCKETS", "burst_window", "check_burst_settings", "evaluate_trigger_series",
           "find_bursts", "trigger_columns"]

MAX_WINDOW_BUCKETS = 10_000
"""Most buckets one window may hold (``--window-ms / --bucket-ms``). The sliding window keeps one ring
slot per bucket; 10,000 is 100 times the validated 1000/100 ms setting and already a 10 µs bucket
in a 100 ms window, finer than any sampler this reads (NVML's fastest is about 1 ms)."""

MAX_STEPS = 1_000_000
"""Most evaluation steps (bucket boundaries from the first sample to the last) one replay may take.
The replay loops once per bucket at about 100 µs a step, so the cap is about 2 minutes: one day of
data at 100 ms buckets (864,000 steps) fits; 30 days of 300 s samples at 100 ms (26 million steps,
most of them empty) is refused with the --bucket-ms that fits instead of running for an hour."""

_WINDOW_FIX = "--window-ms 1000 --bucket-ms 100"


def check_burst_settings(*, window_ms: float, bucket_ms: float, quantile: float = 0.99, threshold: float | None = None,
                         min_duration_ms: float | None = None) -> None:
    """Check every ``ebb bursts`` number before any data is read.

    ``--bucket-ms`` and ``--window-ms`` finite and > 0, the window a whole number of buckets and at
    most :data:`MAX_WINDOW_BUCKETS` of them; ``--quantile`` within 0-1; ``--threshold`` finite;
    ``--min-duration-ms`` finite and >= 0 (the last two when given). Each refusal is one
    ConfigError naming the flag, the value and the fix (:mod:`ebb.config.settings_checks`).
    """
    _window_buckets(window_ms, bucket_ms)
    checks.in_range("--quantile", quantile, 0.0, 1.0, fix="e.g. --quantile 0.99")
    if threshold is not None:
        checks.finite("--threshold", threshold, fix="e.g. --threshold 55")
    if min_duration_ms is not None:
        checks.non_negative("--min-duration-ms", min_duration_ms, fix="e.g. --min-duration-ms 200")


def _window_buckets(window_ms: float, bucket_ms: float) -> int:
    """The buckets in a window: both lengths finite and > 0, a whole number of at most MAX_WINDOW_BUCKETS."""
    checks.positive("--bucket-ms", bucket_ms, fix=_WINDOW_FIX)
    checks.positive("--window-ms", window_ms, fix=_WINDOW_FIX)
    n_buckets = window_ms / bucket_ms
    if n_buckets > MAX_WINDOW_BUCKETS:
        raise ConfigError(
            f"--window-ms {window_ms:g} / --bucket-ms {bucket_ms:g} is {n_buckets:,.0f} buckets, more than the "
            f"{MAX_WINDOW_BUCKETS:,} a window holds (fix: a --bucket-ms of at least "
            f"{window_ms / MAX_WINDOW_BUCKETS:g}, e.g. {_WINDOW_FIX})")
    if n_buckets < 1 or abs(n_buckets - round(n_buckets)) > 1e-9 or round(bucket_ms * 1e6) < 1:
        raise ConfigError(f"--window-ms {window_ms:g} must be a positive multiple of --bucket-ms {bucket_ms:g} "
                          f"(fix: e.g. {_WINDOW_FIX})")
    return int(round(n_buckets))


def burst_window(window_ms: float, bucket_ms: float) -> SlidingWindow:
    """A fresh sliding window of ``window_ms`` in ``bucket_ms`` buckets (a replay fills it), the lengths
    checked as :func:`check_burst_settings` checks them."""
    return SlidingWindow(1, buckets=_window_buckets(window_ms, bucket_ms), bucket_ms=bucket_ms)


def find_bursts(
    t_s: np.ndarray, value: np.ndarray, *, threshold: float, min_duration_ms: float,
    quantile: float = 0.99, window_ms: float = 1000.0, bucket_ms: float = 100.0,
) -> list[Burst]:
    """Replay one series through the sliding window and detect bursts (pure apart from numpy)."""
    check_burst_settings(window_ms=window_ms, bucket_ms=bucket_ms, quantile=quantile, threshold=threshold,
                         min_duration_ms=min_duration_ms)
    window = burst_window(window_ms, bucket_ms)
    _check_steps(t_s, bucket_ms, window_ms)
    ts_ns = np.round(t_s * 1e9).astype(np.int64)
    times, qs = windowed_quantiles(window, np.zeros(len(ts_ns), dtype=np.int64), value, ts_ns, quantile)
    return detect_bursts(times / 1e9, qs, threshold, min_duration_ms, rel_tolerance=window.mapping.alpha)


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


def trigger_columns(trigger: Trigger) -> dict[str, str]:
    """The CSV columns ``trigger``'s rules read (one per signal), each with the fix when it is missing:
    what :func:`evaluate_trigger_series` needs. ConfigError when two rules on one signal differ in
    quantile (the evaluation takes one stream per signal)."""
    quantiles = {(r.signal, r.quantile) for r in trigger.rules}
    if len(quantiles) != len({s for s, _ in quantiles}):
        raise ConfigError(f"trigger {trigger.name!r}: rules on one signal use different quantiles "
                          "(fix: give every rule on a signal the same quantile)")
    return {s: f"make each rule's signal in trigger {trigger.name!r} one of those names" for s, _ in quantiles}


def evaluate_trigger_series(t_s: np.ndarray, values: Mapping[str, np.ndarray], trigger: Trigger, *,
                            window_ms: float = 1000.0, bucket_ms: float = 100.0) -> TriggerResult:
    """Each rule's windowed quantile over its column (``values``: :func:`trigger_columns`' columns, read
    with the times ``t_s``), then the trigger at the last sample."""
    trigger_columns(trigger)  # one quantile per signal
    quantile_of = {r.signal: r.quantile for r in trigger.rules}
    _check_steps(t_s, bucket_ms, window_ms)
    ts_ns = np.round(t_s * 1e9).astype(np.int64)
    bins = np.zeros(len(ts_ns), dtype=np.int64)
    streams: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for signal, q in quantile_of.items():  # a fresh window per signal: a replay fills it
        times, qs = windowed_quantiles(burst_window(window_ms, bucket_ms), bins, values[signal], ts_ns, q)
        streams[signal] = (times / 1e9, qs[:, 0])  # one series: column 0 of (T, 1)
    return evaluate_trigger(trigger, streams)
