"""Should we switch? The shadow report's arithmetic: a fleet as it ran against Ebb's own beside it.

Input: the run's shadow minutes (:mod:`ebb.model.shadow`, one ledger row a minute written by
``ebb run --mode recommend``) and its recorded decisions (their reasons explain the disagreements).
Output: one :class:`ShadowReport`, verdict first. Pure: no I/O.

Definitions (every figure is over the **compared seconds**: those whose minute row holds both the
real fleet's replicas and Ebb's):

* **GPU-hours** as run / as Ebb would have run: the integral of each replica curve over the compared
  seconds, times ``gpus_per_replica``, in hours (one second at ``n`` replicas is ``n`` replica-seconds).
* **Saving**: ``1 − Ebb / as run`` of those GPU-hours (negative when Ebb would have run more).
* **Agreement**: the share of compared seconds at which Ebb held exactly the replicas the fleet ran, in [0, 1].
* **Risk minutes**: minutes holding a compared second at which Ebb held fewer replicas than the fleet
  while the minute's observed TTFT p99 (over all its completions) was at least ``near × SLO``: where
  the fleet that really served was close to missing its SLO, a smaller one would likely have missed
  it. Risk seconds are the same second by second (the second's own p99). A minute can be a risk
  minute only where Ebb ran below the fleet.
* **Disagreements**: maximal runs of consecutive compared seconds at which Ebb differed from the fleet,
  weighed by their replica-seconds of difference; the :data:`TOP` (5) largest are listed with the
  decisions that explain them (Ebb's last recorded decision at or before the run's start, then the
  ones within it) and the fleet's own change when the run began with one.

Two rows covering one second (two controllers of a run, one after the other) merge: a value a later row
holds replaces an earlier one; a minute's TTFT p99 is the larger of its rows'.

Verdict (:attr:`ShadowReport.verdict`), in this order:

1. **Do not switch** when risk minutes exceed :data:`MAX_RISK_SHARE` (1 %) of the compared minutes, or
   Ebb would have saved less than :data:`MIN_SAVING` (5 %) of the GPU-hours;
2. **Keep watching** when less than :data:`MIN_OBSERVED_S` (a day) was compared: a day's cycle is the
   least evidence a switch should rest on (a week shows the weekly one);
3. **Switch** otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from ebb.errors import InputError
from ebb.model.decisions import DecisionRecord
from ebb.model.shadow import SLOTS, ShadowMinute
from ebb.score.units import plural

__all__ = ["MAX_RISK_SHARE", "MIN_OBSERVED_S", "MIN_SAVING", "TOP", "Disagreement", "ShadowReport",
           "ShadowSeries", "merged_series", "saving_text", "shadow_report", "utc_stamp"]

FloatArray = npt.NDArray[np.float64]
MAX_RISK_SHARE: Final = 0.01
"""Risk minutes above this share of the compared minutes: do not switch."""
MIN_SAVING: Final = 0.05
"""A switch should save at least this share of the GPU-hours."""
MIN_OBSERVED_S: Final = 86_400
"""Compared seconds below which the verdict is "keep watching" (a day)."""
TOP: Final = 5
"""Disagreements listed."""
_REASON_CHARS: Final = 200
Kind = Literal["switch", "keep watching", "do not switch"]


@dataclass(frozen=True)
class ShadowSeries:
    """The merged per-second timeline from ``start_s`` (Unix s): NaN where unknown."""

    start_s: int
    as_run: FloatArray
    ebb: FloatArray
    ttft_p99_ms: FloatArray
    minute_ttft_p99_ms: FloatArray
    """One value per minute from ``start_s`` (NaN: no completion, or no row)."""

    @property
    def compared(self) -> npt.NDArray[np.bool_]:
        """Seconds holding both replica counts."""
        return ~(np.isnan(self.as_run) | np.isnan(self.ebb))


def merged_series(minutes: Sequence[ShadowMinute]) -> ShadowSeries:
    """The rows' seconds on one timeline (module docstring: merging). ``minutes`` must not be empty."""
    rows = sorted(minutes, key=lambda m: (m.start_s, m.first_slot))
    start = rows[0].start_s
    n_min = (rows[-1].start_s - start) // SLOTS + 1
    as_run, ebb, ttft = (np.full(n_min * SLOTS, np.nan) for _ in range(3))
    minute = np.full(n_min, np.nan)
    for m in rows:
        k = (m.start_s - start) // SLOTS
        sl = slice(k * SLOTS, (k + 1) * SLOTS)
        for dest, values in ((as_run, m.as_run), (ebb, m.ebb), (ttft, m.ttft_p99_ms)):
            v = np.array([np.nan if x is None else float(x) for x in values])
            dest[sl] = np.where(np.isnan(v), dest[sl], v)
        if m.minute_ttft_p99_ms is not None:
            minute[k] = np.fmax(minute[k], m.minute_ttft_p99_ms)
    return ShadowSeries(start, as_run, ebb, ttft, minute)


