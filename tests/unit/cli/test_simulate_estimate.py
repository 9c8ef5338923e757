"""``ebb simulate`` measures its run time before it starts and refuses a run past --max-run-min (#35 item 3)."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import ebb.sim.compare as compare_module
import ebb.sim.estimate as estimate_module
from ebb.cli.main import app, main


def _counts(tmp_path: Path) -> Path:
    p = tmp_path / "counts.txt"
    p.write_text("# bin_s=1\n" + "\n".join(str(3 + (i // 300) % 5) for i in range(3600)) + "\n")
    return p


def _seconds(span: str) -> float:
    """The seconds of a ``human_span`` text (``45 s``, ``2.5 s``, ``3 min 05 s``, ``2 h 10 min``, ``3.1 days``)."""
    units = {"s": 1.0, "min": 60.0, "h": 3600.0, "days": 86_400.0}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+) (s|min|h|days)\b", span))


def _no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    def ran(*_args: object) -> None:
        raise AssertionError("a simulation ran")

    monkeypatch.setattr(compare_module, "simulate_requests", ran)
    monkeypatch.setattr(compare_module, "simulate_fluid", ran)


@pytest.mark.parametrize("trace", ["azure-conv", "counts"])
def test_a_billion_fold_load_is_refused_before_any_simulation_with_its_estimate_and_the_flags_that_shrink_it(
        trace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _no_simulation(monkeypatch)
    path = str(_counts(tmp_path)) if trace == "counts" else trace
    monkeypatch.setattr(sys, "argv", ["ebb", "simulate", "--trace", path, "--load-scale", "1e9", "--ledger", ""])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    line = err.splitlines()[-1]
    assert line.startswith("error: this run would take too long: ") and "expected ≥ " in line, err
    assert "past --max-run-min 30" in line and "--window-s" in line and "a smaller --load-scale" in line
    # A request log could go fluid; a count series already is.
    assert ("--fidelity fluid" in line) == (trace == "azure-conv")


def test_the_printed_estimate_is_measured_so_a_slower_machine_prints_a_longer_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _counts(tmp_path)

    def estimate(run_s: float, *flags: str) -> tuple[int, str]:
        """The printed estimate when the clock says each simulation of the slice took ``run_s``."""
        ticks = itertools.count(step=run_s)
        monkeypatch.setattr(estimate_module, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
        res = CliRunner().invoke(app, ["simulate", "--trace", str(counts), "--peak-replicas", "off",
                                       "--policy", "static", "--ledger", "", *flags])
        text = res.output if res.exception is None else str(res.exception)
        return res.exit_code, text

    code, quick = estimate(0.01)
    assert code == 0, quick
    code, slow = estimate(0.03)
    assert code == 0, slow
    said = [re.search(r"expected ≈ (.+?) \(measured on 2 % of the trace\)", out) for out in (quick, slow)]
    assert said[0] and said[1], (quick, slow)
    assert _seconds(said[1].group(1)) == pytest.approx(3 * _seconds(said[0].group(1)), rel=0.05)
    # Measured 1,000 times slower: past the budget, refused after the slice, before the run.
    code, refused = estimate(10.0)
    assert code != 0 and "past --max-run-min 30" in refused and "measured on 2 % of the trace" in refused
