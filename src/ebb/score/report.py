"""Self-contained HTML report for ``ebb simulate``: scorecard table plus three inline SVG charts.

The file must open offline, be mailable and survive being archived next to a trace, so it has no
external resources: CSS is inline, charts are SVG generated here (see :mod:`ebb.score.svgplot`), and
tooltips are native SVG ``<title>`` elements rather than JavaScript. Long timelines are
downsampled peak-preserving before drawing so a multi-million-bin trace still yields a small file.
All user-controlled text (policy specs, trace names, settings) is HTML-escaped.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from ebb.errors import InputError
from ebb.score.frontier import frontier_ratios, render_frontier_svg
from ebb.score.results import FloatArray, PolicyRun, Scorecard
from ebb.score.svgplot import (
    PALETTE,
    LinearScale,
    LogScale,
    downsample_max,
    downsample_minmax,
    fmt_num,
    line_path,
    log_ticks,
    nice_ticks,
    step_area_path,
    step_path,
    time_unit,
)

__all__ = ["render_report", "write_report", "meets_slo", "MAX_POINTS", "SLO_VIOLATION_LIMIT_PCT"]

MAX_POINTS = 2000
"""Most points drawn per series; enough for a 960-px-wide chart (two per pixel column)."""
SLO_VIOLATION_LIMIT_PCT = 0.1
"""A policy meets the SLO when at most this percentage of requests violated it."""

_W, _H = 960, 300
_ML, _MR, _MT, _MB = 70, 70, 16, 44
_X0, _X1, _Y0, _Y1 = _ML, _W - _MR, _H - _MB, _MT  # plot area; y grows downward in SVG
_GREY = "#999999"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;
max-width:1000px;padding:0 16px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px}
.muted{color:#666}table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:4px 8px;border-bottom:1px solid #e3e3e3;text-align:right;white-space:nowrap}
th{background:#f5f5f5;font-weight:600}td.l,th.l{text-align:left}
.scroll{overflow-x:auto}tr.best td{background:#e8f4ec}td.best{font-weight:700;outline:2px solid #009E73}
.ok{color:#007a55}.bad{color:#b34400}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;margin:4px 0 2px;font-size:13px}
.sw{display:inline-block;width:22px;height:0;border-top:3px solid;vertical-align:middle;margin-right:6px}
.blk{display:inline-block;width:14px;height:10px;vertical-align:middle;margin-right:6px}
svg{width:100%;height:auto;display:block}svg text{font:11px system-ui,sans-serif;fill:#333}
svg .halo{paint-order:stroke;stroke:#fff;stroke-width:3px}
svg .grid{stroke:#e6e6e6}svg .axis{stroke:#888}svg path.s{fill:none;stroke-linejoin:round;stroke-linecap:round}
"""


def meets_slo(card: Scorecard) -> bool:
    """True when the run's violation percentage is known and at most the limit."""
    return math.isfinite(card.slo_violation_pct) and card.slo_violation_pct <= SLO_VIOLATION_LIMIT_PCT


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


# --------------------------------------------------------------------------- scorecard table

def _num(fmt: str) -> Callable[[object], str]:
    def f(v: object) -> str:
        if isinstance(v, float) and not math.isfinite(v):
            return "—"
        return format(v, fmt)
    return f


# Readable order: identity, money, SLO outcome, latency, scaling behaviour, SLO settings, cost of
# running the simulation. Every Scorecard field appears once.
_COLUMNS: tuple[tuple[str, str, Callable[[object], str]], ...] = (
    ("policy", "policy", str), ("trace", "trace", str), ("fidelity", "fidelity", str),
    ("requests", "requests", _num(",d")), ("gpu_hours", "GPU-hours", _num(",.2f")),
    ("cost_usd", "cost (USD)", _num(",.2f")), ("slo_violations", "SLO violations", _num(",d")),
    ("slo_violation_pct", "violations (%)", _num(".3f")),
    ("dropped_requests", "dropped", _num(",d")),
    ("ttft_p50_ms", "TTFT p50 (ms)", _num(",.1f")), ("ttft_p99_ms", "TTFT p99 (ms)", _num(",.1f")),
    ("e2e_p50_ms", "e2e p50 (ms)", _num(",.1f")), ("e2e_p99_ms", "e2e p99 (ms)", _num(",.1f")),
    ("peak_replicas", "peak replicas", _num(",d")), ("mean_replicas", "mean replicas", _num(",.2f")),
    ("scale_ups", "scale-ups", _num(",d")), ("scale_downs", "scale-downs", _num(",d")),
    ("misjudged_scale_downs", "misjudged scale-downs", _num(",d")),
    ("sla_violation_delay_ms", "SLA violation delay (ms)", _num(",.0f")),
    ("breach_episodes", "breach episodes", _num(",d")),
    ("canary_passes", "canary passes", _num(",d")), ("canary_aborts", "canary aborts", _num(",d")),
    ("slo_ttft_ms", "SLO TTFT (ms)", _num(",.0f")), ("slo_e2e_ms", "SLO e2e (ms)", _num(",.0f")),
    ("wall_s", "sim wall (s)", _num(",.2f")),
)
_TEXT_COLS = {"policy", "trace", "fidelity"}


