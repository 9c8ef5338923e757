"""The asleep tier on real llama.cpp servers (issue #33): servers put to sleep in a lull, woken for the burst.

What runs: ``ebb demo --live --engine llamacpp --tier asleep:wake_s=1,max=4``'s stack
(:func:`ebb.demo.stack.llamacpp_settings`): 4 ``llama-server`` processes at start, one slot and one
CPU thread each, every one started with ``--sleep-idle-seconds 2``; the router, the agent (the
``llamacpp`` profile), the controller in act mode with a SQLite ledger. The tier's mechanism is
llama.cpp's own (:class:`ebb.actuate.sleep_modes.LlamaIdleSleep`): a drained victim, no longer
kept awake, unloads its model after 2 idle seconds; ``/props`` says ``is_sleeping``; a scale-up
wakes it with ``POST /tokenize`` (the model reloads) and it rejoins once ``/props`` reads false.

The trace (Azure CSV, Poisson, seed 0): 1 req/s, a ramp to 12 req/s, a 0.1 req/s lull from 26 s to
70 s, the same ramp again: 86 s at 1x. The policy is told a 7 s cold start (``warmup_s=6`` + 1 s),
as the emulated workers of tests/integration/test_live_sleep.py really take: the tiny model's own
cold start (about 0.1 s, ``bench/llama_wake.py``) is no longer than its wake, and Ebb rightly counts
on no sleeper then. What is real here is the sleep and the wake.

Checked: at least one victim slept, read from llama.cpp's own ``GET /props`` while Ebb held it
asleep; at least one was woken for the burst, read awake from ``/props`` once routed again, and its
log shows llama.cpp leaving its sleeping state; no request failed; at most 1 % of requests broke the
TTFT SLO; every decision and one outcome per applied decision are in the ledger. Wall time about 95 s.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from ebb.config.tiers import SleepTier
from ebb.demo.stack import LiveDemo, llamacpp_settings
from ebb.ledger import open_ledger
from ebb.model.ids import RunId
from tests.integration.azure_csv import write_azure_trace

pytestmark = pytest.mark.slow

LULL_THEN_BURST = ((0, 1), (8, 1), (14, 7), (24, 7), (26, 0.1), (75, 0.1), (79, 14), (89, 14))
"""(trace s, requests/s): a busy phase, a lull, then a burst twice as large as the busy phase."""
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def props_sleeping(url: str) -> bool | None:
    """llama.cpp's own ``GET /props`` ``is_sleeping`` (None: no answer, e.g. a server just stopped)."""
    try:
        with OPENER.open(url + "/props", timeout=2.0) as resp:
            value = json.loads(resp.read()).get("is_sleeping")
            return value if isinstance(value, bool) else None
    except (OSError, ValueError):
        return None


class PropsSampler:
    """Every 0.25 s: (t, name, held asleep by Ebb?, llama.cpp's is_sleeping) for each sleeper and routed server."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, str, bool, bool | None]] = []
        self.stop = threading.Event()

    def run(self, demo: LiveDemo) -> None:
        t0 = time.monotonic()
        while not self.stop.wait(0.25) and demo.actuator is not None:
            st = demo.actuator.state()
            for r, held in [(r, True) for r in st.asleep] + [(r, False) for r in st.replicas if r.ready_s is not None]:
                self.rows.append((time.monotonic() - t0, r.name, held, props_sleeping(r.endpoint)))


def test_real_llama_servers_sleep_in_a_lull_and_wake_for_the_burst(
        llama_server_binary: str, llama_model: Path, tmp_path: Path) -> None:
    length_s = write_azure_trace(tmp_path / "lull-then-burst.csv", LULL_THEN_BURST)
    sampler = PropsSampler()
    settings = llamacpp_settings(minutes=length_s / 60, trace=str(tmp_path / "lull-then-burst.csv"), start_s=0,
                                 time_scale=1.0, initial=4, max_replicas=5, max_batch=1, warmup_s=14.0,
                                 slo_ttft_ms=1000.0, policy="ebb:profile=balanced,warmup_s=12",
                                 workdir=tmp_path, report=None,
                                 tier=SleepTier(wake_s=1.0, max_replicas=4), sleep_idle_s=2,
                                 run_id="llamacpp-sleep")
    demo = LiveDemo(settings, hooks={0.0: lambda d: threading.Thread(target=sampler.run, args=(d,),
                                                                     daemon=True).start()})
    try:
        res = demo.run()
    finally:
        sampler.stop.set()
    acted = [(round(o.t_s), o.action, o.spec_replicas, o.to_replicas) for o in res.outcomes if o.acted]
    rows = sampler.rows
    why = {"acted": acted, "sleep": res.sleep, "asleep_rows": [r for r in rows if r[2]][:20]}

    # The tier is llama.cpp's idle sleep, and it slept and woke with no failed wake.
    assert "--sleep-idle-seconds 2" in res.sleep_mechanism, res.sleep_mechanism
    assert res.sleep is not None and res.sleep.failed_wakes == 0 and res.sleep.failed_sleeps == 0, why
    assert res.sleep.sleeps >= 1 and res.sleep.wakes >= 1, why

    # llama.cpp's own /props: a server Ebb held asleep read is_sleeping, and one of them, woken and
    # routed again, read awake; its log shows the reload.
    slept = {name for _, name, held, sleeping in rows if held and sleeping is True}
    assert slept, why
    woke = {name for t, name, held, sleeping in rows if not held and sleeping is False and name in slept
            and any(n == name and h and s and u < t for u, n, h, s in rows)}
    assert woke, why
    for name in woke:
        text = (tmp_path / "llama-logs" / f"{name}.log").read_text(errors="replace")
        assert "entering sleeping state" in text and "exiting sleeping state" in text, name

    # No request failed; at most 1 % past the TTFT SLO.
    assert res.load.failed == 0, res.load.status[res.load.status != 200]
    ttft_late = float(np.mean(res.load.ttft_ms[res.load.ok] > settings.slo_ttft_ms))
    assert ttft_late <= 0.01, (ttft_late, why)
    assert res.policy_run.scorecard.dropped_requests == 0

    # The decisions that put servers to sleep and woke them are in the ledger, each applied one
    # with exactly one outcome.
    assert {"scale_down", "scale_up"} <= {a for _, a, _, _ in acted}, why
    ledger = open_ledger(str(res.ledger_path), create=False)
    try:
        run = RunId(settings.run_id)
        decided = {o.decision_id for o in res.outcomes if o.decision_id is not None and o.action != "error"}
        stored = {d.decision_id for d in ledger.decisions(run)}
        assert decided and decided <= stored
        cycles = list(ledger.cycles(run))
        for o in res.outcomes:
            if o.acted:
                assert len([c for c in cycles if c.snapshot.get("outcome_of") == o.decision_id]) == 1
    finally:
        ledger.close()
    print(json.dumps({"acted": acted, "sent": len(res.load.sent_s), "ttft_late": ttft_late,
                      "sleeps": res.sleep.sleeps, "wakes": res.sleep.wakes,
                      "slowest_wake_s": round(res.sleep.slowest_wake_s, 3), "slept": sorted(slept),
                      "woke": sorted(woke)}))
