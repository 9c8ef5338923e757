"""Render an :class:`~ebb.analysis.AnalysisReport` as one self-contained HTML page (a string).

Guarantees: inline SVG and CSS only, no scripts, no external resources (it opens offline and can
be mailed); every name from the data is HTML-escaped. Missing values (NaN) are drawn as gaps.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np

from ebb.analysis import AnalysisReport
from ebb.analysis.distribution import Distribution
from ebb.analysis.heatmap import HeatMap

__all__ = ["render_html"]

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:.9em}th{background:#f4f4f4}
.note{color:#666;font-size:.9em}.coupled{font-weight:bold}"""


def _esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _share_ticks(top: float) -> list[float]:
    """Four to six round tick values from 0 to >= ``top`` (a share in (0, 1])."""
    raw = top / 4
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * mag >= raw)
    return [k * step for k in range(math.ceil(top / step - 1e-9) + 1)]


def _pct(share: float) -> str:
    return f"{share * 100:.3g} %"


def _hist_svg(d: Distribution, w: int = 640, h: int = 220) -> str:
    """Bars (continuous part per bin) and spikes (atoms), both as share of all ``d.n`` samples.

    The y axis is labelled "share of samples" with round ticks; the x axis carries the resource's
    name (and "log scale" when the bins are geometric). An atom a log axis cannot place (<= 0) is
    drawn in a slot left of the axis, labelled with its value.
    """
    n = max(d.n, 1)
    shares = d.counts.astype(np.float64) / n
    smooth_share = d.smoothed / n
    lo, hi = float(d.edges[0]), float(d.edges[-1])
    off_axis = [a for a in d.atoms if d.log_scale and a.value <= 0]
    placed = [a for a in d.atoms if a not in off_axis]
    if placed:
        lo, hi = min(lo, min(a.value for a in placed)), max(hi, max(a.value for a in placed))
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    left, right, top_px, bottom = 64 + (24 if off_axis else 0), w - 12, 12, h - 44
    tr = math.log10 if d.log_scale else float

    def x(v: float) -> float:
        return left + (tr(v) - tr(lo)) / (tr(hi) - tr(lo)) * (right - left)

    top = float(max(shares.max(initial=0.0), smooth_share.max(initial=0.0),
                    max((a.share for a in d.atoms), default=0.0), 1e-9))
    ticks = _share_ticks(top)
    y_max = ticks[-1]

    def y(share: float) -> float:
        return bottom - share / y_max * (bottom - top_px)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
             f'aria-label="histogram of {_esc(d.name)}">']
    for m in d.modes:
        parts.append(f'<rect x="{x(m.lo):.1f}" y="{top_px}" width="{max(1.0, x(m.hi) - x(m.lo)):.1f}" '
                     f'height="{bottom - top_px}" fill="#ffe8b0"><title>mode {_fmt(m.lo)}–{_fmt(m.hi)}: '
                     f'{m.share:.1%}</title></rect>')
    for i, c in enumerate(shares):
        if c > 0:
            x0, x1 = x(float(d.edges[i])), x(float(d.edges[i + 1]))
            parts.append(f'<rect x="{x0:.1f}" y="{y(c):.1f}" width="{max(0.5, x1 - x0 - 0.5):.1f}" '
                         f'height="{bottom - y(c):.1f}" fill="#4a7bb7"/>')
    if len(shares):
        centres = 0.5 * (d.edges[:-1] + d.edges[1:])
        if d.log_scale:  # the bins are geometric: their centre is the geometric mean
            centres = np.sqrt(d.edges[:-1] * d.edges[1:])
        pts = " ".join(f"{x(float(c)):.1f},{y(float(s)):.1f}" for c, s in zip(centres, smooth_share))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="#c0392b" stroke-width="1.5"/>')
    for k, a in enumerate(off_axis):
        slot_x = 64 + 6 + 4 * k
        parts.append(f'<line x1="{slot_x}" y1="{bottom}" x2="{slot_x}" y2="{y(a.share):.1f}" stroke="#8e44ad" '
                     f'stroke-width="3"><title>atom {_fmt(a.value)}: {a.share:.1%}</title></line>'
                     f'<text x="{slot_x}" y="{bottom + 14}" font-size="10" text-anchor="middle">{_fmt(a.value)}</text>')
    for a in placed:
        ax = x(a.value)
        parts.append(f'<line x1="{ax:.1f}" y1="{bottom}" x2="{ax:.1f}" y2="{y(a.share):.1f}" stroke="#8e44ad" '
                     f'stroke-width="3"><title>atom {_fmt(a.value)}: {a.share:.1%}</title></line>')
    # axes: y with share ticks and its label, x with value ticks and the resource's name
    parts.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/>'
                 f'<line x1="{left}" y1="{top_px}" x2="{left}" y2="{bottom}" stroke="#333"/>')
    for t in ticks:
        parts.append(f'<line x1="{left - 4}" y1="{y(t):.1f}" x2="{left}" y2="{y(t):.1f}" stroke="#333"/>'
                     f'<text x="{left - 6}" y="{y(t) + 3:.1f}" font-size="10" text-anchor="end">{_pct(t)}</text>')
    parts.append(f'<text x="12" y="{(top_px + bottom) / 2:.1f}" font-size="11" text-anchor="middle" '
                 f'transform="rotate(-90 12 {(top_px + bottom) / 2:.1f})">share of samples</text>')
    xt = np.geomspace(lo, hi, 6) if d.log_scale else np.linspace(lo, hi, 6)
    for v in xt:
        parts.append(f'<line x1="{x(float(v)):.1f}" y1="{bottom}" x2="{x(float(v)):.1f}" y2="{bottom + 4}" '
                     f'stroke="#333"/><text x="{x(float(v)):.1f}" y="{bottom + 15}" font-size="10" '
                     f'text-anchor="middle">{_fmt(float(v))}</text>')
    label = _esc(d.name) + (" (log scale)" if d.log_scale else "")
    parts.append(f'<text x="{(left + right) / 2:.1f}" y="{h - 6}" font-size="11" text-anchor="middle">'
                 f'{label}</text></svg>')
    return "".join(parts)