def _scorecard_table(cards: Sequence[Scorecard]) -> str:
    ok = [c for c in cards if meets_slo(c) and math.isfinite(c.gpu_hours)]
    best = min((c.gpu_hours for c in ok), default=math.nan)
    verdict_head = f"meets SLO (≤{SLO_VIOLATION_LIMIT_PCT:g}%)"
    heads = []
    for key, label, _ in _COLUMNS:
        heads.append(f'<th class="{"l" if key in _TEXT_COLS else ""}">{_e(label)}</th>')
        if key == "slo_violation_pct":  # the verdict sits next to the number it is computed from
            heads.append(f"<th>{_e(verdict_head)}</th>")
    rows = []
    for i, c in enumerate(cards):
        is_best = meets_slo(c) and c.gpu_hours == best
        cells = [f'<td class="l"><span class="blk" style="background:{_color(i)}"></span>{_e(c.policy)}</td>']
        for key, _, fmt in _COLUMNS[1:]:
            cls = "l" if key in _TEXT_COLS else ("best" if key == "gpu_hours" and is_best else "")
            cells.append(f'<td class="{cls}">{_e(fmt(getattr(c, key)))}</td>')
            if key == "slo_violation_pct":
                cells.append('<td><span class="ok">yes</span></td>' if meets_slo(c)
                             else '<td><span class="bad">no</span></td>')
        rows.append(f'<tr class="{"best" if is_best else ""}">{"".join(cells)}</tr>')
    note = ("Highlighted: fewest GPU-hours among policies that meet the SLO."
            if ok else "No policy meets the SLO, so none is highlighted.")
    return (f'<div class="scroll"><table><thead><tr>{"".join(heads)}</tr></thead><tbody>{"".join(rows)}'
            f'</tbody></table></div><p class="muted">{_e(note)}</p>')


# --------------------------------------------------------------------------- chart scaffolding

def _finite_max(*arrays: FloatArray) -> float:
    vals = [float(a[np.isfinite(a)].max()) for a in arrays if np.isfinite(a).any()]
    return max(vals, default=math.nan)


def _finite_min_pos(*arrays: FloatArray) -> float:
    vals = [float(a[np.isfinite(a) & (a > 0)].min()) for a in arrays if (np.isfinite(a) & (a > 0)).any()]
    return min(vals, default=math.nan)


def _linear_y(vmax: float) -> tuple[LinearScale, list[float]]:
    """A 0-based y scale whose top is a round tick at or above ``vmax``."""
    top = vmax if math.isfinite(vmax) and vmax > 0 else 1.0
    ticks = nice_ticks(0.0, top)
    if ticks[-1] < top:
        ticks.append(ticks[-1] + (ticks[1] - ticks[0] if len(ticks) > 1 else top))
    return LinearScale(0.0, ticks[-1], _Y0, _Y1), ticks


