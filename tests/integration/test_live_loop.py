"""The whole live loop for 3 minutes on loopback with the real Prometheus server (issue #7 acceptance).

Load: the bundled Azure code trace (CC-BY 4.0), minutes 9–15 of the slice at 2× — a busy phase, a
lull of about three trace minutes and a burst. Prometheus is SIGKILLed 95 s in (during the lull, while
the fleet is shrinking) and started again 25 s later over its old data. The test checks what the
issue asks: scale-down in the lull, scale-up for the burst, zero failed requests, the decisions in the
ledger, one trace per cycle, and no scale-down while the data was stale.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.ledger import open_ledger
from ebb.live.demo import DemoSettings, LiveDemo
from ebb.model.ids import RunId
from ebb.telemetry.tracing import CycleTracer
from ebb.testing.tracing import in_memory_provider

pytestmark = pytest.mark.slow

KILL_AT_S = 95.0
BACK_AT_S = 120.0


def test_the_live_loop_follows_a_real_trace_and_fails_static_while_prometheus_is_down(
        prometheus_binary_path: str, tmp_path: Path) -> None:
    provider, exporter = in_memory_provider()
    events: dict[str, float] = {}

    def kill(demo: LiveDemo) -> None:
        assert demo.prometheus is not None
        demo.prometheus.kill()
        assert demo.controller is not None
        events["killed"] = demo.controller._clock() - demo.controller.t0

    def back(demo: LiveDemo) -> None:
        assert demo.prometheus is not None and demo.controller is not None
        events["restarting"] = demo.controller._clock() - demo.controller.t0
        demo.prometheus.start()
        events["back"] = demo.controller._clock() - demo.controller.t0

    demo = LiveDemo(DemoSettings(minutes=3.0, source="prometheus", workdir=tmp_path, report=tmp_path / "r.html"),
                    tracer=CycleTracer(provider), hooks={KILL_AT_S: kill, BACK_AT_S: back})
    res = demo.run()
    assert res.source == "prometheus"
    outs = res.outcomes
    assert len(outs) >= 170, f"only {len(outs)} cycles in 3 minutes"

    # Zero failed requests, and the load really ran.
    assert res.load.failed == 0
    assert len(res.load.sent_s) > 1500

    # Scale-down in the lull (wall 65–150 s), scale-up for the burst (wall ≥ 150 s).
    downs = [o for o in outs if o.acted and o.action == "scale_down"]
    ups_in_burst = [o for o in outs if o.acted and o.action == "scale_up" and o.t_s >= 145.0]
    assert any(60.0 <= o.t_s <= 150.0 for o in downs), [(o.t_s, o.action) for o in outs if o.acted]
    assert ups_in_burst, [(o.t_s, o.action) for o in outs if o.acted]
    lull_min = min(o.spec_replicas for o in outs if 60.0 <= o.t_s <= 150.0)
    burst_max = max(o.to_replicas for o in outs if o.t_s >= 145.0)
    assert burst_max > lull_min

    # Prometheus down: no scale-down from the kill until fresh data flows again.
    assert "killed" in events and "back" in events
    stale_window = [o for o in outs if events["killed"] <= o.t_s <= events["back"]]
    assert stale_window, "the outage must span some cycles"
    assert not [o for o in stale_window if o.acted and o.action == "scale_down"]
    assert any(o.note for o in stale_window), "stale cycles say why they held"
    # ...and it recovers: fresh data again within 30 s of the restart.
    after = [o for o in outs if o.t_s > events["back"]]
    assert any(o.staleness_s is not None and o.staleness_s < 5.0 for o in after if o.t_s < events["back"] + 30.0)

    # Every decision is in the ledger; every applied one has its outcome.
    ledger = open_ledger(str(res.ledger_path), create=False)
    try:
        decided = {o.decision_id for o in outs if o.decision_id is not None and o.action != "error"}
        stored = {d.decision_id for d in ledger.decisions(RunId("live-demo"))}
        assert decided and decided <= stored
        for o in outs:
            if o.acted:
                cyc = [c for c in ledger.cycles(RunId("live-demo")) if c.snapshot.get("outcome_of") == o.decision_id]
                assert len(cyc) == 1
    finally:
        ledger.close()

    # One trace per leader cycle, with a span per layer.
    roots = [s for s in exporter.get_finished_spans() if s.name == "ebb.cycle"]
    assert len(roots) == len([o for o in outs if o.n > 0])
    assert len({s.context.trace_id for s in roots}) == len(roots)

    # The report is the simulator's, filled from what happened: replicas follow load.
    html = (tmp_path / "r.html").read_text()
    assert "Replicas over time" in html and "live" in html
    card = res.policy_run.scorecard
    assert card.dropped_requests == 0 and card.scale_downs >= 1 and card.scale_ups >= 1
