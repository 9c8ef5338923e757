"""The shadow report as one self-contained HTML page: verdict first, the two replica curves, the disagreements.

Like the simulate report (:mod:`ebb.score.report`) it opens offline and can be mailed: inline CSS, an
inline SVG chart (:mod:`ebb.score.svgplot`), native ``<title>`` tooltips, no JavaScript, every piece of
text from the ledger HTML-escaped. The chart draws the fleet as it ran and Ebb's own fleet as step
curves over time, gaps where a second is unknown, and shades the risk minutes
(:mod:`ebb.score.shadow`); a week of seconds is downsampled to at most :data:`MAX_POINTS` points per
curve keeping each bucket's minimum and maximum, and adjacent risk minutes are drawn as one band.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Final

import numpy as np

from ebb.errors import InputError
from ebb.model.shadow import SLOTS
from ebb.score.shadow import ShadowReport, saving_text, utc_stamp
from ebb.score.units import plural
from ebb.score.svgplot import LinearScale, downsample_minmax, fmt_num, nice_ticks, step_path, time_unit

__all__ = ["MAX_POINTS", "render_shadow", "write_shadow"]

MAX_POINTS: Final = 2000
"""Most points drawn per curve (two per pixel column of the 960-px chart)."""
_W, _H = 960, 320
_X0, _X1, _Y0, _Y1 = 60, 930, 276, 16
_RUN, _EBB, _RISK = "#0072B2", "#D55E00", "#E69F00"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1000px;
padding:0 16px;color:#222;background:#fff}h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 6px}
.muted{color:#666}.verdict{border-left:4px solid #009E73;background:#f3faf6;padding:8px 14px;margin:14px 0}
.verdict.watch{border-color:#E69F00;background:#fdf8ee}.verdict.no{border-color:#b34400;background:#fdf5ef}
.verdict p{margin:4px 0;overflow-wrap:anywhere}.tbl{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;max-width:100%}
th,td{padding:4px 8px;border-bottom:1px solid #e3e3e3;text-align:right;vertical-align:top}
th{background:#f5f5f5;font-weight:600}td.l,th.l{text-align:left}td.w{white-space:normal;overflow-wrap:anywhere}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;margin:4px 0;font-size:13px}
.sw{display:inline-block;width:18px;height:10px;vertical-align:middle;margin-right:6px}
svg{width:100%;height:auto;display:block}svg text{font:11px system-ui,sans-serif;fill:#333}
svg .grid{stroke:#e6e6e6}svg .axis{stroke:#888}svg path.s{fill:none;stroke-linejoin:round}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _chart(r: ShadowReport) -> str:
    s = r.series
    t = s.start_s + np.arange(len(s.as_run), dtype=np.float64)
    end = float(t[-1] + 1) if len(t) else float(s.start_s + 1)
    x = LinearScale(float(s.start_s), end, _X0, _X1)
    top = max(float(np.nanmax(np.concatenate([s.as_run, s.ebb, [1.0]]))), 1.0)
    ticks = nice_ticks(0.0, top)
    if ticks[-1] < top:
        ticks.append(ticks[-1] + (ticks[1] - ticks[0] if len(ticks) > 1 else top))
    y = LinearScale(0.0, ticks[-1], _Y0, _Y1)
    parts = []
    for a, b in _bands(r.risk_minute_starts):
        x0, x1 = x.at(a), x.at(b)
        risk = "risk: " + plural((b - a) // SLOTS, "minute")
        parts.append(f'<rect x="{x0:.1f}" y="{_Y1}" width="{max(x1 - x0, 1.0):.1f}" height="{_Y0 - _Y1}" '
                     f'fill="{_RISK}" fill-opacity="0.3"><title>{_e(risk)}</title></rect>')
    for v in ticks:
        py = y.at(v)
        parts.append(f'<line class="grid" x1="{_X0}" x2="{_X1}" y1="{py:.1f}" y2="{py:.1f}"/>'
                     f'<text x="{_X0 - 6}" y="{py + 4:.1f}" text-anchor="end">{_e(fmt_num(v))}</text>')
    div, unit = time_unit(end - s.start_s)
    for tv in nice_ticks(0.0, (end - s.start_s) / div, 8):
        px = x.at(s.start_s + tv * div)
        parts.append(f'<text x="{px:.1f}" y="{_Y0 + 16}" text-anchor="middle">{_e(fmt_num(tv))}</text>')
    parts.append(f'<text x="{(_X0 + _X1) / 2}" y="{_H - 8}" text-anchor="middle">time since the first row '
                 f"({unit})</text>")
    parts.append(f'<text transform="translate(16,{(_Y0 + _Y1) / 2}) rotate(-90)" text-anchor="middle">replicas'
                 "</text>")
    # Ebb's curve dashed over the fleet's solid one: where they agree, both stay visible
    for values, colour, dash, name, gpu_h in ((s.as_run, _RUN, "", "your fleet, as run", r.as_run_gpu_h),
                                              (s.ebb, _EBB, "7 4", "Ebb's own fleet", r.ebb_gpu_h)):
        tt, vv = downsample_minmax(t, values, MAX_POINTS)
        parts.append(f'<path class="s" d="{step_path(x(tt), y(vv), x.at(end))}" stroke="{colour}" '
                     f'stroke-width="2" stroke-dasharray="{dash or "none"}">'
                     f'<title>{_e(f"{name}: {gpu_h:,.3f} GPU-hours")}</title></path>')
    axis = (f'<line class="axis" x1="{_X0}" x2="{_X1}" y1="{_Y0}" y2="{_Y0}"/>'
            f'<line class="axis" x1="{_X0}" x2="{_X0}" y1="{_Y1}" y2="{_Y0}"/>')
    legend = (f'<div class="legend"><span><span class="sw" style="background:{_RUN}"></span>your fleet, as run'
              f'</span><span><span class="sw" style="background:{_EBB}"></span>Ebb\'s own fleet</span>'
              f'<span><span class="sw" style="background:{_RISK};opacity:.45"></span>risk minutes</span></div>')
    return (legend + f'<svg viewBox="0 0 {_W} {_H}" role="img" aria-label="replicas over time, as run and as Ebb '
            f'would have run">{axis}{"".join(parts)}</svg>')


def _bands(starts: tuple[int, ...]) -> list[tuple[int, int]]:
    """Adjacent risk minutes as one ``(start_s, end_s)`` band."""
    out: list[tuple[int, int]] = []
    for a in starts:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], a + SLOTS)
        else:
            out.append((a, a + SLOTS))
    return out


def _figures(r: ShadowReport) -> str:
    rows = [("GPU-hours, as run", f"{r.as_run_gpu_h:,.3f}"),
            ("GPU-hours, as Ebb would have run", f"{r.ebb_gpu_h:,.3f} ({saving_text(r.saving)})"),
            ("risk minutes", f"{r.risk_minutes:,} of {r.compared_minutes:,} ({r.risk_seconds:,} risk seconds)"),
            ("agreement", f"{r.agreement:.1%} of the compared seconds (Ebb lower {r.lower_share:.1%}, "
                          f"higher {r.higher_share:.1%})"),
            ("compared", f"{r.compared_s:,} s of {r.span_s:,} s"),
            ("near the SLO", f"TTFT p99 ≥ {r.near:g} × {r.slo_ttft_ms:g} ms"),
            ("GPUs per replica", f"{r.gpus_per_replica:g}"), ("target", r.target), ("policy", r.policy)]
    body = "".join(f'<tr><th class="l">{_e(k)}</th><td class="l w">{_e(v)}</td></tr>' for k, v in rows)
    return f'<div class="tbl"><table><tbody>{body}</tbody></table></div>'


def _disagreement_table(r: ShadowReport) -> str:
    if not r.disagreements:
        return "<p>Ebb held exactly what your fleet ran at every compared second.</p>"
    head = ('<tr><th>#</th><th class="l">from</th><th>lasted</th><th>your fleet</th><th>Ebb</th>'
            '<th>replica-s</th><th>risk s</th><th class="l">why</th></tr>')
    rows = []
    for i, d in enumerate(r.disagreements, 1):
        why = "<br>".join(_e(w) for w in d.why) or "—"
        rows.append(f'<tr><td>{i}</td><td class="l">{_e(utc_stamp(d.start_s))}</td><td>{d.seconds:,} s</td>'
                    f'<td>{_span(d.as_run)}</td><td>{_span(d.ebb)}</td><td>{d.replica_s:,.0f}</td>'
                    f'<td>{d.risk_seconds:,}</td>'
                    f'<td class="l w">{why}</td></tr>')
    return f'<div class="tbl"><table><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table></div>'


def _span(lo_hi: tuple[int, int]) -> str:
    lo, hi = lo_hi
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def render_shadow(r: ShadowReport, *, run_id: str, ledger: str) -> str:
    """One self-contained HTML document of ``r`` (module docstring)."""
    cls = {"switch": "verdict", "keep watching": "verdict watch", "do not switch": "verdict no"}[r.kind]
    title = f"Ebb shadow report — {run_id}"
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f'<h1>{_e(title)}</h1><p class="muted">Ledger {_e(ledger)}, from {_e(utc_stamp(r.series.start_s))} for '
        f"{_e(f'{r.span_s:,}')} s.</p>",
        f'<section class="{cls}" id="verdict"><p><b>{_e(r.verdict)}</b></p></section>',
        "<h2>Figures</h2>", _figures(r),
        "<h2>Replicas over time</h2>", _chart(r),
        '<p class="muted">Gaps: seconds no row holds (the controller was not running or not leading). Risk '
        "minutes: Ebb below your fleet while the minute's observed TTFT p99 was near the SLO.</p>",
        f"<h2>Largest disagreements</h2>{_disagreement_table(r)}",
        "</body></html>"])


def write_shadow(path: str | os.PathLike[str], r: ShadowReport, *, run_id: str, ledger: str) -> None:
    """Render and write the page as UTF-8; :class:`InputError` naming ``path`` when it cannot be written."""
    try:
        Path(path).write_text(render_shadow(r, run_id=run_id, ledger=ledger), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write the shadow report: {exc.strerror or exc}", path=os.fspath(path),
                         fix="choose a writable path whose directory exists") from exc