def _time_axis(runs: Sequence[PolicyRun]) -> tuple[LinearScale, str]:
    """Shared x scale over all timelines, plus tick/label markup in a readable time unit."""
    starts = [float(r.timeline.t_s[0]) for r in runs if len(r.timeline.t_s)]
    ends = [float(r.timeline.t_s[-1]) + r.timeline.bin_s for r in runs if len(r.timeline.t_s)]
    lo, hi = (min(starts), max(ends)) if starts else (0.0, 1.0)
    hi = hi if hi > lo else lo + 1.0
    x = LinearScale(lo, hi, _X0, _X1)
    div, unit = time_unit(hi - lo)
    parts = []
    for tv in nice_ticks(lo / div, hi / div, 8):
        px = x.at(tv * div)
        parts.append(f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{_Y1}" y2="{_Y0}"/>'
                     f'<text x="{px:.1f}" y="{_Y0 + 16}" text-anchor="middle">{_e(fmt_num(tv))}</text>')
    parts.append(f'<text x="{(_X0 + _X1) / 2}" y="{_H - 6}" text-anchor="middle">time ({unit})</text>')
    return x, "".join(parts)


def _y_axis(ticks: Sequence[float], at: Callable[[float], float], label: str, *, right: bool = False,
            grid: bool = True) -> str:
    xa = _X1 if right else _X0
    anchor, dx = ("start", 6) if right else ("end", -6)
    parts = [f'<line class="axis" x1="{xa}" x2="{xa}" y1="{_Y1}" y2="{_Y0}"/>']
    for v in ticks:
        py = at(v)
        if grid:
            parts.append(f'<line class="grid" x1="{_X0}" x2="{_X1}" y1="{py:.1f}" y2="{py:.1f}"/>')
        parts.append(f'<text x="{xa + dx}" y="{py + 4:.1f}" text-anchor="{anchor}">{_e(fmt_num(v))}</text>')
    lx = _W - 14 if right else 16
    parts.append(f'<text transform="translate({lx},{(_Y0 + _Y1) / 2}) rotate({90 if right else -90})" '
                 f'text-anchor="middle">{_e(label)}</text>')
    return "".join(parts)


def _svg(label: str, body: str, height: int = _H) -> str:
    return (f'<svg viewBox="0 0 {_W} {height}" role="img" aria-label="{_e(label)}">'
            f'<line class="axis" x1="{_X0}" x2="{_X1}" y1="{_Y0}" y2="{_Y0}"/>{body}</svg>')


def _legend(runs: Sequence[PolicyRun], extra: str = "") -> str:
    items = [f'<span><span class="sw" style="border-color:{_color(i)}"></span>{_e(r.scorecard.policy)}</span>'
             for i, r in enumerate(runs)]
    return f'<div class="legend">{"".join(items)}{extra}</div>'


def _x_end(r: PolicyRun) -> float:
    t = r.timeline.t_s
    return float(t[-1]) + r.timeline.bin_s if len(t) else 0.0


# --------------------------------------------------------------------------- the three charts

def _replicas_chart(runs: Sequence[PolicyRun]) -> str:
    x, x_axis = _time_axis(runs)
    y, yt = _linear_y(_finite_max(*(r.timeline.replicas for r in runs)))
    demand = runs[0].timeline  # same trace for every policy, so one demand series suffices
    y2, y2t = _linear_y(_finite_max(demand.demand_rps))
    parts = [x_axis, _y_axis(yt, y.at, "replicas (billed)"), _y_axis(y2t, y2.at, "demand (req/s)", right=True,
                                                                      grid=False)]
    dt, dv = downsample_minmax(demand.t_s, demand.demand_rps, MAX_POINTS)
    parts.append(f'<path d="{step_area_path(x(dt), y2(dv), x.at(_x_end(runs[0])), _Y0)}" fill="{_GREY}" '
                 f'fill-opacity="0.3"><title>demand (req/s), peak {_e(fmt_num(_finite_max(dv)))}</title></path>')
    for i, r in enumerate(runs):
        tt, rv = downsample_minmax(r.timeline.t_s, r.timeline.replicas, MAX_POINTS)
        tip = (f"{r.scorecard.policy}: peak {r.scorecard.peak_replicas} replicas, "
               f"mean {r.scorecard.mean_replicas:.2f}")
        parts.append(f'<path class="s" d="{step_path(x(tt), y(rv), x.at(_x_end(r)))}" stroke="{_color(i)}" '
                     f'stroke-width="1.8"><title>{_e(tip)}</title></path>')
    extra = f'<span><span class="blk" style="background:{_GREY};opacity:.45"></span>demand (req/s, right axis)</span>'
    return _legend(runs, extra) + _svg("replicas over time per policy against demand", "".join(parts))