@dataclass(frozen=True)
class Disagreement:
    """A run of consecutive compared seconds at which Ebb differed from the fleet (module docstring)."""

    start_s: int
    seconds: int
    as_run: tuple[int, int]
    """The fleet's fewest and most replicas over the run."""
    ebb: tuple[int, int]
    """Ebb's fewest and most replicas over the run."""
    replica_s: float
    """Σ |Ebb − as run| over the run (replica-seconds)."""
    lower: bool
    """Whether Ebb ran fewer replicas than the fleet (over most of the run's replica-seconds)."""
    risk_seconds: int
    why: tuple[str, ...]
    """The decisions and the fleet change that explain it, one line each (may be empty)."""


@dataclass(frozen=True)
class ShadowReport:
    """What ``ebb shadow report`` prints (module docstring: definitions and verdict)."""

    kind: Kind
    verdict: str
    series: ShadowSeries
    slo_ttft_ms: float
    near: float
    gpus_per_replica: float
    compared_s: int
    span_s: int
    as_run_gpu_h: float
    ebb_gpu_h: float
    saving: float
    """``1 − ebb / as run`` GPU-hours; NaN when the fleet ran none."""
    agreement: float
    lower_share: float
    """Share of compared seconds at which Ebb ran fewer replicas than the fleet."""
    higher_share: float
    risk_minutes: int
    compared_minutes: int
    risk_seconds: int
    risk_minute_starts: tuple[int, ...]
    """Unix second each risk minute starts at."""
    disagreements: tuple[Disagreement, ...]
    policy: str
    target: str


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 2 * 86_400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86_400:.1f} d"


def utc_stamp(unix_s: float) -> str:
    """``2025-01-31 12:03:04 UTC``."""
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def saving_text(saving: float) -> str:
    """``31.2 % fewer``, ``4.0 % more`` or ``an unknown share`` (no GPU-hours as run)."""
    if math.isnan(saving):
        return "an unknown share"
    return f"{abs(saving):.1%} {'more' if saving < 0 else 'fewer'}"


def _verdict(saving: float, risk_min: int, minutes: int, compared_s: int, near: float, slo: float,
             as_run_h: float, ebb_h: float) -> tuple[Kind, str]:
    share = risk_min / minutes if minutes else 0.0
    risks = f"{risk_min:,} risk minute{'s' if risk_min != 1 else ''}"
    if share > MAX_RISK_SHARE:
        return "do not switch", (f"Do not switch: Ebb would have held fewer replicas than your fleet in {risks} of "
                                 f"{minutes:,} ({share:.1%}) while the observed TTFT p99 was at least "
                                 f"{near:g} × the {slo:g} ms SLO, over the {MAX_RISK_SHARE:.0%} a switch may risk.")
    if not saving >= MIN_SAVING:
        more = "more" if saving < 0 else "fewer"
        pct = "an unknown share of" if math.isnan(saving) else f"{abs(saving):.0%} {more}"
        return "do not switch", (f"Do not switch: Ebb would have used {pct} GPU-hours than your fleet did "
                                 f"({ebb_h:,.2f} against {as_run_h:,.2f}), under the {MIN_SAVING:.0%} a switch "
                                 "should save.")
    gain = f"Ebb would have used {saving:.0%} fewer GPU-hours than your fleet did, with {risks}"
    if compared_s < MIN_OBSERVED_S:
        return "keep watching", (f"Keep watching: {gain}, but over only {_duration(compared_s)} compared; a "
                                 "verdict needs a day of it (a week shows the weekly cycle).")
    return "switch", f"Switch: {gain} in {_duration(compared_s)} compared."


def _why(d_start: int, end: int, series: ShadowSeries, decisions: Sequence[DecisionRecord]) -> tuple[str, ...]:
    """Ebb's last decision at or before ``d_start``, those within the run, and the fleet's change at its start."""
    lines = []
    i = d_start - series.start_s
    before = series.as_run[i - 1] if i > 0 else math.nan
    if np.isfinite(before) and before != series.as_run[i]:
        lines.append(f"your fleet went {before:.0f} → {series.as_run[i]:.0f} at {utc_stamp(d_start)}")
    lo_ns, hi_ns = d_start * 1_000_000_000, (end + 1) * 1_000_000_000
    moved = [d for d in decisions if d.action in ("scale_up", "scale_down")]
    last = [d for d in moved if d.ts_ns <= lo_ns + 999_999_999][-1:]
    inside = [d for d in moved if lo_ns + 999_999_999 < d.ts_ns < hi_ns]
    shown = last + inside[:2]
    for d in shown:
        reason = "; ".join(d.reasons + d.vetoes) or "no reason recorded"
        reason = reason if len(reason) <= _REASON_CHARS else reason[:_REASON_CHARS - 1] + "…"
        lines.append(f"{d.decision_id} {d.action} {d.from_replicas} → {d.to_replicas} at "
                     f"{utc_stamp(d.ts_ns / 1e9)}: {reason}")
    if len(inside) > 2:
        lines.append(f"… and {plural(len(inside) - 2, 'more decision')} within it")
    return tuple(lines)


