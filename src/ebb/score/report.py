"""Self-contained HTML report for ``ebb simulate`` and ``ebb demo --live``: verdict first, then charts and tables.

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
from ebb.score.frontier import frontier_ratios
from ebb.score.names import abbreviate, legend
from ebb.score.results import FloatArray, PolicyRun, Scorecard
from ebb.score.scatter import SLO_DASH, cost_violation_chart, dash_swatch
from ebb.score.styles import PolicyStyle, marker_close, marker_svg, policy_style, style_swatch
from ebb.score.units import plural
from ebb.score.svgplot import (
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
from ebb.score.as_run import AS_RUN_LEGEND, as_run_lines, is_as_run
from ebb.score.verdict import SLO_VIOLATION_LIMIT_PCT, Verdict, meets_slo, verdict

__all__ = [
    "MAX_POINTS",
    "POLICY_LABEL_CHARS",
    "SLO_VIOLATION_LIMIT_PCT",
    "meets_slo",
    "render_report",
    "write_report",
]

MAX_POINTS = 2000
"""Most points drawn per series; enough for a 960-px-wide chart (two per pixel column)."""
POLICY_LABEL_CHARS = 22
"""Longer policy specs appear as P1, P2, ... in tables and charts, spelled out once in a legend."""

_W, _H = 960, 300
_ML, _MR, _MT, _MB = 70, 70, 16, 44
_X0, _X1, _Y0, _Y1 = _ML, _W - _MR, _H - _MB, _MT  # plot area; y grows downward in SVG
_GREY = "#999999"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;
max-width:1000px;padding:0 16px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px}h3{font-size:15px;margin:16px 0 4px}
.muted{color:#666}table{border-collapse:collapse;font-variant-numeric:tabular-nums;max-width:100%}
th,td{padding:4px 7px;border-bottom:1px solid #e3e3e3;text-align:right;white-space:nowrap}
th{background:#f5f5f5;font-weight:600;white-space:normal;vertical-align:bottom}
td.l,th.l{text-align:left}td.l{white-space:normal;overflow-wrap:anywhere}td.p{white-space:nowrap}
.tbl{max-width:100%;overflow-x:auto}tr.best td{background:#e8f4ec}
td.best{font-weight:700;outline:2px solid #009E73}
.ok{color:#007a55}.bad{color:#b34400}
.verdict{border-left:4px solid #009E73;background:#f3faf6;padding:8px 14px;margin:14px 0}
.verdict p{margin:4px 0;overflow-wrap:anywhere}.verdict.none{border-color:#b34400;background:#fdf5ef}
dl.abbr{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:6px 0;font-size:13px}
dl.abbr dt{font-weight:600}dl.abbr dd{margin:0;overflow-wrap:anywhere;font-family:ui-monospace,monospace}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;margin:4px 0 2px;font-size:13px}
svg.swl{width:28px;height:10px;display:inline-block;vertical-align:middle;margin-right:6px}
.blk{display:inline-block;width:14px;height:10px;vertical-align:middle;margin-right:6px}
svg{width:100%;height:auto;display:block}svg text{font:11px system-ui,sans-serif;fill:#333}
svg .halo{paint-order:stroke;stroke:#fff;stroke-width:3px}
svg .grid{stroke:#e6e6e6}svg .axis{stroke:#888}svg path.s{fill:none;stroke-linejoin:round;stroke-linecap:round}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _style(i: int) -> PolicyStyle:
    """The ``i``-th policy's colour, dash and marker: distinct for every policy (:mod:`ebb.score.styles`)."""
    return policy_style(i)


def _dash(style: PolicyStyle) -> str:
    return f' stroke-dasharray="{style.dash}"' if style.dash else ""


# --------------------------------------------------------------------------- verdict and tables

def _verdict_block(v: Verdict) -> str:
    """The verdict as the report's first section (plain sentences from :meth:`Verdict.lines`)."""
    lines = v.lines()
    first, rest = lines[0], lines[1:]
    cls = "verdict" if v.pick is not None else "verdict none"
    return (f'<section class="{cls}" id="verdict"><p><b>{_e(first)}</b></p>'
            + "".join(f"<p>{_e(line)}</p>" for line in rest) + "</section>")


def _num(fmt: str) -> Callable[[object], str]:
    def f(v: object) -> str:
        if isinstance(v, float) and not math.isfinite(v):
            return "—"
        return format(v, fmt)
    return f


