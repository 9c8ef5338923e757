"""Ebb scaling real llama.cpp servers for 3 minutes under a real trace (issues #14 and #16).

What runs: ``ebb demo --live --engine llamacpp``'s settings (:func:`ebb.demo.stack.llamacpp_settings`):
4 ``llama-server`` processes at start (2 slots each, ``--metrics``, one CPU thread, the tiny random
model), the router's llama.cpp backend, the agent polling the router's ``/stats`` and every server's
``/metrics`` with the ``llamacpp`` profile, the controller in act mode, and the Azure code trace's
minutes 22–28 at 2× (a busy stretch calming down, smaller bursts) with token counts scaled for CPU
inference.

Checked: the fleet shrinks, at most 1 % of requests break the TTFT SLO (issue #16), no request fails,
every decision and outcome is in the ledger, and llama.cpp's own count of running + deferred requests agrees with the
router's in-flight count. Every ~0.2 s a sampler reads the router's ``/stats`` (``inflight``: requests
dispatched to a server, not yet answered), then every server's ``/metrics`` at once, then ``/stats``
again. The reads are not atomic (a request can start or finish between them), so llama.cpp's
Σ(processing + deferred) is compared with the *range* the two router reads span. And the two sides
count different windows of one request: the router from dispatch until it has read the answer,
llama.cpp from task arrival until the slot is freed, so a request in transit (sent, not yet arrived;
answered, not yet read) is the router's only. Tolerances, from measurement (docs/live.md):

* llama.cpp above the range by more than 1: in at most 1 % of the samples (measured: none);
* busy samples (either count > 0) with an empty router queue: within 1 of the range in ≥ 95 %
  (measured 99.1 % in two runs);
* every busy sample, including the burst, where the router queue is long and each freed slot is
  refilled at once (so every turnover puts requests in transit at both ends, more so with 2 cores
  saturated): llama.cpp at most 1 + 25 % of the router's in-flight count below it, in ≥ 90 %
  (measured 97.3 % and 98.7 % in two runs; within 1 only ~80 % of the queued samples).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ebb.ledger import open_ledger
from ebb.demo.stack import LiveDemo, llamacpp_settings
from ebb.model.ids import RunId
from ebb.sources.engines.profiles import engine_profile
from ebb.sources.engines.reading import read_engine_text

pytestmark = pytest.mark.slow

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
SAMPLE_S = 0.2
PROFILE = engine_profile("llamacpp")


def _get(url: str) -> bytes:
    with OPENER.open(url, timeout=2.0) as resp:
        return bytes(resp.read())


class Sampler:
    """Router /stats, every server's /metrics (in parallel), router /stats again — every SAMPLE_S."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.skipped = 0
        self.stop = threading.Event()
        self.pool = cf.ThreadPoolExecutor(8)

    def run(self, demo: LiveDemo) -> None:
        assert demo.router is not None
        router = demo.router
        while not self.stop.wait(SAMPLE_S):
            try:
                urls = [w["url"] for w in router.workers()]
                before = json.loads(_get(router.url + "/stats"))
                texts = list(self.pool.map(lambda u: _get(u + PROFILE.metrics_path), urls))
                after = json.loads(_get(router.url + "/stats"))
            except OSError:
                self.skipped += 1  # a server stopped between the listing and the read (a drain ended)
                continue
            except RuntimeError:
                return  # the demo stopped its router before this sampler's stop: the run is over
            readings = [read_engine_text(t, PROFILE, source=u) for t, u in zip(texts, urls)]
            self.rows.append({"t": time.time(), "r0": before["inflight"], "r1": after["inflight"],
                              "q0": before["queued"], "running": sum(r.running for r in readings),
                              "deferred": sum(r.waiting for r in readings), "servers": len(urls)})


