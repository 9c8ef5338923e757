"""A live run under a long policy spec still shows every metric: the spec is abbreviated in tables."""

from __future__ import annotations

import re

import numpy as np

from ebb.demo.report import FleetSample, LiveRun, live_policy_run
from ebb.score.report import render_report

LONG = "ebb:profile=balanced,canary=on,min=1,max=4,budget=0.001,slack_fraction=0.5,target_util=0.9"


def test_a_long_live_policy_spec_is_abbreviated_and_the_verdict_leads() -> None:
    n = 50
    run = LiveRun(policy=LONG, trace="replay", sent_s=np.linspace(0, 60, n), ok=np.ones(n, dtype=np.bool_),
                  ttft_ms=np.full(n, 120.0), e2e_ms=np.full(n, 900.0),
                  fleet=[FleetSample(0.0, 1, 1), FleetSample(30.0, 2, 2)], decisions=((30.0, 1, 2),),
                  duration_s=60.0)
    doc = render_report([live_policy_run(run)], title="live", trace_desc="replay", settings={"policy": LONG})
    assert doc.index('id="verdict"') < doc.index("<table")
    assert f"Deploy {LONG}" in doc
    tables = re.findall(r"<table><thead>.*?</table>", doc, flags=re.DOTALL)
    assert tables and all("slack_fraction" not in t and ">P1<" in t for t in tables)
    assert "120.0" in tables[1]  # TTFT p50 in the latency table
    assert f"<dt>P1</dt><dd>{LONG}</dd>" in doc