# Columns grouped so each table fits a 1,280-px window (about 960 px of content): the outcome
# (money and SLO), latency, scaling behaviour, and the run itself. Every Scorecard field appears once;
# "meets SLO" and "vs HPA frontier" are derived.
_Col = tuple[str, str, Callable[[object], str]]
_GROUPS: tuple[tuple[str, tuple[_Col, ...]], ...] = (
    ("Cost and SLO", (
        ("gpu_hours", "GPU-hours", _num(",.2f")), ("cost_usd", "cost (USD)", _num(",.2f")),
        ("slo_violation_pct", "violations (%)", _num(".3f")), ("meets", f"meets SLO (≤{SLO_VIOLATION_LIMIT_PCT:g} %)", str),
        ("slo_violations", "SLO violations", _num(",d")), ("dropped_requests", "dropped", _num(",d")),
        ("vs_hpa", "vs HPA frontier", str))),
    ("Latency", (
        ("ttft_p50_ms", "TTFT p50 (ms)", _num(",.1f")), ("ttft_p99_ms", "TTFT p99 (ms)", _num(",.1f")),
        ("e2e_p50_ms", "e2e p50 (ms)", _num(",.1f")), ("e2e_p99_ms", "e2e p99 (ms)", _num(",.1f")),
        ("sla_violation_delay_ms", "SLA violation delay (ms)", _num(",.0f")),
        ("breach_episodes", "breach episodes", _num(",d")))),
    ("Scaling", (
        ("peak_replicas", "peak replicas", _num(",d")), ("mean_replicas", "mean replicas", _num(",.2f")),
        ("scale_ups", "scale-ups", _num(",d")), ("scale_downs", "scale-downs", _num(",d")),
        ("misjudged_scale_downs", "misjudged scale-downs", _num(",d")),
        ("canary_passes", "canary passes", _num(",d")), ("canary_aborts", "canary aborts", _num(",d")))),
    ("Run", (
        ("trace", "trace", str), ("fidelity", "fidelity", str), ("requests", "requests", _num(",d")),
        ("slo_ttft_ms", "SLO TTFT (ms)", _num(",.0f")), ("slo_e2e_ms", "SLO e2e (ms)", _num(",.0f")),
        ("wall_s", "sim wall (s)", _num(",.2f")))),
)
_TEXT_COLS = {"trace", "fidelity"}


def _cell(c: Scorecard, key: str, fmt: Callable[[object], str], ratios: Mapping[str, float]) -> str:
    if key == "meets":
        return '<span class="ok">yes</span>' if meets_slo(c) else '<span class="bad">no</span>'
    if key == "vs_hpa":
        r = ratios.get(c.policy)
        return "" if r is None else "n/a" if not math.isfinite(r) else _e(f"{r:.2f}×")
    return _e(fmt(getattr(c, key)))


def _scorecard_tables(cards: Sequence[Scorecard], labels: Sequence[str], pick: Scorecard | None) -> str:
    """The scorecard as grouped tables (policy first in each) with the verdict's policy highlighted."""
    ratios = frontier_ratios([c.as_dict() for c in cards])
    out = []
    for name, cols in _GROUPS:
        cols = tuple(col for col in cols if col[0] != "vs_hpa" or ratios)
        heads = ['<th class="l">policy</th>'] + [f'<th class="{"l" if k in _TEXT_COLS else ""}">{_e(label)}</th>'
                                                 for k, label, _ in cols]
        rows = []
        for i, c in enumerate(cards):
            is_pick = pick is not None and c is pick
            cells = [f'<td class="l p">{style_swatch(_style(i), width=3)}{_e(labels[i])}</td>']
            for key, _, fmt in cols:
                cls = "l" if key in _TEXT_COLS else ("best" if key == "gpu_hours" and is_pick else "")
                cells.append(f'<td class="{cls}">{_cell(c, key, fmt, ratios)}</td>')
            rows.append(f'<tr class="{"best" if is_pick else ""}">{"".join(cells)}</tr>')
        out.append(f'<h3>{_e(name)}</h3><div class="tbl"><table><thead><tr>{"".join(heads)}</tr></thead>'
                   f'<tbody>{"".join(rows)}</tbody></table></div>')
    note = ("Highlighted: the verdict's policy, the cheapest deployable one (not the oracle) that meets the SLO."
            if pick is not None else "No deployable policy meets the SLO, so none is highlighted.")
    return "".join(out) + f'<p class="muted">{_e(note)}</p>'


def _abbreviations(labels: Mapping[str, str]) -> str:
    """The legend of abbreviated policy specs (empty when none was abbreviated)."""
    items = legend(dict(labels))
    if not items:
        return ""
    return ('<dl class="abbr" id="abbreviations">'
            + "".join(f"<dt>{_e(short)}</dt><dd>{_e(spec)}</dd>" for short, spec in items) + "</dl>")


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


