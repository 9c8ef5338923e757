"""parse_exposition on synthetic text: what it tolerates, what it refuses, and its bounds."""

from __future__ import annotations

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ebb.errors import InputError
from ebb.sources.engines.exposition import MAX_LINE_CHARS, parse_exposition


def test_counter_names_stay_as_written_although_prometheus_client_renames_them() -> None:
    text = ("# TYPE nv_inference_request_success counter\nnv_inference_request_success{model=\"m\"} 161\n"
            "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 12\n")
    fam = list(text_string_to_metric_families(text))
    assert fam[0].samples[0].name == "nv_inference_request_success_total"  # the library's renaming
    expo = parse_exposition(text, source="t")
    assert expo.series("nv_inference_request_success")[0].value == 161.0
    assert expo.series("vllm:prompt_tokens_total")[0].value == 12.0
    assert expo.series("nv_inference_request_success_total") == ()
    assert expo.types == {"nv_inference_request_success": "counter", "vllm:prompt_tokens_total": "counter"}


def test_labels_are_sorted_and_spaces_after_commas_scientific_values_and_timestamps_are_read() -> None:
    text = 'x_bucket{model="a", le="100",  version="1"} 8.128902e+06 1700000000000\n'
    (s,) = parse_exposition(text, source="t").series("x_bucket")
    assert s.labels == (("le", "100"), ("model", "a"), ("version", "1"))
    assert s.value == 8128902.0 and s.label("le") == "100" and s.label("nope") is None


def test_all_help_and_type_first_then_samples_keeps_types_and_samples() -> None:
    text = "# HELP a A\n# TYPE a gauge\n# HELP b B\n# TYPE b counter\na 1\nb 2\n"
    expo = parse_exposition(text, source="t")
    assert expo.types == {"a": "gauge", "b": "counter"}
    assert (expo.series("a")[0].value, expo.series("b")[0].value) == (1.0, 2.0)


def test_noise_lines_are_dropped_one_by_one_with_their_line_numbers() -> None:
    text = "a 1\n...\nb{x=\"1\",...} 2\n* Connection #0 to host h left intact\nc 3\n"
    expo = parse_exposition(text, source="t")
    assert sorted(expo.samples) == ["a", "c"]
    assert [r.split(":")[0] for r in expo.dropped] == ["line 2", "line 3", "line 4"]


def test_nan_inf_and_out_of_range_values_are_dropped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    text = "g NaN\nh +Inf\ni -Inf\nj 1" + "0" * 400 + "\nk 2\n"
    with caplog.at_level(logging.WARNING, logger="ebb.sources.engines.exposition"):
        expo = parse_exposition(text, source="t")
    assert list(expo.samples) == ["k"]
    assert len(expo.dropped) == 4 and all("not a finite number" in r for r in expo.dropped)
    assert [r.split(": value ")[1].split(" dropped")[0] for r in expo.dropped] == ["NaN", "inf", "-inf",
                                                                                  "past float range"]
    assert "4 sample(s) dropped as misleading" in caplog.text


def test_negative_counts_are_dropped_but_a_negative_gauge_is_kept() -> None:
    text = ("# TYPE c counter\nc -1\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} -3\nh_count -3\nh_sum -2.5\n"
            "# TYPE rate gauge\nrate -1\nuntyped_total -4\n# TYPE g_total gauge\ng_total -5\n")
    expo = parse_exposition(text, source="t")
    assert sorted(expo.samples) == ["g_total", "h_sum", "rate"]  # a sum of negative observations is legal
    assert sum("negative count" in r for r in expo.dropped) == 4


def test_bounds_bytes_not_utf8_and_empty_are_input_errors_naming_the_source() -> None:
    with pytest.raises(InputError, match=r"^http://p:1/metrics: exposition is not UTF-8"):
        parse_exposition(b"a 1\n\xff\xfe", source="http://p:1/metrics")
    with pytest.raises(InputError, match="over the 10-byte limit"):
        parse_exposition(b"a 1\nb 2\nc 3\n", source="s", max_bytes=10)
    with pytest.raises(InputError, match="over the 10-byte limit"):
        parse_exposition("é" * 6, source="s", max_bytes=10)  # 12 bytes of UTF-8
    with pytest.raises(InputError, match="no Prometheus exposition sample"):
        parse_exposition("# HELP a only comments\n\n", source="s")
    with pytest.raises(InputError, match=r"no Prometheus exposition sample .*line 1: not exposition"):
        parse_exposition("<html><body>404</body></html>", source="s")


def test_a_line_over_the_length_cap_is_dropped_unread() -> None:
    text = "a 1\nb{x=\"" + "y" * MAX_LINE_CHARS + "\"} 2\nc 3\n"
    expo = parse_exposition(text, source="t")
    assert sorted(expo.samples) == ["a", "c"]
    assert expo.dropped == (f"line 2: longer than {MAX_LINE_CHARS:,} characters, not read",)


def test_bytes_with_a_bom_and_crlf_line_ends_parse() -> None:
    expo = parse_exposition("\ufeff# TYPE a gauge\r\na 1\r\nb 2\r\n".encode(), source="t")
    assert (expo.series("a")[0].value, expo.series("b")[0].value) == (1.0, 2.0)


@pytest.mark.parametrize("text", [
    'a{x="1", le="2"} 3 4\n', 'a{x="1",} 3\n', "a{} 1\n", 'a{__x="1"} 1\n', "a 1 # {x} 2\n", 'a{x="a}b"} 1\n',
    "a\t1\n", 'a{x="1"}1\n', "a 1_0\n", 'a{x="1",x="2"} 1\n', 'a{x="\\"q\\n"} 1\n', "a 1 2 3\n", "a 1e400\n",
    "a " + "9" * 5000 + "\n", "a 1 " + "9" * 400 + "\n", "# TYPE a\n", "# HELP 1a x\n", "#  HELP a b\n", "#x HELP 1a\n",
    "# TYPE a counter\na 1\n", "# TYPE a_total counter\na_total 1\n", 'a{x = "1"} 1\n', "a{x=1} 1\n", "１ 1\n",
    "a １\n", "a{x=\"é\"} -0\n", "a +Inf\nb nan\nc -1\n", "a 0x1F\n", '{__name__="a"} 1\n',
])
def test_fast_parser_agrees_with_prometheus_client_on_tricky_lines(text: str) -> None:
    def outcome(parser: str) -> object:
        try:
            e = parse_exposition(text, source="t", parser=parser)
        except InputError as exc:
            return str(exc)
        return dict(e.samples), dict(e.types), sorted(e.dropped)
    assert outcome("fast") == outcome("prometheus_client")


@pytest.mark.parametrize("text", ["# TYPE a gauge extra\na 1\n", "# TYPE a sideways\na 1\n", "# TYPE _total counter\na 1\n",
                                  "# TYPE a untyped\na 1\n", "# TYPE a info\na 1\n"])
def test_fast_parser_agrees_on_type_lines_prometheus_client_refuses(text: str) -> None:
    fast, ref = (parse_exposition(text, source="t", parser=p) for p in ("fast", "prometheus_client"))
    assert (dict(fast.samples), sorted(fast.dropped)) == (dict(ref.samples), sorted(ref.dropped))
