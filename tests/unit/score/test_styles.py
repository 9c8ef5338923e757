"""Every policy of a report gets its own colour, dash and marker, however many ran."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ebb.score.styles import marker_close, marker_svg, policy_style, style_swatch
from ebb.score.svgplot import PALETTE


def test_the_first_two_thousand_styles_are_pairwise_distinct() -> None:
    styles = [policy_style(i) for i in range(2000)]
    assert len(set(styles)) == len(styles)


def test_up_to_eight_policies_keep_the_okabe_ito_colours_solid_with_round_points() -> None:
    assert [(s.color, s.dash, s.marker) for s in map(policy_style, range(8))] == [(c, "", "circle") for c in PALETTE]
    ninth = policy_style(8)
    assert ninth.color == PALETTE[0] and ninth.dash and ninth.marker != "circle"


def test_a_negative_index_is_refused() -> None:
    with pytest.raises(ValueError, match="-1"):
        policy_style(-1)


@pytest.mark.parametrize("i", range(4))
def test_markers_and_swatches_are_well_formed_svg(i: int) -> None:
    st = policy_style(8 * i)
    ET.fromstring(marker_svg(st.marker, 10.0, 10.0, 4.0, st.color, 'class="pt"') + marker_close(st.marker))
    swatch = ET.fromstring(style_swatch(st))
    assert swatch.tag == "svg" and len(list(swatch)) == 2
