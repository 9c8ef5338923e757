"""Spans and counts print in human units: '58.6 days', not '84332.5 min'."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebb.score.names import abbreviate, legend
from ebb.score.units import human_count, human_span, plural


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0, "0 s"), (0.25, "0.25 s"), (1.0, "1 s"), (2.5, "2.5 s"), (45.0, "45 s"), (59.6, "60 s"),
    (1200.0, "20 min"), (725.0, "12 min 05 s"), (7500.0, "2 h 05 min"), (36 * 3600, "36 h"),
    (58.6 * 86400 + 30, "58.6 days"), (math.nan, "—"), (-45.0, "-45 s"),
])
def test_a_span_is_shown_in_the_largest_readable_unit(seconds: float, text: str) -> None:
    assert human_span(seconds) == text


@pytest.mark.parametrize(("n", "text"), [
    (0, "0"), (5050, "5,050"), (99_999, "99,999"), (245_000, "245 k"), (1_234_567, "1.2 M"),
    (3_400_000_000, "3.4 G"), (123_456_789, "123 M"), (math.inf, "—"),
])
def test_a_count_is_exact_below_100k_then_abbreviated(n: float, text: str) -> None:
    assert human_count(n) == text


@given(st.floats(0.0, 1e9))
def test_every_span_has_a_number_and_a_unit_and_stays_short(seconds: float) -> None:
    text = human_span(seconds)
    assert text.split()[-1] in ("s", "min", "h", "days")
    assert len(text) <= 14


def test_long_specs_become_p_labels_with_a_legend_and_short_ones_stay() -> None:
    long_spec = "ebb:profile=balanced,canary=on,min=1,max=40"
    labels = abbreviate(["hpa:target=0.5", long_spec, "oracle", long_spec + ",seed=1"], 16)
    assert labels == {"hpa:target=0.5": "hpa:target=0.5", long_spec: "P1", "oracle": "oracle",
                      long_spec + ",seed=1": "P2"}
    assert legend(labels) == [("P1", long_spec), ("P2", long_spec + ",seed=1")]
    # A policy literally named like a label is abbreviated too, so labels never collide.
    assert abbreviate(["P1", long_spec], 16) == {"P1": "P1", long_spec: "P2"}


@pytest.mark.parametrize(("n", "noun", "text"), [
    (1, "policy", "1 policy"), (2, "policy", "2 policies"), (0, "policy", "0 policies"),
    (1, "scale-down", "1 scale-down"), (3, "scale-down", "3 scale-downs"), (2, "day", "2 days"),
    (2, "burst", "2 bursts"), (2, "match", "2 matches"), (1_200, "request", "1,200 requests"), (2, "GPU", "2 GPUs"),
])
def test_a_counted_noun_is_singular_only_for_one(n: int, noun: str, text: str) -> None:
    assert plural(n, noun) == text


def test_an_irregular_plural_is_given_once() -> None:
    assert (plural(1, "series", "series"), plural(4, "series", "series")) == ("1 series", "4 series")