def _colour(v: float, lo: float, hi: float) -> str:
    if not math.isfinite(v):
        return "#ffffff"
    f = 0.0 if hi <= lo else min(1.0, max(0.0, (v - lo) / (hi - lo)))
    # white -> orange -> dark red
    r, g, b = 255, int(255 - 175 * f), int(235 - 235 * f)
    return f"#{r:02x}{g:02x}{b:02x}"


def _heat_svg(hm: HeatMap, w: int = 720) -> str:
    n_nodes, n_bins = hm.cells.shape
    row_h, label_w = 14, 90
    cell_w = (w - label_w - 10) / max(1, n_bins)
    finite = hm.cells[np.isfinite(hm.cells)]
    lo, hi = (float(finite.min()), float(finite.max())) if len(finite) else (0.0, 1.0)
    h = n_nodes * row_h + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
             f'aria-label="heat map of {_esc(hm.metric)}">']
    for i, node in enumerate(hm.nodes):
        yy = i * row_h
        parts.append(f'<text x="{label_w - 4}" y="{yy + 11}" font-size="10" text-anchor="end">{_esc(node)}</text>')
        for j in range(n_bins):
            v = float(hm.cells[i, j])
            if math.isfinite(v):
                parts.append(f'<rect x="{label_w + j * cell_w:.1f}" y="{yy}" width="{cell_w + 0.2:.1f}" '
                             f'height="{row_h - 1}" fill="{_colour(v, lo, hi)}"><title>{_esc(node)} '
                             f'bin {j}: {_fmt(v)}</title></rect>')
    parts.append(f'<text x="{label_w}" y="{h - 4}" font-size="10">scale {_fmt(lo)} (white) – '
                 f'{_fmt(hi)} (dark red); bin = {hm.bin_ns / 1e9:.3g} s</text></svg>')
    return "".join(parts)


