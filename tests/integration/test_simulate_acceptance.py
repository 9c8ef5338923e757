"""Acceptance of ``ebb simulate`` on the real Azure LLM 2023 traces (issue: simulator foundation).

On both traces scaled with ``--peak-replicas 20``: the oracle meets the SLO (≤ 0.1 % violations)
and uses no more GPU-hours than any other policy that meets it; ``static`` (held at the oracle's
peak) meets the SLO; no policy drops a request. The full traces live in ``../shared`` (the
bundled 30-minute slices are checked too, so this never depends on ``../shared`` alone).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.model.trace import RequestTrace
from ebb.sim.compare import Comparison, compare
from ebb.sim.policies import KNOWN_POLICIES
from ebb.sim.settings import SimSettings
from ebb.config.policy_specs import parse_policies
from ebb.sources.traces import bundled_trace, load_trace

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces" / "azure-llm-2023"
POLICIES = "hpa,hpa:target=0.8,hpa:metric=inflight,keda,static,oracle"
MEETS_PCT = 0.1


def _trace(name: str) -> RequestTrace:
    if name.startswith("bundled:"):
        return bundled_trace(name.removeprefix("bundled:"))
    path = SHARED / f"AzureLLMInferenceTrace_{name}.csv"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared data folder is not beside the repository)")
    t = load_trace(path)
    assert isinstance(t, RequestTrace)
    return t


_CACHE: dict[str, Comparison] = {}


def _compared(name: str) -> Comparison:
    if name not in _CACHE:
        _CACHE[name] = compare(_trace(name), parse_policies(POLICIES, KNOWN_POLICIES), SimSettings(),
                               fidelity="request", peak_replicas=20)
    return _CACHE[name]


TRACES = ["code", "conv", "bundled:azure-code", "bundled:azure-conv"]


@pytest.mark.parametrize("name", TRACES)
def test_the_oracle_meets_the_slo_and_is_the_cheapest_policy_that_does(name: str) -> None:
    cmp = _compared(name)
    cards = {r.scorecard.policy: r.scorecard for r in cmp.runs}
    oracle = cards["oracle"]
    assert oracle.slo_violation_pct <= MEETS_PCT
    for card in cards.values():
        if card.slo_violation_pct <= MEETS_PCT:
            assert oracle.gpu_hours <= card.gpu_hours + 1e-9, card.policy


@pytest.mark.parametrize("name", TRACES)
def test_static_at_the_oracle_peak_meets_the_slo(name: str) -> None:
    cards = {r.scorecard.policy: r.scorecard for r in _compared(name).runs}
    assert cards["static"].slo_violation_pct <= MEETS_PCT
    assert cards["static"].peak_replicas == cards["oracle"].peak_replicas


@pytest.mark.parametrize("name", TRACES)
def test_no_policy_drops_a_request(name: str) -> None:
    for run in _compared(name).runs:
        assert run.scorecard.dropped_requests == 0, run.scorecard.policy
        assert run.scorecard.requests == _compared(name).requests


@pytest.mark.parametrize("name", TRACES)
def test_peak_replicas_scales_the_load_so_the_oracle_peaks_near_twenty(name: str) -> None:
    cards = {r.scorecard.policy: r.scorecard for r in _compared(name).runs}
    assert 18 <= cards["oracle"].peak_replicas <= 22