def _legend(labels: Sequence[str], extra: str = "") -> str:
    items = [f"<span>{style_swatch(_style(i), width=3)}{_e(name)}</span>" for i, name in enumerate(labels)]
    return f'<div class="legend">{"".join(items)}{extra}</div>'


def _x_end(r: PolicyRun) -> float:
    t = r.timeline.t_s
    return float(t[-1]) + r.timeline.bin_s if len(t) else 0.0


# --------------------------------------------------------------------------- the three charts

def _replicas_chart(runs: Sequence[PolicyRun], labels: Sequence[str]) -> str:
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
        tip = (f"{r.scorecard.policy}: peak {plural(r.scorecard.peak_replicas, 'replica')}, "
               f"mean {r.scorecard.mean_replicas:.2f}")
        parts.append(f'<path class="s" d="{step_path(x(tt), y(rv), x.at(_x_end(r)))}" stroke="{_style(i).color}" '
                     f'stroke-width="1.8"{_dash(_style(i))}><title>{_e(tip)}</title></path>')
    extra = f'<span><span class="blk" style="background:{_GREY};opacity:.45"></span>demand (req/s, right axis)</span>'
    return _legend(labels, extra) + _svg("replicas over time per policy against demand", "".join(parts))


_LATENCY = {"ttft": ("TTFT p99", "ttft_p99_ms", "slo_ttft_ms", "TTFT SLO"),
            "e2e": ("e2e p99", "e2e_p99_ms", "slo_e2e_ms", "e2e SLO")}


def _latency_chart(runs: Sequence[PolicyRun], labels: Sequence[str], metric: str) -> str:
    """One latency metric (``ttft`` or ``e2e`` p99) over time, one line per policy, with its SLO line.

    The SLO line and its legend swatch share :data:`ebb.score.scatter.SLO_DASH`.
    """
    name, field, slo_field, slo_name = _LATENCY[metric]
    series = [downsample_max(r.timeline.t_s, getattr(r.timeline, field), MAX_POINTS) for r in runs]
    slos = sorted({float(getattr(r.scorecard, slo_field)) for r in runs
                   if getattr(r.scorecard, slo_field) > 0 and math.isfinite(getattr(r.scorecard, slo_field))})
    slo_arr = np.array(slos, dtype=np.float64)
    lo = _finite_min_pos(slo_arr, *(v for _, v in series))
    hi = _finite_max(slo_arr, *(v for _, v in series))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 1.0, 1000.0
    lo, hi = 10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi))
    hi = hi * 10 if hi <= lo else hi
    x, x_axis = _time_axis(runs)
    y = LogScale(lo, hi, _Y0, _Y1)
    parts = [x_axis, _y_axis(log_ticks(lo, hi), y.at, f"{name} (ms, log scale)")]
    for v in slos:
        py = y.at(v)
        label = _e(f"{slo_name} {v:g} ms")
        parts.append(f'<line class="slo" x1="{_X0}" x2="{_X1}" y1="{py:.1f}" y2="{py:.1f}" stroke="#555" '
                     f'stroke-dasharray="{SLO_DASH}"><title>{label}</title></line>'
                     f'<text class="halo" x="{_X1 - 4}" y="{py - 4:.1f}" text-anchor="end">{label}</text>')
    for i, (tt, vv) in enumerate(series):
        peak = _finite_max(vv)
        pol = runs[i].scorecard.policy
        tip = f"{pol}: {name}, max {peak:,.1f} ms" if math.isfinite(peak) else f"{pol}: {name}, no completed requests"
        parts.append(f'<path class="s" d="{line_path(x(tt), y(vv))}" stroke="{_style(i).color}" stroke-width="1.5"'
                     f"{_dash(_style(i))}><title>{_e(tip)}</title></path>")
    extra = f"<span>{dash_swatch('#555', SLO_DASH)}{_e(slo_name)}</span>" if slos else ""
    return _legend(labels, extra) + _svg(f"{name} over time per policy", "".join(parts))


