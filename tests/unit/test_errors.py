"""The error tree's promise to the CLI: one line, naming the input and the fix, whatever was quoted."""

from __future__ import annotations

from ebb.errors import MAX_MESSAGE_CHARS, InputError, TraceFormatError


def test_an_input_error_is_one_line_with_its_path_line_and_fix() -> None:
    exc = InputError("bad value 'a\nb'\r", path="t.csv", line=3, fix="write a number")
    assert str(exc) == "t.csv:3: bad value 'a b'  (fix: write a number)"


def test_a_huge_quoted_value_is_cut_in_the_middle_and_the_fix_survives() -> None:
    value = "[" * 30_000 + "tail"
    exc = TraceFormatError(f"bad timestamp {value!r} in column 't'", path="trace.csv", line=2,
                           fix="times must be epoch seconds")
    text = str(exc)
    assert len(text) < MAX_MESSAGE_CHARS + 200 and "\n" not in text
    assert text.startswith("trace.csv:2: bad timestamp '[[[") and text.endswith("(fix: times must be epoch seconds)")
    assert "in column 't'" in text and "characters cut" in text


def test_a_message_at_the_limit_is_kept_whole() -> None:
    msg = "x" * MAX_MESSAGE_CHARS
    assert str(InputError(msg)) == msg
