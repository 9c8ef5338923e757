"""Ebb's policy in fluid mode decides exactly as the reference recorded before it was made fast.

``tests/data/sim/ebb_fluid_reference.json`` holds, for two short inputs (3 h of per-second counts
with bursts; the bundled ``azure-code`` slice at 6× load in 0.1 s bins, where the fast path acts
between reconciles) and two policies (``ebb``, ``ebb:canary=on``), every change of the replica
target, every noteworthy decision and the scorecard, as ``tests/data/sim/make_ebb_fluid_reference.py``
wrote it (and builds the same runs here): first at commit 8dec1e7, before the policy was made fast;
rewritten at issue #31, whose policy changes move the decisions (a surge sized to what the fleet
needs when its capacity lands, none once the backlog drains first; a learned floor only from late
requests whose wait the need never outgrew; the largest rise seen held while an hour of history
cannot bound the risk — with the need at the history's start, sized at a scale-up's headroom until
saturation has measured the replica's capacity) and whose judgement counts a scale-down that left the fleet below a later
breach's need within the 1 h memory. The optimised policy must take the same actions at the same
times to the same replica counts; the scorecard's numbers agree within float tolerance.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "sim"
REFERENCE = json.loads((DATA / "ebb_fluid_reference.json").read_text())


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


@pytest.mark.parametrize("ref", REFERENCE["runs"], ids=lambda r: f"{r['case']}-{r['policy']}")
def test_ebb_in_fluid_mode_decides_as_the_reference(ref: dict[str, Any], reference_maker: ModuleType) -> None:
    now = reference_maker.run_case(ref["case"], ref["policy"])
    assert now["decisions"] == ref["decisions"], "replica-target changes differ from the reference"
    assert now["noteworthy"] == ref["noteworthy"], "noteworthy decisions differ from the reference"
    bad = {k: (v, now["scorecard"][k]) for k, v in ref["scorecard"].items() if not _close(v, now["scorecard"][k])}
    assert not bad, f"scorecard differs from the reference (reference, now): {bad}"


def test_the_reference_holds_decisions_worth_comparing() -> None:
    # A fixture with no scaling would pass whatever the policy did.
    for ref in REFERENCE["runs"]:
        assert len(ref["decisions"]) >= 3, ref["case"]
    assert any(t % 1.0 for ref in REFERENCE["runs"] for t, _, _ in ref["decisions"]), "no fast-path decision"
