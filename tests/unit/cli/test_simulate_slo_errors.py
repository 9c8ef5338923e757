"""An SLO the oracle cannot meet stops ``ebb simulate`` with one ``error:`` line, a fix, exit 2.

The first two replace the schedule evaluations by fixed verdicts so each provokes exactly one of the
two failures: no headroom up to 256x meets the SLO (``search_oracle``), or the busiest-segment
digest meets it but the full workload does not even after 8 raises (``compare.search``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ebb.sim.compare as compare
from ebb.cli.main import main

_Ev = Callable[[np.ndarray], tuple[float, float]]


def _counts(tmp_path: Path) -> Path:
    p = tmp_path / "counts.txt"
    p.write_text("# bin_s=1\n" + "\n".join(str(3 + i % 4) for i in range(120)) + "\n")
    return p


def _run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    monkeypatch.setattr(sys, "argv", ["ebb", "simulate", "--quiet", "--ledger", "", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    return err


def _violating(violation_pct: float) -> _Ev:
    return lambda sched: (float(np.sum(sched)), violation_pct)


def test_an_slo_no_headroom_meets_exits_2_naming_the_flags_to_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Every schedule violates, as with a TTFT SLO shorter than any prefill.
    monkeypatch.setattr(compare, "_evaluate", lambda w, settings: _violating(100.0))
    err = _run_main(monkeypatch, capsys, "--trace", str(_counts(tmp_path)), "--policy", "oracle",
                    "--peak-replicas", "2", "--slo-ttft-ms", "0.001")
    assert "256x headroom" in err and "--slo-ttft-ms" in err and "--peak-replicas" in err


def test_a_digest_schedule_that_fails_the_full_workload_exits_2_naming_the_flags_to_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Force the long-workload path (search on the digest, verify on the whole run); the digest
    # meets the SLO at any headroom, the whole run at none.
    digests: set[int] = set()
    real_digest = compare._digest

    kept: list[compare.Workload] = []  # alive, so no later workload reuses a digest's id

    def digest(w: compare.Workload, rate: np.ndarray) -> compare.Workload:
        sub = real_digest(w, rate)
        kept.append(sub)
        digests.add(id(sub))
        return sub

    monkeypatch.setattr(compare, "_DIGEST_SECONDS", 0.0)
    monkeypatch.setattr(compare, "_digest", digest)
    monkeypatch.setattr(compare, "_evaluate",
                        lambda w, settings: _violating(0.0 if id(w) in digests else 100.0))
    # Uncapped (--load-scale): a capped oracle reports its violation rate instead of exceeding the cap.
    err = _run_main(monkeypatch, capsys, "--trace", str(_counts(tmp_path)), "--policy", "oracle",
                    "--load-scale", "40")
    assert "full workload" in err and "--slo-ttft-ms" in err and "--load-scale" in err


def test_a_real_ttft_slo_below_any_prefill_exits_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # No stand-in: the fluid engine itself finds every request late at 0.001 ms TTFT.
    err = _run_main(monkeypatch, capsys, "--trace", str(_counts(tmp_path)), "--policy", "oracle",
                    "--peak-replicas", "2", "--slo-ttft-ms", "0.001")
    assert "256x headroom" in err and "--slo-ttft-ms" in err
