"""The cost-against-violations chart of one comparison: every policy run as a point, the peers'
frontier, the HPA frontier and the Pareto set of the policies run.

* x: SLO violations (%) on a symmetric-log axis (``log10(pct + 0.01)``), so 0 %, the 0.1 % limit and
  30 % all stay readable; y: GPU-hours from 0.
* **Peers' frontier** (solid grey): the lower convex hull of every peer's points (neither Ebb nor the
  oracle, :func:`ebb.score.verdict.role`) — mixing two settings over time reaches any point between
  them; drawn sampled along each segment so the straight segments of linear space bend correctly
  on the log axis, and flat past its last point.
* **HPA frontier** (dashed): the same hull over ``hpa`` and ``static`` only, when other peers ran too.
* **Pareto set** (ringed): the policies run that no other run beats on both axes
  (:func:`ebb.gates.pareto.pareto_mask`, oracle included: it is the bound).

Dashes are the module constants, and :func:`dash_swatch` draws legend swatches with the same
``stroke-dasharray``, so a legend entry and its line can never disagree.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from ebb.gates.pareto import pareto_mask
from ebb.score.frontier import HPA_FAMILIES, family, lower_hull
from ebb.score.results import Scorecard
from ebb.score.styles import PolicyStyle, marker_close, marker_svg
from ebb.score.svgplot import LinearScale, fmt_num, nice_ticks
from ebb.score.verdict import SLO_VIOLATION_LIMIT_PCT, role

__all__ = ["HPA_DASH", "SLO_DASH", "cost_violation_chart", "dash_swatch", "symlog_pct"]

SLO_DASH = "4 4"
"""Dash of every SLO line, in charts and in their legends."""
HPA_DASH = "6 3"
"""Dash of the HPA frontier."""
_W, _H = 960, 340
_X0, _X1, _Y0, _Y1 = 70, 930, 296, 16
_C = 0.01  # symlog offset (%): 0 % maps to log10(0.01) = -2
_FRONTIER = "#777777"
_LABEL_ALL_UP_TO = 12  # more points than this: label only the verdict's policies and the oracle
_LABEL_STEP = 13  # px between stacked labels of coinciding points (11-px text)


def symlog_pct(pct: float) -> float:
    """The x coordinate (before scaling) of a violation percentage: ``log10(pct + 0.01)``."""
    return math.log10(max(pct, 0.0) + _C)


def dash_swatch(color: str, dash: str, *, width: float = 2.0) -> str:
    """A 28×10-px inline SVG legend swatch drawn with exactly ``dash`` (empty: solid)."""
    da = f' stroke-dasharray="{html.escape(dash)}"' if dash else ""
    return (f'<svg class="swl" width="28" height="10" viewBox="0 0 28 10" aria-hidden="true">'
            f'<line x1="0" x2="28" y1="5" y2="5" stroke="{color}" stroke-width="{width:g}"{da}/></svg>')


def _hull_path(points: list[tuple[float, float]], x: LinearScale, y: LinearScale, x_max: float) -> str:
    hull = lower_hull(points)
    if not hull:
        return ""
    pts: list[tuple[float, float]] = []
    for (xa, ya), (xb, yb) in pairwise(hull):
        for f in np.linspace(0.0, 1.0, 24, endpoint=False):
            pts.append((xa + (xb - xa) * f, ya + (yb - ya) * f))
    pts.append(hull[-1])
    pts.append((max(x_max, hull[-1][0]), hull[-1][1]))
    return "M" + " L".join(f"{x.at(symlog_pct(a)):.1f},{y.at(b):.1f}" for a, b in pts)


def _labels(labelled: list[tuple[bool, float, float, str]]) -> list[str]:
    """Point labels; labels of points that coincide (to the pixel) stack downward under the verdict's
    pick, so "— deploy" always sits on the first line beside its own point and no two labels overlap."""
    out: list[str] = []
    stacked: dict[tuple[int, int], int] = {}
    for is_pick, cx, cy, text in sorted(labelled, key=lambda item: not item[0]):  # stable: the pick first
        at = (round(cx), round(cy))
        row = stacked.get(at, 0)
        stacked[at] = row + 1
        anchor, dx = ("end", -12) if cx > _X1 - 160 else ("start", 12)
        bold = ' font-weight="bold"' if is_pick else ""
        out.append(f'<text class="halo" x="{cx + dx:.1f}" y="{cy - 6 + _LABEL_STEP * row:.1f}" '
                   f'text-anchor="{anchor}"{bold}>{html.escape(text)}</text>')
    return out


def cost_violation_chart(cards: Sequence[Scorecard], styles: Sequence[PolicyStyle], labels: Sequence[str],
                         pick: Scorecard | None) -> tuple[str, str]:
    """(legend HTML, SVG) of the cost-against-violations chart; ``styles``/``labels`` align with ``cards``
    (each point is drawn in its style's colour and marker shape).

    Points with a non-finite violation rate or GPU-hours are left out (they have no position).
    ``pick`` (the verdict's policy) is drawn larger and labelled "deploy".
    """
    fin = [i for i, c in enumerate(cards) if math.isfinite(c.slo_violation_pct) and math.isfinite(c.gpu_hours)]
    pcts = [cards[i].slo_violation_pct for i in fin]
    ghs = [cards[i].gpu_hours for i in fin]
    x_max = max([1.0, *(p * 1.5 for p in pcts)])
    x = LinearScale(symlog_pct(0.0), symlog_pct(x_max), _X0, _X1)
    top = max([*ghs, 0.0]) * 1.1 or 1.0
    yt = nice_ticks(0.0, top)
    if yt[-1] < top:
        yt.append(yt[-1] + (yt[1] - yt[0] if len(yt) > 1 else top))
    y = LinearScale(0.0, yt[-1], _Y0, _Y1)
    parts = [f'<line class="axis" x1="{_X0}" x2="{_X1}" y1="{_Y0}" y2="{_Y0}"/>',
             f'<line class="axis" x1="{_X0}" x2="{_X0}" y1="{_Y1}" y2="{_Y0}"/>']
    for v in yt:
        py = y.at(v)
        parts.append(f'<line class="grid" x1="{_X0}" x2="{_X1}" y1="{py:.1f}" y2="{py:.1f}"/>'
                     f'<text x="{_X0 - 6}" y="{py + 4:.1f}" text-anchor="end">{fmt_num(v)}</text>')
    for v in (0.0, 0.01, 0.1, 1.0, 10.0, 100.0):
        if v <= x_max:
            px = x.at(symlog_pct(v))
            parts.append(f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{_Y1}" y2="{_Y0}"/>'
                         f'<text x="{px:.1f}" y="{_Y0 + 16}" text-anchor="middle">{v:g}</text>')
    parts.append(f'<text x="{(_X0 + _X1) / 2}" y="{_H - 8}" text-anchor="middle">SLO violations (%, log scale '
                 f'offset by {_C:g})</text><text transform="translate(16,{(_Y0 + _Y1) / 2}) rotate(-90)" '
                 f'text-anchor="middle">GPU-hours</text>')
    lim = x.at(symlog_pct(SLO_VIOLATION_LIMIT_PCT))
    parts.append(f'<line class="slo" x1="{lim:.1f}" x2="{lim:.1f}" y1="{_Y1}" y2="{_Y0}" stroke="#555" '
                 f'stroke-dasharray="{SLO_DASH}"><title>SLO limit {SLO_VIOLATION_LIMIT_PCT:g} %</title></line>')
    peers = [(cards[i].slo_violation_pct, cards[i].gpu_hours) for i in fin if role(cards[i].policy) == "peer"]
    hpa = [(cards[i].slo_violation_pct, cards[i].gpu_hours) for i in fin if family(cards[i].policy) in HPA_FAMILIES]
    legend_items = [f"<span>{dash_swatch('#555', SLO_DASH)}SLO limit {SLO_VIOLATION_LIMIT_PCT:g} %</span>"]
    d = _hull_path(sorted(set(peers)), x, y, x_max)
    if d:
        parts.append(f'<path class="frontier" d="{d}" fill="none" stroke="{_FRONTIER}" stroke-width="2">'
                     "<title>peers' frontier</title></path>")
        legend_items.append(f"<span>{dash_swatch(_FRONTIER, '')}peers' frontier</span>")
    if hpa and len(set(hpa)) < len(set(peers)):
        parts.append(f'<path class="frontier" d="{_hull_path(sorted(set(hpa)), x, y, x_max)}" fill="none" '
                     f'stroke="{_FRONTIER}" stroke-width="1.5" stroke-dasharray="{HPA_DASH}">'
                     "<title>HPA frontier</title></path>")
        legend_items.append(f"<span>{dash_swatch(_FRONTIER, HPA_DASH, width=1.5)}HPA frontier</span>")
    on_front = pareto_mask(np.array([[p, g] for p, g in zip(pcts, ghs, strict=True)], dtype=np.float64)
                           .reshape(-1, 2))
    if on_front.any():
        legend_items.append('<span><svg class="swl" width="28" height="10" viewBox="0 0 28 10" aria-hidden="true">'
                            '<circle cx="14" cy="5" r="4" fill="none" stroke="#222" stroke-width="1.5"/></svg>'
                            "Pareto set of the policies run</span>")
    label_all = len(fin) <= _LABEL_ALL_UP_TO
    labelled: list[tuple[bool, float, float, str]] = []
    for k, i in enumerate(fin):
        c = cards[i]
        cx, cy = x.at(symlog_pct(c.slo_violation_pct)), y.at(c.gpu_hours)
        is_pick = pick is not None and c is pick
        tip = html.escape(f"{c.policy}: {c.gpu_hours:,.2f} GPU-h, {c.slo_violation_pct:.3f} % violations"
                          + (", Pareto set" if on_front[k] else "") + (", the verdict's pick" if is_pick else ""))
        if on_front[k]:
            parts.append(f'<circle class="pareto" cx="{cx:.1f}" cy="{cy:.1f}" r="9" fill="none" stroke="#222" '
                         'stroke-width="1.5"/>')
        st = styles[i]
        parts.append(marker_svg(st.marker, cx, cy, 6 if is_pick else 4.5, st.color, 'class="pt"')
                     + f"<title>{tip}</title>" + marker_close(st.marker))
        if label_all or is_pick or role(c.policy) != "peer":
            labelled.append((is_pick, cx, cy, labels[i] + (" — deploy" if is_pick else "")))
    parts += _labels(labelled)
    svg = (f'<svg viewBox="0 0 {_W} {_H}" role="img" aria-label="GPU-hours against SLO violations per policy">'
           + "".join(parts) + "</svg>")
    return '<div class="legend">' + "".join(legend_items) + "</div>", svg
