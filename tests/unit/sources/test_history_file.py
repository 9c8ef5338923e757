"""The saved history trace: written by --save-trace, read back bit for bit, detected, refused when malformed."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ebb.errors import TraceFormatError
from ebb.model.ids import TraceName
from ebb.model.measured import BucketSeries, MeasuredFleet
from ebb.model.trace import RequestTrace
from ebb.sources.traces import detect_format, open_trace
from ebb.sources.traces.history_file import (
    is_history_file,
    read_history_measured,
    read_history_trace,
    write_history_trace,
)


def _trace(service: bool) -> RequestTrace:
    rng = np.random.default_rng(0)
    ms = np.sort(rng.integers(0, 3_600_000, 500))
    return RequestTrace(TraceName("vllm fleet"), ms / 1000.0, rng.integers(1, 9000, 500), rng.integers(1, 900, 500),
                        source="http://prom:9090", start_epoch_s=1.7e9, notes=("rebuilt",),
                        service_s=rng.random(500) * 7 if service else None)


def _measured() -> MeasuredFleet:
    counts = np.zeros((12, 3))
    counts[3, 1], counts[11, 2] = 7.0, 2.5
    return MeasuredFleet(start_unix_s=1.7e9, step_s=30.0, replicas=np.repeat([1.0, 3.0, 2.0], 40), bin_s=300.0,
                         ttft_s=BucketSeries((0.5, 2.5, math.inf), counts), e2e_s=None,
                         replicas_from='sum(up{job="vllm"})', notes=("a note",))


@pytest.mark.parametrize("name", ["t.ebbh", "t.ebbh.gz"])
@pytest.mark.parametrize("service", [True, False])
def test_a_saved_trace_reads_back_equal_with_its_as_run_record(tmp_path: Path, name: str, service: bool) -> None:
    tr, m = _trace(service), _measured()
    path = tmp_path / name
    write_history_trace(path, tr, provenance={"prometheus": "http://prom:9090", "engine": "vllm"}, measured=m)
    back = read_history_trace(path)
    assert back.name == tr.name and back.start_epoch_s == tr.start_epoch_s and back.notes == tr.notes
    for a, b in ((back.arrival_s, tr.arrival_s), (back.tokens_in, tr.tokens_in), (back.tokens_out, tr.tokens_out)):
        assert np.array_equal(a, b)
    assert (back.service_s is None) == (not service)
    if service:
        assert back.service_s is not None and tr.service_s is not None
        assert np.array_equal(back.service_s, tr.service_s)
    got = read_history_measured(path)
    assert got is not None and got.ttft_s is not None and m.ttft_s is not None
    assert np.array_equal(got.replicas, m.replicas) and np.array_equal(got.ttft_s.counts, m.ttft_s.counts)
    assert got.ttft_s.bounds == m.ttft_s.bounds and got.replicas_from == m.replicas_from and got.notes == m.notes
    assert detect_format(path) == "history"
    assert np.array_equal(open_trace(str(path)).arrival_s, tr.arrival_s)  # --trace FILE with --format auto


def test_a_trace_saved_without_replicas_has_no_as_run_record(tmp_path: Path) -> None:
    path = tmp_path / "t.ebbh"
    write_history_trace(path, _trace(False), provenance={}, measured=None)
    assert read_history_measured(path) is None


def test_arrivals_off_the_millisecond_grid_are_not_written(tmp_path: Path) -> None:
    tr = _trace(False)
    odd = RequestTrace(tr.name, tr.arrival_s + 1e-4, tr.tokens_in, tr.tokens_out)
    with pytest.raises(ValueError, match="whole milliseconds"):
        write_history_trace(tmp_path / "t.ebbh", odd, provenance={}, measured=None)


@pytest.mark.parametrize(("edit", "message", "line"), [
    (lambda t: t.replace("# notes", "# colour"), "unknown header 'colour'", 5),
    (lambda t: t.replace('# name "vllm fleet"', "# name {oops"), "name header is not JSON", 2),
    (lambda t: t.replace("arrival_ms,tokens_in", "when,tokens_in"), "expected the column header", 6),
    (lambda t: t + "12,3\n", "row has 2 fields", None),
    (lambda t: t + "99999999,-3,4\n", "tokens_in '-3' is negative", None),
])
def test_a_malformed_saved_trace_is_one_error_naming_the_line(tmp_path: Path, edit, message: str,  # type: ignore[no-untyped-def]
                                                              line: int | None) -> None:
    path = tmp_path / "t.ebbh"
    write_history_trace(path, _trace(False), provenance={}, measured=None)
    path.write_text(edit(path.read_text()))
    with pytest.raises(TraceFormatError, match=message) as err:
        read_history_trace(path)
    if line is not None:
        assert err.value.line == line
    assert "--save-trace" in str(err.value)


def test_only_a_saved_history_is_taken_for_one(tmp_path: Path) -> None:
    saved, gz, other = tmp_path / "t.ebbh", tmp_path / "t.ebbh.gz", tmp_path / "a.csv"
    for p in (saved, gz):
        write_history_trace(p, _trace(False), provenance={}, measured=None)
    other.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    assert is_history_file(saved) and is_history_file(gz)
    assert not any(is_history_file(p) for p in (other, tmp_path, tmp_path / "missing"))