def test_ebb_scales_real_llama_servers_down_and_holds_the_slo(
        llama_server_binary: str, llama_model: Path, tmp_path: Path) -> None:
    sampler = Sampler()
    started = time.monotonic()
    demo = LiveDemo(llamacpp_settings(minutes=3.0, workdir=tmp_path, report=tmp_path / "r.html"),
                    hooks={0.0: lambda d: threading.Thread(target=sampler.run, args=(d,), daemon=True).start()})
    try:
        res = demo.run()
    finally:
        sampler.stop.set()
        sampler.pool.shutdown(wait=True)
    wall_s = time.monotonic() - started
    outs = res.outcomes
    s = demo.s

    # Real servers, the whole run, no failed request.
    assert res.source == "agents" and s.engine == "llamacpp" and s.initial >= 2
    assert len(outs) >= 170, f"only {len(outs)} cycles in 3 minutes"
    assert res.load.failed == 0, res.load.status[res.load.status != 200]
    assert len(res.load.sent_s) > 1000
    logs = sorted((tmp_path / "llama-logs").glob("worker-*.log"))
    assert len(logs) >= 3 and all("llama" in p.read_text(errors="replace").lower() for p in logs[:3])

    # The fleet shrinks as the comeback bound allows, and the SLO holds: at most 1 % of requests
    # past the TTFT limit (issue #16), none failed.
    acted = [(round(o.t_s), o.action, o.spec_replicas, o.to_replicas) for o in outs if o.acted]
    # What the policy said when it did not act (vetoes, the comeback floor): the failure's explanation.
    said = [(round(o.t_s), o.action, o.note[:120], round(o.signals.get("comeback_floor_replicas", float("nan")), 2))
            for o in outs if o.action not in ("hold",) and not o.acted]
    assert [o for o in outs if o.acted and o.action == "scale_down"], (acted, said)
    card = res.policy_run.scorecard
    ttft_late = float(np.mean(res.load.ttft_ms[res.load.ok] > s.slo_ttft_ms))
    assert ttft_late <= 0.01, (ttft_late, acted)
    assert card.dropped_requests == 0

    # Every decision is in the ledger; every applied one has exactly one outcome.
    ledger = open_ledger(str(res.ledger_path), create=False)
    try:
        run = RunId(s.run_id)
        decided = {o.decision_id for o in outs if o.decision_id is not None and o.action != "error"}
        stored = {d.decision_id for d in ledger.decisions(run)}
        assert decided and decided <= stored
        cycles = list(ledger.cycles(run))
        for o in outs:
            if o.acted:
                assert len([c for c in cycles if c.snapshot.get("outcome_of") == o.decision_id]) == 1
    finally:
        ledger.close()

    # llama.cpp's running + deferred agree with the router's in-flight count (tolerance: module docstring).
    rows = sampler.rows
    assert len(rows) >= 0.8 * 180 / (SAMPLE_S + 0.1), (len(rows), sampler.skipped)
    lo = np.array([min(r["r0"], r["r1"]) for r in rows], dtype=float)
    hi = np.array([max(r["r0"], r["r1"]) for r in rows], dtype=float)
    queued = np.array([r["q0"] for r in rows], dtype=float)
    llama = np.array([r["running"] + r["deferred"] for r in rows], dtype=float)
    above = (llama - hi).clip(min=0.0)  # llama.cpp counts more than the router dispatched
    below = (lo - llama).clip(min=0.0)  # the router counts more: requests in transit
    outside = np.maximum(above, below)
    busy = (hi > 0) | (llama > 0)
    calm = busy & (queued == 0)
    within_calm = float(np.mean(outside[calm] <= 1.0))
    within_busy = float(np.mean(below[busy] <= 1.0 + 0.25 * hi[busy]))
    stats = {"wall_s": round(wall_s, 1), "cycles": len(outs), "decisions": acted, "sent": len(res.load.sent_s),
             "failed": res.load.failed, "ttft_late": round(ttft_late, 4),
             "fleet_min": min(o.spec_replicas for o in outs),
             "fleet_max": max(o.to_replicas for o in outs), "samples": len(rows), "skipped": sampler.skipped,
             "busy_samples": int(busy.sum()), "calm_samples": int(calm.sum()),
             "within_1_calm": round(within_calm, 4), "within_1_busy": round(float(np.mean(outside[busy] <= 1)), 4),
             "within_1_plus_25pct_busy": round(within_busy, 4), "above_gt_1": int((above > 1).sum()),
             "below_max": float(below.max()), "mean_router_busy": round(float(hi[busy].mean()), 2),
             "mean_llama_busy": round(float(llama[busy].mean()), 2), "max_inflight": float(hi.max()),
             "deferred_nonzero": int(sum(r["deferred"] > 0 for r in rows)),
             "router_queued_max": max(r["q0"] for r in rows)}
    (tmp_path / "agreement.json").write_text(json.dumps(stats, indent=1))
    (tmp_path / "samples.json").write_text(json.dumps(rows))
    print(json.dumps(stats))
    assert busy.sum() >= 50 and calm.sum() >= 20, stats  # the load really kept servers busy
    assert hi.max() >= 4, stats  # more than one server's slots were in use at once
    assert (above > 1).sum() <= 0.01 * len(rows), stats
    assert within_calm >= 0.95, stats
    assert within_busy >= 0.90, stats