def _corr_table(names: Sequence[str], r: np.ndarray, threshold: float) -> str:
    rows = ["<table><tr><th></th>" + "".join(f"<th>{_esc(n)}</th>" for n in names) + "</tr>"]
    for i, a in enumerate(names):
        cells = []
        for j in range(len(names)):
            v = float(r[i, j])
            bg = "#fff" if not math.isfinite(v) else (
                f"rgb({255},{int(255 - 150 * v)},{int(255 - 150 * v)})" if v >= 0
                else f"rgb({int(255 + 150 * v)},{int(255 + 150 * v)},255)")
            cls = ' class="coupled"' if i != j and math.isfinite(v) and abs(v) > threshold else ""
            cells.append(f'<td{cls} style="background:{bg}">{_fmt(v) if math.isfinite(v) else "–"}</td>')
        rows.append(f"<tr><th>{_esc(a)}</th>{''.join(cells)}</tr>")
    rows.append("</table>")
    return "".join(rows)


def render_html(report: AnalysisReport, *, title: str = "ebb analyze", sources: Sequence[str] = (),
                coupled_abs_r: float = 0.7) -> str:
    """The whole page as a string; the caller writes it."""
    out = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_esc(title)}</title>"
           f"<style>{_CSS}</style></head><body><h1>{_esc(title)}</h1>"]
    span_s = (report.t1_ns - report.t0_ns) / 1e9
    out.append(f"<p>{report.n_samples:,} samples of {report.n_series} series over {span_s:,.1f} s"
               + (f" from {', '.join(_esc(s) for s in sources)}" if sources else "") + ".</p>")
    out.append("<h2>Distribution per resource</h2><p class=\"note\">Bars: histogram; red line: smoothed; "
               "shaded: modes (local maxima with a prominence rule; share = fraction of samples in the range); "
               "purple spikes: atoms (one exact value holding &ge; 5 % of the samples). "
               "Heights are shares of all samples.</p>")
    for d in report.distributions:
        out.append(f"<h3>{_esc(d.name)}</h3><p>n={d.n:,} mean={_fmt(d.mean)} p50={_fmt(d.p50)} "
                   f"p95={_fmt(d.p95)} p99={_fmt(d.p99)} min={_fmt(d.lo)} max={_fmt(d.hi)}</p>")
        out.append(_hist_svg(d))
        if d.atoms:
            out.append("<table><tr><th>atom</th><th>value</th><th>share</th><th>samples</th></tr>")
            for k, a in enumerate(d.atoms, 1):
                out.append(f"<tr><td>{k}</td><td>{_fmt(a.value)}</td><td>{a.share:.1%}</td>"
                           f"<td>{a.count:,}</td></tr>")
            out.append("</table>")
        if d.modes:
            out.append("<table><tr><th>mode</th><th>peak</th><th>range</th><th>share</th><th>samples</th></tr>")
            for k, m in enumerate(d.modes, 1):
                out.append(f"<tr><td>{k}</td><td>{_fmt(m.peak)}</td><td>{_fmt(m.lo)}–{_fmt(m.hi)}</td>"
                           f"<td>{m.share:.1%}</td><td>{m.count:,}</td></tr>")
            out.append("</table>")
    if report.heatmaps:
        out.append("<h2>Per-node heat (mean per time bin)</h2>")
        for hm in report.heatmaps:
            out.append(f"<h3>{_esc(hm.metric)}</h3>{_heat_svg(hm)}")
    out.append(f"<h2>Pearson correlation between resources</h2><p class=\"note\">Bold: |r| &gt; "
               f"{coupled_abs_r} (coupled load).</p>")
    out.append(_corr_table(report.resources, report.correlation, coupled_abs_r))
    if report.coupled:
        out.append("<ul>" + "".join(f"<li>{_esc(c.a)} – {_esc(c.b)}: r = {c.r:.3f}</li>" for c in report.coupled)
                   + "</ul>")
    out.append("</body></html>")
    return "".join(out)
