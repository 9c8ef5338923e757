"""The request-fidelity size cap (issue 12, L4): expanding counts or scaling the load past
MAX_REQUESTS is refused with one InputError naming the file, the request count and the fix —
computed from the counts before anything is allocated (``counts_1e9.txt`` used to ask numpy for
447 GiB). How long a refusal takes is ``bench/limits.py``'s (``cap-*``); here the bound is on memory."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from ebb.errors import InputError
from ebb.model import trace_ops
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries, RequestTrace
from ebb.model.trace_ops import MAX_BIN_COUNT, MAX_REQUESTS, counts_to_requests, scale_counts, scale_requests

REDTEAM = Path(__file__).resolve().parents[4] / "shared" / "redteam" / "inputs"
RUN = "from ebb.cli.main import main; main()"


def series(counts: list[int], source: str = "counts_1e9.txt") -> CountSeries:
    return CountSeries(TraceName("c"), np.asarray(counts, dtype=np.int64), 1.0, source=source)


def small_trace(n: int = 100) -> RequestTrace:
    return RequestTrace(TraceName("r"), np.arange(n, dtype=np.float64), np.full(n, 10, dtype=np.int64),
                        np.full(n, 5, dtype=np.int64), source="log.csv")


def test_a_billion_requests_a_second_is_refused_before_allocating() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as exc:
            counts_to_requests(series([10**9] * 60), seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # nothing the size of the result was allocated
    text = str(exc.value)
    assert text.startswith("counts_1e9.txt: ") and "\n" not in text
    assert "60,000,000,000 requests" in text and f"{MAX_REQUESTS:,}" in text and "--fidelity fluid" in text


def test_counts_whose_sum_passes_int64_are_refused_not_wrapped() -> None:
    # 20 x (10**18 - 1) wraps to a negative int64 sum; the cap sums in float64
    with pytest.raises(InputError, match="requests, more than"):
        counts_to_requests(series([10**18 - 1] * 20), seed=0)


def test_the_cap_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_ops, "MAX_REQUESTS", 1000)
    assert counts_to_requests(series([500, 500]), seed=1).requests == 1000
    with pytest.raises(InputError, match="1,001 requests, more than the 1,000"):
        counts_to_requests(series([500, 501]), seed=1)
    assert scale_requests(small_trace(100), 10.0, seed=1).requests == 1000
    with pytest.raises(InputError, match="1,010 requests"):
        scale_requests(small_trace(100), 10.1, seed=1)


def test_scaling_a_request_log_past_the_cap_is_refused_before_allocating() -> None:
    trace = small_trace(100)
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as exc:
            scale_requests(trace, 1e9, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # nothing the size of the result (10**11 requests) was allocated
    assert str(exc.value).startswith("log.csv: scaling the load x1e+09 gives 100,000,000,000 requests")


def test_scaling_counts_past_the_bin_bound_is_refused_instead_of_overflowing() -> None:
    with pytest.raises(InputError, match="past the 1e\\+18 limit"):
        scale_counts(series([10**9, 5]), 1e10, seed=0)
    scaled = scale_counts(series([10**9, 5]), 1e8, seed=0)  # 10**17 per bin: fine
    assert int(scaled.counts[0]) == 10**17 < MAX_BIN_COUNT


def test_simulate_refuses_a_huge_counts_file_at_request_fidelity_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "counts_1e9.txt"
    path.write_text("# bin_s=1\n" + "1000000000\n" * 60)
    # At load x1 (--peak-replicas off): the calibration would first scale 1e9 requests/s down to a
    # 20-replica load, which then runs; the cap is about expanding the file as it is.
    res = subprocess.run([sys.executable, "-c", RUN, "simulate", "--trace", str(path), "--format", "counts",
                          "--fidelity", "request", "--quiet", "--ledger", "", "--peak-replicas", "off"],
                         capture_output=True, text=True, timeout=120, env=os.environ | {"COLUMNS": "1000"})
    assert res.returncode == 2 and res.stdout == "", res.stderr
    lines = res.stderr.strip().splitlines()
    # Refused before anything is expanded: by the run-time budget, which counts the 60 G requests first
    # (ebb.sim.estimate), or by the request cap when the budget is off.
    assert len(lines) == 1 and ("60.0 G requests" in lines[0] or "60,000,000,000 requests" in lines[0]), lines
    assert "--fidelity fluid" in lines[0] and "Traceback" not in res.stderr


def test_the_red_team_counts_file_is_refused_without_allocating() -> None:
    path = REDTEAM / "repro" / "counts_1e9.txt"
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared red-team folder is not beside the repository)")
    from ebb.sources.traces import load_trace

    loaded = load_trace(path, "counts")
    assert isinstance(loaded, CountSeries)
    with pytest.raises(InputError, match=f"{path}: expanding this count series"):
        counts_to_requests(loaded, seed=0)


def test_simulate_reports_an_unforeseen_memory_error_as_one_input_error(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The backstop for what the caps cannot foresee (a machine with little memory)."""
    from typer.testing import CliRunner

    import ebb.cli.simulate as simulate_cli
    from ebb.cli.main import app

    def no_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError("Unable to allocate 7.45 GiB for an array with shape (1000000001,) and data type float64")

    monkeypatch.setattr(simulate_cli, "compare", no_memory)
    path = tmp_path / "short.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 9, "output_length": 5}\n'
                    '{"timestamp": 1000000, "input_length": 9, "output_length": 5}\n')
    # --max-run-min 0 with --quiet: no estimate slice, so the patched compare is what runs out of memory
    res = CliRunner().invoke(app, ["simulate", "--trace", str(path), "--quiet", "--ledger", "", "--max-run-min", "0"])
    assert isinstance(res.exception, InputError), res.output
    text = str(res.exception)
    assert text.startswith(f"{path}: not enough memory to simulate this trace (2 requests over 16 min 40 s)")
    assert "7.45 GiB" in text and "--fidelity fluid" in text and "\n" not in text