def _disagreements(series: ShadowSeries, risky: npt.NDArray[np.bool_],
                   decisions: Sequence[DecisionRecord]) -> tuple[Disagreement, ...]:
    differ = series.compared & (series.as_run != series.ebb)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], differ.astype(np.int8), [0]])))
    runs = []
    for a, b in zip(edges[0::2], edges[1::2], strict=True):
        diff = series.ebb[a:b] - series.as_run[a:b]
        runs.append((float(np.abs(diff).sum()), int(a), int(b), float(diff.sum())))
    runs.sort(key=lambda r: (-r[0], r[1]))
    out = []
    for weight, a, b, signed in runs[:TOP]:
        start = series.start_s + a
        out.append(Disagreement(
            start_s=start, seconds=b - a,
            as_run=(int(series.as_run[a:b].min()), int(series.as_run[a:b].max())),
            ebb=(int(series.ebb[a:b].min()), int(series.ebb[a:b].max())), replica_s=weight, lower=signed < 0,
            risk_seconds=int(risky[a:b].sum()), why=_why(start, series.start_s + b - 1, series, decisions)))
    return tuple(out)


def shadow_report(minutes: Sequence[ShadowMinute], decisions: Sequence[DecisionRecord] = (), *,
                  slo_ttft_ms: float | None = None, near: float = 0.8, gpus_per_replica: float = 1.0) -> ShadowReport:
    """The report over ``minutes`` (module docstring). ``slo_ttft_ms`` None: the SLO the last row was
    recorded under. :class:`~ebb.errors.InputError` when no second holds both replica counts."""
    if not (math.isfinite(near) and 0 < near <= 1):
        raise InputError(f"--near {near!r}: must be within (0, 1] (fix: e.g. --near 0.8, 80 % of the SLO)")
    if not (math.isfinite(gpus_per_replica) and gpus_per_replica > 0):
        raise InputError(f"--gpus-per-replica {gpus_per_replica!r}: must be a number > 0 (fix: e.g. 1)")
    if slo_ttft_ms is not None and not (math.isfinite(slo_ttft_ms) and slo_ttft_ms > 0):
        raise InputError(f"--slo-ttft-ms {slo_ttft_ms!r}: must be a number > 0 (fix: e.g. --slo-ttft-ms 2000)")
    if not minutes:
        raise InputError("no shadow rows to report on", fix="run ebb run --mode recommend for a while first")
    series = merged_series(minutes)
    cmp = series.compared
    compared_s = int(cmp.sum())
    if compared_s == 0:
        raise InputError("the shadow rows hold no second with both your fleet's replicas and Ebb's",
                         fix="let ebb run --mode recommend lead for a while (a follower records no Ebb values)")
    last = max(minutes, key=lambda m: m.start_s)
    slo = last.slo_ttft_ms if slo_ttft_ms is None else slo_ttft_ms
    run, ebb = np.where(cmp, series.as_run, 0.0), np.where(cmp, series.ebb, 0.0)
    as_run_h = float(run.sum()) * gpus_per_replica / 3600.0
    ebb_h = float(ebb.sum()) * gpus_per_replica / 3600.0
    saving = 1.0 - ebb_h / as_run_h if as_run_h > 0 else math.nan
    lower = cmp & (series.ebb < series.as_run)
    per_minute_lower = lower.reshape(-1, SLOTS).any(axis=1)
    hot_minute = np.nan_to_num(series.minute_ttft_p99_ms, nan=-1.0) >= near * slo
    risk_minutes = per_minute_lower & hot_minute
    risky = lower & (np.nan_to_num(series.ttft_p99_ms, nan=-1.0) >= near * slo)
    n_minutes = int(cmp.reshape(-1, SLOTS).any(axis=1).sum())
    kind, text = _verdict(saving, int(risk_minutes.sum()), n_minutes, compared_s, near, slo, as_run_h, ebb_h)
    return ShadowReport(
        kind=kind, verdict=text, series=series, slo_ttft_ms=slo, near=near, gpus_per_replica=gpus_per_replica,
        compared_s=compared_s, span_s=int(len(cmp)), as_run_gpu_h=as_run_h, ebb_gpu_h=ebb_h, saving=saving,
        agreement=float((cmp & (series.as_run == series.ebb)).sum()) / compared_s,
        lower_share=float(lower.sum()) / compared_s,
        higher_share=float((cmp & (series.ebb > series.as_run)).sum()) / compared_s,
        risk_minutes=int(risk_minutes.sum()), compared_minutes=n_minutes, risk_seconds=int(risky.sum()),
        risk_minute_starts=tuple(int(series.start_s + SLOTS * k) for k in np.flatnonzero(risk_minutes)),
        disagreements=_disagreements(series, risky, sorted(decisions, key=lambda d: (d.ts_ns, d.decision_id))),
        policy=last.policy, target=last.target)
