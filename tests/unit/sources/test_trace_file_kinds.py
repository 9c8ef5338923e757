"""Trace paths that name anything (issue 32, item 9): devices are never read, unknown files never echoed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ebb.errors import InputError, TraceFormatError
from ebb.sources.traces import detect_format, load_trace


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused_before_it_is_read(path: str) -> None:
    with pytest.raises(InputError, match="not a regular file") as err:
        load_trace(path)
    assert path in str(err.value) and "fix:" in str(err.value)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(InputError, match="not a regular file"):
        detect_format(tmp_path / "pipe")


def test_an_unrecognised_file_is_described_by_its_shape_never_quoted(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETSALT$hash:19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n")
    with pytest.raises(TraceFormatError) as err:
        load_trace(secret)
    msg = str(err.value)
    assert "SECRETSALT" not in msg and "root:" not in msg
    assert str(secret) in msg and "Azure LLM CSV" in msg and "42 characters, 1 comma-separated field(s)" in msg