def far_apart(span_s: float) -> RequestTrace:
    return RequestTrace(TraceName("far"), np.array([0.0, span_s]), np.array([9, 9], dtype=np.int64),
                        np.array([5, 5], dtype=np.int64), source="far.jsonl")


def test_a_trace_spanning_31_years_is_refused_before_its_per_second_state_is_allocated() -> None:
    """Two timestamps 10**9 s apart (milliseconds read as seconds) once asked numpy for 7.45 GiB per
    array, which the kernel, not Python, refused: the test process was killed."""
    from ebb.config.policy_specs import parse_policies
    from ebb.sim.estimate import plan_run
    from ebb.sim.policies import KNOWN_POLICIES
    from ebb.sim.settings import SimSettings

    tracemalloc.start()
    try:
        with pytest.raises(InputError) as exc:
            plan_run(far_apart(1e9), parse_policies("static", KNOWN_POLICIES), SimSettings(), fidelity="request")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    text = str(exc.value)
    assert text.startswith("far.jsonl: the trace spans 11,574.1 days, more than the 366 days") and "\n" not in text
    assert "--window-s" in text and "milliseconds" in text


def test_the_span_cap_is_inclusive() -> None:
    from ebb.model.trace_ops import MAX_SPAN_S, refuse_long_span

    refuse_long_span("t.csv", float(MAX_SPAN_S))
    for bad in (MAX_SPAN_S + 1.0, float("nan"), float("inf")):
        with pytest.raises(InputError, match="^t.csv: the trace spans"):
            refuse_long_span("t.csv", bad)


def test_a_fluid_run_past_the_bin_cap_is_refused_naming_a_bin_that_fits() -> None:
    from ebb.sim.compare import prepare
    from ebb.sim.settings import SimSettings

    with pytest.raises(InputError) as exc:  # 30 days at the request log's default 0.1 s bins: 26 M bins
        prepare(far_apart(30 * 86_400.0), "fluid", SimSettings())
    text = str(exc.value)
    assert "25,920,001 bins, more than the 10,000,000" in text and "--fluid-bin-ms 1000" in text
    assert prepare(far_apart(30 * 86_400.0), "fluid", SimSettings(), fluid_bin_s=1.0).counts.sum() == 2