def _latency_chart(runs: Sequence[PolicyRun]) -> str:
    series: list[tuple[int, str, FloatArray, FloatArray, str]] = []
    for i, r in enumerate(runs):
        for name, arr, dash in (("TTFT p99", r.timeline.ttft_p99_ms, ""), ("e2e p99", r.timeline.e2e_p99_ms, "6 3")):
            tt, vv = downsample_max(r.timeline.t_s, arr, MAX_POINTS)
            series.append((i, name, tt, vv, dash))
    slos = sorted({(c.slo_ttft_ms, "TTFT SLO") for c in (r.scorecard for r in runs) if c.slo_ttft_ms > 0}
                  | {(c.slo_e2e_ms, "e2e SLO") for c in (r.scorecard for r in runs) if c.slo_e2e_ms > 0})
    slo_arr = np.array([v for v, _ in slos if math.isfinite(v)], dtype=np.float64)
    lo = _finite_min_pos(slo_arr, *(s[3] for s in series))
    hi = _finite_max(slo_arr, *(s[3] for s in series))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 1.0, 1000.0
    lo, hi = 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi))
    hi = hi * 10 if hi <= lo else hi
    x, x_axis = _time_axis(runs)
    y = LogScale(lo, hi, _Y0, _Y1)
    parts = [x_axis, _y_axis(log_ticks(lo, hi), y.at, "latency p99 (ms, log scale)")]
    for v, name in slos:
        if math.isfinite(v):
            py = y.at(v)
            label = _e(f"{name} {v:g} ms")
            parts.append(f'<line x1="{_X0}" x2="{_X1}" y1="{py:.1f}" y2="{py:.1f}" stroke="#555" '
                         f'stroke-dasharray="4 4"><title>{label}</title></line>'
                         f'<text class="halo" x="{_X1 - 4}" y="{py - 4:.1f}" text-anchor="end">{label}</text>')
    for i, name, tt, vv, dash in series:
        peak = _finite_max(vv)
        tip = f"{runs[i].scorecard.policy}: {name}, max {peak:,.1f} ms" if math.isfinite(peak) else \
            f"{runs[i].scorecard.policy}: {name}, no completed requests"
        da = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<path class="s" d="{line_path(x(tt), y(vv))}" stroke="{_color(i)}" stroke-width="1.5"{da}>'
                     f"<title>{_e(tip)}</title></path>")
    extra = ('<span><span class="sw" style="border-color:#444"></span>TTFT p99</span>'
             '<span><span class="sw" style="border-color:#444;border-top-style:dashed"></span>e2e p99</span>'
             '<span><span class="sw" style="border-color:#555;border-top:2px dotted"></span>SLO</span>')
    return _legend(runs, extra) + _svg("p99 latency over time per policy", "".join(parts))


