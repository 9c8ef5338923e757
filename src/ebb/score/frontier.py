"""The HPA frontier and the cost–violation chart of a comparison.

The HPA frontier is the lower convex hull of the (``slo_violation_pct``, ``gpu_hours``) points
of every ``hpa`` setting and ``static``: mixing two settings over time reaches any point on the
segment between them, so the hull is the fairest reading of what the HPA can do. Beyond the
hull's last point it stays flat at that point's GPU-hours (more violations buy nothing).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ebb.score.svgplot import PALETTE, LinearScale, fmt_num, nice_ticks


def _points(cards: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    pts = [(float(c["slo_violation_pct"]), float(c["gpu_hours"])) for c in cards
           if str(c["policy"]).split(":")[0] in ("hpa", "static")]
    return sorted(set(pts))


def lower_hull(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Lower convex hull, left to right (Andrew's monotone chain, lower half)."""
    hull: list[tuple[float, float]] = []
    for p in sorted(points):
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) <= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    # Keep only the non-increasing part: a point right of the minimum costs more and violates more.
    k = int(np.argmin([y for _, y in hull])) if hull else 0
    return hull[:k + 1]


def hpa_frontier_at(cards: Sequence[Mapping[str, Any]], violation_pct: float) -> float:
    """GPU-hours of the HPA frontier at ``violation_pct`` (NaN without HPA/static points)."""
    hull = lower_hull(_points(cards))
    if not hull:
        return float("nan")
    xs = np.array([x for x, _ in hull])
    ys = np.array([y for _, y in hull])
    return float(np.interp(violation_pct, xs, ys))


def frontier_ratios(cards: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """For every policy that is neither ``hpa`` nor ``static``: its GPU-hours over the HPA frontier's at
    its own violation rate (< 1 = cheaper than any HPA mix at the same SLO). Empty without HPA/static
    points; NaN for a policy whose violation rate is not finite."""
    if not _points(cards):
        return {}
    out: dict[str, float] = {}
    for c in cards:
        pol = str(c["policy"])
        if pol.split(":")[0] in ("hpa", "static"):
            continue
        v, gh = float(c["slo_violation_pct"]), float(c["gpu_hours"])
        ref = hpa_frontier_at(cards, v) if np.isfinite(v) else float("nan")
        out[pol] = gh / ref if ref > 0 and np.isfinite(ref) else float("nan")
    return out


def render_frontier_svg(results: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """One panel per trace: every policy as a labelled point, the HPA frontier as a line."""
    w, h, pad = 420, 320, 48
    panels = []
    for i, (name, cards) in enumerate(results.items()):
        xs = [float(c["slo_violation_pct"]) for c in cards]
        ys = [float(c["gpu_hours"]) for c in cards]
        xmax = max(1.0, min(max(xs), 30.0)) * 1.05
        ymax = max(ys) * 1.1
        sx, sy = LinearScale(0.0, xmax, pad, w - 12), LinearScale(0.0, ymax, h - pad, 24)
        parts = [f'<g transform="translate({i * (w + 10)},0)">',
                 f'<text x="{w / 2}" y="16" text-anchor="middle" font-weight="bold">{html.escape(name)}</text>']
        for tx in nice_ticks(0.0, xmax):
            parts.append(f'<line x1="{sx.at(tx):.1f}" x2="{sx.at(tx):.1f}" y1="{h - pad}" y2="24" stroke="#eee"/>'
                         f'<text x="{sx.at(tx):.1f}" y="{h - pad + 14}" font-size="10" text-anchor="middle">'
                         f'{fmt_num(tx)}</text>')
        for ty in nice_ticks(0.0, ymax):
            parts.append(f'<line x1="{pad}" x2="{w - 12}" y1="{sy.at(ty):.1f}" y2="{sy.at(ty):.1f}" stroke="#eee"/>'
                         f'<text x="{pad - 4}" y="{sy.at(ty) + 3:.1f}" font-size="10" text-anchor="end">'
                         f'{fmt_num(ty)}</text>')
        parts.append(f'<text x="{w / 2}" y="{h - 12}" font-size="11" text-anchor="middle">SLO violations (%)</text>'
                     f'<text x="12" y="{h / 2}" font-size="11" transform="rotate(-90 12 {h / 2})" '
                     f'text-anchor="middle">GPU-hours</text>')
        hull = lower_hull(_points(cards))
        if hull:
            pts = " ".join(f"{sx.at(min(x, xmax)):.1f},{sy.at(y):.1f}" for x, y in hull)
            last = hull[-1]
            pts += f" {sx.at(xmax):.1f},{sy.at(last[1]):.1f}"
            parts.append(f'<polyline points="{pts}" fill="none" stroke="#888" stroke-dasharray="5 3"/>')
        for c, x, y in zip(cards, xs, ys, strict=True):
            pol = str(c["policy"])
            kind = pol.split(":")[0]
            color = {"hpa": PALETTE[0], "keda": PALETTE[1], "static": "#555", "ebb": PALETTE[2],
                     "oracle": "#000"}.get(kind, PALETTE[3])
            cx, cy = sx.at(min(x, xmax)), sy.at(y)
            label = pol.replace("hpa:target=", "hpa ").replace("ebb:profile=", "ebb ")
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{color}"><title>{html.escape(pol)}: '
                         f'{y:.2f} GPU-h, {x:.3f} %</title></circle>'
                         f'<text x="{cx + 5:.1f}" y="{cy - 4:.1f}" font-size="9" fill="{color}">'
                         f'{html.escape(label)}</text>')
        parts.append("</g>")
        panels.append("".join(parts))
    total_w = max(1, len(results)) * (w + 10)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{h}" '
            f'font-family="sans-serif" viewBox="0 0 {total_w} {h}">' + "".join(panels) + "</svg>\n")
