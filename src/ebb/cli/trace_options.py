"""``ebb simulate``'s trace-reading and service-time flags, validated before any work.

Flags: ``--no-header``, ``--service-time-column NAME|INDEX|END-START``, ``--service-median-s``,
``--service-p99-s``, ``--concurrency``, ``--servegen-client ID[,ID...]``, ``--window-s START:END``.
They are the ``input:`` section's (:class:`~ebb.config.simulate_settings.TraceInputSettings`); these
checks need the simulator's service model and the trace's header, so they run here, not in the
settings. Every bad value is a :class:`~ebb.errors.ConfigError` naming the flag, the value and the fix
(one line, exit 2), raised by :func:`check_trace_flags` before the trace is read, or by
:meth:`TraceFlags.after_load` right after it (when only the trace can tell, e.g. a service model
without service times).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ebb.cli import checks
from ebb.config.simulate_settings import TraceInputSettings
from ebb.errors import ConfigError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.model.trace_ops import window
from ebb.sim.service_time import MAX_CONCURRENCY, ServiceTimeModel
from ebb.sources.traces import check_columns

_SERVICE_FIX = ("give the trace's service-time column (--service-time-column exec_time_seconds, or "
                "finished-admitted) or a fitted distribution (--service-median-s 2 --service-p99-s 8)")


@dataclass(frozen=True)
class TraceFlags:
    """The validated flags: the service model (None = the LLM model), ServeGen clients, the window."""

    model: ServiceTimeModel | None
    clients: tuple[int, ...] | None
    window_s: tuple[float, float] | None

    def after_load(self, trace: RequestTrace | CountSeries) -> RequestTrace | CountSeries:
        """The trace cut to ``--window-s``; a service model needs service times from the trace or the flags."""
        if self.window_s is not None:
            lo, hi = self.window_s
            trace = window(trace, lo, min(hi, max(lo, trace.duration_s + 1.0)))
            if trace.requests == 0:
                raise ConfigError(f"--window-s {lo:g}:{hi:g}: no request of the trace falls in this window "
                                  "(fix: choose a window inside the trace)")
        has_column = isinstance(trace, RequestTrace) and trace.service_s is not None
        if self.model is not None and self.model.median_s is None and not has_column:
            raise ConfigError(f"the service-time model needs service times, and {trace.source or trace.name} "
                              f"has none (fix: {_SERVICE_FIX})")
        return trace


def _window(text: str) -> tuple[float, float]:
    lo_s, sep, hi_s = text.partition(":")
    try:
        lo, hi = float(lo_s), float(hi_s)
    except ValueError:
        lo = hi = math.nan
    if not sep or not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo < hi):
        raise ConfigError(f"--window-s {text!r}: expected START:END seconds with 0 <= START < END "
                          "(fix: e.g. --window-s 0:600)")
    return lo, hi


def _clients(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(c) for c in text.split(","))
    except ValueError:
        ids = ()
    if not ids or any(c < 0 for c in ids):
        raise ConfigError(f"--servegen-client {text!r}: expected client ids, e.g. --servegen-client 3 or 3,17 "
                          "(fix: use the <client> of the folder's chunk-<client>-trace.csv names)")
    return ids


def check_trace_flags(s: TraceInputSettings) -> TraceFlags:
    """Validate the flags (and, for a CSV file, that every column flag names a column of its first row)."""
    median_s, p99_s, concurrency = s.service_median_s, s.service_p99_s, s.concurrency
    if median_s is not None:
        checks.positive("--service-median-s", median_s, fix="e.g. --service-median-s 2")
    if p99_s is not None:
        if median_s is None:
            raise ConfigError(f"--service-p99-s {p99_s:g} needs --service-median-s (fix: give both, e.g. "
                              "--service-median-s 2 --service-p99-s 8)")
        checks.at_least("--service-p99-s", p99_s, median_s, fix="the p99 is at least the median, e.g. "
                        f"--service-p99-s {4 * median_s:g}")
    if concurrency is not None:
        checks.int_in_range("--concurrency", concurrency, 1, MAX_CONCURRENCY, fix="slots per replica, e.g. --concurrency 4")
    if s.service_time_column is not None and median_s is not None:
        raise ConfigError("--service-time-column and --service-median-s both give service times (fix: give one: "
                          "the column when the log has one, the distribution when it has not)")
    columns = {"--time-col": s.time_col, "--count-col": s.count_col, "--tokens-in-col": s.tokens_in_col,
               "--tokens-out-col": s.tokens_out_col, "--service-time-column": s.service_time_column}
    named = {flag: ref for flag, ref in columns.items() if ref is not None}
    if s.no_header and not named:
        raise ConfigError("--no-header needs columns named by 0-based index (fix: e.g. --no-header "
                          "--time-col 0 --service-time-column 1)")
    path = Path(s.trace)
    if named and s.format in ("auto", "csv") and path.is_file():
        check_columns(path, named, no_header=s.no_header)
    service = s.service_time_column is not None or median_s is not None or concurrency is not None
    model = ServiceTimeModel(concurrency or 1, median_s, p99_s) if service else None
    return TraceFlags(model, None if s.servegen_client is None else _clients(s.servegen_client),
                      None if s.window_s is None else _window(s.window_s))