def _bars_chart(runs: Sequence[PolicyRun], labels: Sequence[str]) -> str:
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
            name = labels[i] if len(labels[i]) <= 16 else labels[i][:15] + "…"
            parts.append(f'<text x="{cx:.1f}" y="{_Y0 + 16}" text-anchor="middle">{_e(name)}</text>')
            text = fmt.format(v) if math.isfinite(v) else "—"
            if math.isfinite(v):
                top = y.at(max(v, 0.0))
                parts.append(f'<rect x="{cx - band * 0.35:.1f}" y="{top:.1f}" width="{band * 0.7:.1f}" '
                             f'height="{max(_Y0 - top, 0.0):.1f}" fill="{_style(i).color}">'
                             f"<title>{_e(f'{r.scorecard.policy}: {label} {text}')}</title></rect>")
            above = (y.at(max(v, 0.0)) if math.isfinite(v) else _Y0) - 4
            parts.append(f'<text x="{cx:.1f}" y="{above:.1f}" text-anchor="middle">{_e(text)}</text>'
                         # the policy's marker above its value, as in the legend: bars of one colour differ
                         + marker_svg(_style(i).marker, cx, above - 14, 4.0, _style(i).color, 'class="key"')
                         + marker_close(_style(i).marker))
        if limit is not None:
            py = y.at(limit)
            parts.append(f'<line x1="{x0}" x2="{x1}" y1="{py:.1f}" y2="{py:.1f}" stroke="#555" '
                         f'stroke-dasharray="4 4"><title>SLO limit {limit:g}%</title></line>'
                         f'<text class="halo" x="{x1}" y="{py - 4:.1f}" text-anchor="end">limit {limit:g}%</text>')
    body = "".join(parts)
    return _legend(labels) + (f'<svg viewBox="0 0 {_W} {_H}" role="img" '
                            f'aria-label="cost and SLO violations per policy">{body}</svg>')


# --------------------------------------------------------------------------- document

def render_report(runs: Sequence[PolicyRun], *, title: str, trace_desc: str,
                  settings: Mapping[str, str]) -> str:
    """One self-contained HTML document comparing ``runs`` (policies on the same trace).

    Order: the verdict (:func:`ebb.score.verdict.verdict`), the cost-against-violations chart, the
    scorecard in grouped tables, one chart per time series, the settings. Policy specs longer than
    :data:`POLICY_LABEL_CHARS` characters appear as P1, P2, ... with a legend under the tables.
    """
    settings_rows = "".join(f'<tr><th class="l">{_e(k)}</th><td class="l">{_e(v)}</td></tr>'
                            for k, v in settings.items())
    parts = [
        ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
         '<meta name="viewport" content="width=device-width,initial-scale=1">'),
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f'<h1>{_e(title)}</h1><p class="muted">Trace: {_e(trace_desc)}</p>',
    ]
    settings_html = f"<h2>Settings</h2><table><tbody>{settings_rows}</tbody></table>" if settings_rows else ""
    if not runs:
        parts.append(settings_html + "<p>No policy runs to report.</p></body></html>")
        return "".join(parts)
    cards = [r.scorecard for r in runs]
    measured = next((c for c in cards if is_as_run(c)), None)  # beside the verdict, never its pick
    v = verdict([c for c in cards if not is_as_run(c)])
    by_spec = abbreviate((c.policy for c in cards), POLICY_LABEL_CHARS)
    labels = [by_spec[c.policy] for c in cards]
    parts.append(_verdict_block(v))
    if measured is not None:
        parts.append("".join(f"<p>{_e(line)}</p>" for line in (*as_run_lines(measured, cards), AS_RUN_LEGEND)))
    legend_html, scatter_svg = cost_violation_chart(cards, [_style(i) for i in range(len(cards))], labels, v.pick)
    parts.append("<h2>Cost against SLO violations</h2>" + _legend(labels) + legend_html + scatter_svg)
    if frontier_ratios([c.as_dict() for c in cards]):
        parts.append('<p class="muted">The solid grey line is the peers\' frontier, the dashed one the HPA '
                     "frontier (lower convex hulls: mixing settings over time reaches any point on them). "
                     "“vs HPA frontier” in the table is each policy's GPU-hours against the HPA frontier at its "
                     "own violation rate (below 1× = cheaper than any HPA mix).</p>")
    parts.append("<h2>Scorecard</h2>" + _scorecard_tables(cards, labels, v.pick) + _abbreviations(by_spec))
    longest = max(len(r.timeline.t_s) for r in runs)
    if longest > MAX_POINTS:
        parts.append(f'<p class="muted">Charts show {longest:,} bins downsampled to at most {MAX_POINTS:,} '
                     "points per series; replica and demand minima/maxima and latency maxima are kept.</p>")
    parts.append("<h2>Replicas over time</h2>" + _replicas_chart(runs, labels))
    parts.append("<h2>TTFT p99 over time</h2>" + _latency_chart(runs, labels, "ttft"))
    parts.append("<h2>End-to-end p99 over time</h2>" + _latency_chart(runs, labels, "e2e"))
    parts.append("<h2>Cost and SLO violations</h2>" + _bars_chart(runs, labels))
    parts.append(settings_html + "</body></html>")
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
