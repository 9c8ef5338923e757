"""The Azure LLM 2023 pair as two services on one clock: the earlier file's first request is 0 s."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ebb.errors import InputError, TraceFormatError
from ebb.sources.traces.azure import read_azure
from ebb.sources.traces.azure_pair import load_azure_services

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces" / "azure-llm-2023"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"


def _azure(tmp: Path, name: str, rows: list[str]) -> Path:
    path = tmp / name
    path.write_text(HEADER + "".join(f"{r}\r\n" for r in rows), encoding="utf-8", newline="")
    return path


def _shared() -> Path:
    if not SHARED.is_dir():
        msg = f"{SHARED} is absent (the check on the published Azure files needs ../shared)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ../shared: {msg}")
        pytest.skip(msg)
    return SHARED


def test_the_earlier_file_starts_at_zero_and_the_other_at_its_real_offset(tmp_path: Path) -> None:
    code = _azure(tmp_path, "code.csv", ["2023-11-16 18:17:03.5000000,100,10", "2023-11-16 18:17:04.2500000,200,20"])
    conv = _azure(tmp_path, "conv.csv", ["2023-11-16 18:16:58.0000000,300,30", "2023-11-16 18:17:10.0000000,400,40"])
    pair = load_azure_services(code, conv)
    assert list(pair) == ["code", "conv"]
    assert pair["conv"].arrival_s.tolist() == [0.0, 12.0]
    assert pair["code"].arrival_s.tolist() == pytest.approx([5.5, 6.25], abs=1e-6)
    assert pair["code"].start_epoch_s == pair["conv"].start_epoch_s == read_azure(conv).start_epoch_s
    assert pair["code"].tokens_in.tolist() == [100, 200] and pair["conv"].tokens_out.tolist() == [30, 40]
    assert any("5.500 s after" in n for n in pair["code"].notes)


def test_whichever_file_is_earlier_sets_the_clock(tmp_path: Path) -> None:
    code = _azure(tmp_path, "code.csv", ["2023-11-16 18:00:00.0000000,1,1"])
    conv = _azure(tmp_path, "conv.csv", ["2023-11-16 18:00:30.0000000,1,1"])
    pair = load_azure_services(code, conv)
    assert pair["code"].arrival_s.tolist() == [0.0] and pair["conv"].arrival_s.tolist() == pytest.approx([30.0])
    assert not pair["code"].arrival_s.flags.writeable


def test_a_malformed_file_is_refused_as_read_azure_refuses_it(tmp_path: Path) -> None:
    good = _azure(tmp_path, "code.csv", ["2023-11-16 18:00:00.0000000,1,1"])
    bad = _azure(tmp_path, "conv.csv", ["2023-11-16 18:00:00.0000000,1,1", "2023-11-16 18:00:01,x,1"])
    with pytest.raises(TraceFormatError, match="ContextTokens") as err:
        load_azure_services(good, bad)
    assert f"{bad}:3:" in str(err.value) and "fix:" in str(err.value)
    with pytest.raises(InputError, match="not found"):
        load_azure_services(tmp_path / "absent.csv", good)


def test_the_published_pair_is_aligned_on_one_clock_of_2023_11_16() -> None:
    folder = _shared()
    pair = load_azure_services(folder / "AzureLLMInferenceTrace_code.csv", folder / "AzureLLMInferenceTrace_conv.csv")
    code, conv = pair["code"], pair["conv"]
    assert code.requests == 8819 and conv.requests == 19366
    # README: conv starts 18:15:46.68, code 18:17:03.98, both end near 19:14 — one hour, both on 2023-11-16.
    assert conv.arrival_s[0] == 0.0 and code.arrival_s[0] == pytest.approx(77.30, abs=0.01)
    assert code.arrival_s[-1] == pytest.approx(3513.25, abs=0.01)
    assert conv.arrival_s[-1] == pytest.approx(3501.72, abs=0.01)
    assert str(np.datetime64(int(code.start_epoch_s or 0), "s")) == "2023-11-16T18:15:46"
    alone = read_azure(folder / "AzureLLMInferenceTrace_code.csv")
    assert np.allclose(code.arrival_s - code.arrival_s[0], alone.arrival_s, atol=1e-6)