def _bars_chart(runs: Sequence[PolicyRun]) -> str:
    """Two panels side by side: cost (USD) and SLO violations (%), one coloured bar per policy."""
    half = _W / 2
    panels = (("cost (USD)", [r.scorecard.cost_usd for r in runs], "{:,.2f}", None),
              ("SLO violations (%)", [r.scorecard.slo_violation_pct for r in runs], "{:.3f}",
               SLO_VIOLATION_LIMIT_PCT))
    parts = []
    for p, (label, values, fmt, limit) in enumerate(panels):
        x0, x1 = p * half + _ML, (p + 1) * half - 20
        arr = np.array(values + ([limit] if limit is not None else []), dtype=np.float64)
        y, ticks = _linear_y(_finite_max(arr) * 1.08)  # headroom for the value labels above bars
        parts.append(f'<line class="axis" x1="{x0}" x2="{x1}" y1="{_Y0}" y2="{_Y0}"/>'
                     f'<line class="axis" x1="{x0}" x2="{x0}" y1="{_Y1}" y2="{_Y0}"/>')
        for v in ticks:
            py = y.at(v)
            parts.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{py:.1f}" y2="{py:.1f}"/>'
                         f'<text x="{x0 - 6}" y="{py + 4:.1f}" text-anchor="end">{_e(fmt_num(v))}</text>')
        parts.append(f'<text x="{(x0 + x1) / 2}" y="{_H - 6}" text-anchor="middle">{_e(label)}</text>')
        band = (x1 - x0) / max(len(runs), 1)
        for i, (r, v) in enumerate(zip(runs, values, strict=True)):
            cx = x0 + band * (i + 0.5)
            name = r.scorecard.policy if len(r.scorecard.policy) <= 16 else r.scorecard.policy[:15] + "…"
            parts.append(f'<text x="{cx:.1f}" y="{_Y0 + 16}" text-anchor="middle">{_e(name)}</text>')
            text = fmt.format(v) if math.isfinite(v) else "—"
            if math.isfinite(v):
                top = y.at(max(v, 0.0))
                parts.append(f'<rect x="{cx - band * 0.35:.1f}" y="{top:.1f}" width="{band * 0.7:.1f}" '
                             f'height="{max(_Y0 - top, 0.0):.1f}" fill="{_color(i)}">'
                             f"<title>{_e(f'{r.scorecard.policy}: {label} {text}')}</title></rect>")
            parts.append(f'<text x="{cx:.1f}" y="{(y.at(max(v, 0.0)) if math.isfinite(v) else _Y0) - 4:.1f}" '
                         f'text-anchor="middle">{_e(text)}</text>')
        if limit is not None:
            py = y.at(limit)
            parts.append(f'<line x1="{x0}" x2="{x1}" y1="{py:.1f}" y2="{py:.1f}" stroke="#555" '
                         f'stroke-dasharray="4 4"><title>SLO limit {limit:g}%</title></line>'
                         f'<text class="halo" x="{x1}" y="{py - 4:.1f}" text-anchor="end">limit {limit:g}%</text>')
    body = "".join(parts)
    return _legend(runs) + (f'<svg viewBox="0 0 {_W} {_H}" role="img" '
                            f'aria-label="cost and SLO violations per policy">{body}</svg>')


# --------------------------------------------------------------------------- document

def render_report(runs: Sequence[PolicyRun], *, title: str, trace_desc: str,
                  settings: Mapping[str, str]) -> str:
    """One self-contained HTML document comparing ``runs`` (policies on the same trace)."""
    settings_rows = "".join(f'<tr><th class="l">{_e(k)}</th><td class="l">{_e(v)}</td></tr>'
                            for k, v in settings.items())
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f'<h1>{_e(title)}</h1><p class="muted">Trace: {_e(trace_desc)}</p>',
    ]
    if settings_rows:
        parts.append(f"<h2>Settings</h2><table><tbody>{settings_rows}</tbody></table>")
    if not runs:
        parts.append("<p>No policy runs to report.</p></body></html>")
        return "".join(parts)
    parts.append("<h2>Scorecard</h2>" + _scorecard_table([r.scorecard for r in runs]))
    longest = max(len(r.timeline.t_s) for r in runs)
    if longest > MAX_POINTS:
        parts.append(f'<p class="muted">Charts show {longest:,} bins downsampled to at most {MAX_POINTS:,} '
                     "points per series; replica and demand minima/maxima and latency maxima are kept.</p>")
    parts.append("<h2>Replicas over time</h2>" + _replicas_chart(runs))
    parts.append("<h2>Tail latency over time</h2>" + _latency_chart(runs))
    parts.append("<h2>Cost and SLO violations</h2>" + _bars_chart(runs))
    cards = [r.scorecard.as_dict() for r in runs]
    if frontier_ratios(cards):
        # Only with HPA/static points: the hull is what mixing HPA settings over time can reach.
        parts.append('<h2>GPU-hours against the HPA frontier</h2><p class="muted">The dashed line is the lower '
                     "convex hull of the HPA and static points; a policy below it is cheaper than any HPA mix at "
                     "its own violation rate.</p>"
                     # Inline SVG needs no namespace; the document references nothing external.
                     + render_frontier_svg({runs[0].scorecard.trace: cards}).replace(
                         ' xmlns="http://www.w3.org/2000/svg"', ""))
    parts.append("</body></html>")
    return "".join(parts)


def write_report(path: str | os.PathLike[str], runs: Sequence[PolicyRun], *, title: str, trace_desc: str,
                 settings: Mapping[str, str]) -> None:
    """Render and write the report as UTF-8; raises :class:`InputError` naming ``path`` on failure."""
    doc = render_report(runs, title=title, trace_desc=trace_desc, settings=settings)
    try:
        Path(path).write_text(doc, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write report: {exc.strerror or exc}", path=os.fspath(path),
                         fix="choose a writable path whose directory exists") from exc
