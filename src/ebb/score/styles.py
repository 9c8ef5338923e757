"""One drawing style per policy in a report: a colour, a line dash and a point marker.

Guarantee: :func:`policy_style` gives pairwise distinct styles for the first 2,000 indices (tested),
so no two policies of a comparison share a look however many run. The first 8 are the Okabe–Ito
colours (:data:`ebb.score.svgplot.PALETTE`) drawn solid with round points; the next 24 reuse those
colours with the other three dash-and-marker pairs (8 × 4 = 32 looks a colour-blind reader can tell
apart); past 32, colours come from golden-angle hues, still cycling the four dash-and-marker pairs.
The dash and marker change together, so a line chart (dash) and a scatter chart (marker) tell the
same policies apart, and :func:`style_swatch` draws the legend entry with both.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Literal

from ebb.score.svgplot import PALETTE

__all__ = ["Marker", "PolicyStyle", "marker_close", "marker_svg", "policy_style", "style_swatch"]

Marker = Literal["circle", "square", "triangle", "diamond"]

_VARIANTS: tuple[tuple[str, Marker], ...] = (("", "circle"), ("7 3", "square"), ("2 2", "triangle"),
                                             ("9 3 2 3", "diamond"))
"""(stroke-dasharray, marker) pairs: solid/circle first, so a comparison of up to 8 policies looks as before."""
_GOLDEN_ANGLE_DEG = 137.50776405003785


@dataclass(frozen=True)
class PolicyStyle:
    """How one policy is drawn: ``color`` (CSS), ``dash`` (SVG stroke-dasharray, empty = solid), ``marker``."""

    color: str
    dash: str
    marker: Marker


def policy_style(i: int) -> PolicyStyle:
    """The style of the ``i``-th policy (0-based) of a comparison; distinct from every other index's."""
    if i < 0:
        raise ValueError(f"policy_style index must be >= 0, got {i!r}")
    if i < len(PALETTE) * len(_VARIANTS):
        dash, marker = _VARIANTS[i // len(PALETTE)]
        return PolicyStyle(PALETTE[i % len(PALETTE)], dash, marker)
    dash, marker = _VARIANTS[i % len(_VARIANTS)]
    # Past the palette: hue steps of the golden angle never repeat; 3 decimals keep 2,000 of them apart,
    # and the lightness alternates so neighbouring hues differ in value too.
    hue = (i * _GOLDEN_ANGLE_DEG) % 360.0
    return PolicyStyle(f"hsl({hue:.3f},70%,{38 + 8 * (i % 2)}%)", dash, marker)


def marker_svg(marker: Marker, cx: float, cy: float, r: float, fill: str, attrs: str = "") -> str:
    """The opening tag of an SVG point of ``marker`` shape centred on (cx, cy), about ``r`` px in radius,
    with the extra attributes ``attrs`` (``class="pt"``); close it with :func:`marker_close` (so a
    ``<title>`` can go inside)."""
    a = f" {attrs}" if attrs else ""
    if marker == "circle":
        return f'<circle{a} cx="{cx:.1f}" cy="{cy:.1f}" r="{r:g}" fill="{fill}">'
    if marker == "square":
        s = r * 0.9
        return f'<rect{a} x="{cx - s:.1f}" y="{cy - s:.1f}" width="{2 * s:.1f}" height="{2 * s:.1f}" fill="{fill}">'
    if marker == "triangle":
        h = r * 1.2
        pts = f"{cx:.1f},{cy - h:.1f} {cx + h:.1f},{cy + h * 0.8:.1f} {cx - h:.1f},{cy + h * 0.8:.1f}"
        return f'<polygon{a} points="{pts}" fill="{fill}">'
    d = r * 1.25
    pts = f"{cx:.1f},{cy - d:.1f} {cx + d:.1f},{cy:.1f} {cx:.1f},{cy + d:.1f} {cx - d:.1f},{cy:.1f}"
    return f'<polygon{a} points="{pts}" fill="{fill}">'


def marker_close(marker: Marker) -> str:
    """The closing tag of :func:`marker_svg`'s element for ``marker``."""
    return {"circle": "</circle>", "square": "</rect>"}.get(marker, "</polygon>")


def style_swatch(style: PolicyStyle, *, width: float = 2.0) -> str:
    """A 28×10-px inline SVG legend swatch: the style's line (its dash) with its marker in the middle."""
    da = f' stroke-dasharray="{html.escape(style.dash)}"' if style.dash else ""
    return (f'<svg class="swl" width="28" height="10" viewBox="0 0 28 10" aria-hidden="true">'
            f'<line x1="0" x2="28" y1="5" y2="5" stroke="{style.color}" stroke-width="{width:g}"{da}/>'
            + marker_svg(style.marker, 14.0, 5.0, 3.2, style.color) + marker_close(style.marker) + "</svg>")
