"""The asleep tier on real llama.cpp servers (issue #33): llama.cpp's own idle sleep, driven by Ebb.

The mechanism (:class:`ebb.actuate.sleep_modes.LlamaIdleSleep`): every ``llama-server`` is started
with ``--sleep-idle-seconds N``; a drained victim, no longer kept awake, unloads its model after N
idle seconds and ``GET /props`` says ``is_sleeping``; a scale-up wakes it with ``POST /tokenize``
(the model reloads) and it rejoins the router once ``/props`` reads false.

Two tests:

* **The mechanism, deterministic.** The local actuator over two real servers under light steady
  load: a scale-down's victim drains and falls asleep (llama.cpp's ``/props`` and log say so), a
  scale-up wakes it (``/props`` awake, serving again, the wake measured), no request fails.
* **Ebb's loop.** ``ebb demo --live --engine llamacpp --tier asleep:wake_s=1,max=4``'s stack
  (:func:`ebb.demo.stack.llamacpp_settings`: 4 servers, one slot and one CPU thread each, N = 2;
  router, agent, controller in act mode, SQLite ledger) on a synthetic trace (Azure CSV, Poisson,
  seed 0: 1 req/s, a ramp to 7 req/s, a 0.1 req/s lull from 26 s to 75 s, a 14 req/s burst).
  Checked: Ebb's scale-downs in the lull put servers to sleep (read from llama.cpp's own
  ``/props`` while Ebb held them asleep), no failed sleep or wake, no request failed, at most 1 %
  of requests broke the TTFT SLO, every decision and one outcome per applied decision in the
  ledger. Whether the burst finds a sleeper to wake is the policy's call: in a long lull its cold
  floor may stop counting on them, and it releases them (a CI run did, both); the wake itself is the
  first test's. The policy is told a 15 s cold start: the tiny model's own (about 0.1 s,
  ``bench/llama_wake.py``) is no longer than its wake, and Ebb rightly counts on no sleeper then.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from ebb.actuate.local import LocalActuator
from ebb.config.tiers import SleepTier
from ebb.demo.llamacpp import LlamaServerLauncher
from ebb.demo.loadgen import LoadGenerator
from ebb.demo.router import Router
from ebb.demo.stack import LiveDemo, llamacpp_settings
from ebb.ledger import open_ledger
from ebb.model.ids import DecisionId, RunId, TraceName
from ebb.model.observation import ScaleRequest
from ebb.model.trace import RequestTrace
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


def test_ebbs_scale_downs_in_a_lull_put_real_llama_servers_to_sleep_and_no_request_fails(
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
    assert res.sleep.sleeps >= 1, why

    # llama.cpp's own /props: a server Ebb held asleep read is_sleeping; its log shows it.
    slept = {name for _, name, held, sleeping in rows if held and sleeping is True}
    assert slept, why
    for name in slept:
        text = (tmp_path / "llama-logs" / f"{name}.log").read_text(errors="replace")
        assert "entering sleeping state" in text, name

    # No request failed; at most 1 % past the TTFT SLO.
    assert res.load.failed == 0, res.load.status[res.load.status != 200]
    ttft_late = float(np.mean(res.load.ttft_ms[res.load.ok] > settings.slo_ttft_ms))
    assert ttft_late <= 0.01, (ttft_late, why)
    assert res.policy_run.scorecard.dropped_requests == 0

    # The decisions that put servers to sleep and woke them are in the ledger, each applied one
    # with exactly one outcome.
    assert "scale_down" in {a for _, a, _, _ in acted}, why
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
                      "slowest_wake_s": round(res.sleep.slowest_wake_s, 3), "slept": sorted(slept)}))


def test_a_real_llama_server_drained_by_a_scale_down_falls_asleep_and_a_scale_up_wakes_it(
        llama_server_binary: str, llama_model: Path, tmp_path: Path) -> None:
    tier = SleepTier(wake_s=1.0, max_replicas=2)
    (tmp_path / "logs").mkdir()
    launcher = LlamaServerLauncher(llama_server_binary, llama_model, tmp_path / "logs", slots=1, sleep_idle_s=1)
    n = 60  # 2 requests/s for 30 s, short prompts and answers: well within one CPU slot each
    trace = RequestTrace(TraceName("light"), np.arange(n) / 2.0, np.full(n, 16, dtype=np.int64),
                         np.full(n, 8, dtype=np.int64))
    with Router(queue_timeout_s=60.0) as router, \
            LocalActuator(router, initial=2, max_batch=1, launcher=launcher, tier=tier) as act:
        act.wait_ready(timeout_s=60.0)
        gen = LoadGenerator(router.url, trace)
        gen.start()
        act.apply(DecisionId("down"), ScaleRequest(1))
        deadline = time.monotonic() + 30.0
        while len(act.state().asleep) < 1:
            assert time.monotonic() < deadline, (act.state(), act.sleep_counts())
            time.sleep(0.1)
        victim = act.state().asleep[0]
        assert props_sleeping(victim.endpoint) is True  # llama.cpp itself says so
        act.apply(DecisionId("up"), ScaleRequest(2))
        deadline = time.monotonic() + 30.0
        while act.state().asleep or act.state().ready_replicas < 2:
            assert time.monotonic() < deadline, (act.state(), act.sleep_counts())
            time.sleep(0.1)
        assert props_sleeping(victim.endpoint) is False
        assert victim.name in {w["name"] for w in router.workers()}  # routed again
        counts = act.sleep_counts()
        assert (counts.sleeps, counts.wakes, counts.failed_wakes, counts.failed_sleeps) == (1, 1, 0, 0), counts
        assert (act.state().wake_s_seen or 0.0) > 0  # the wake measured, for the policy to learn from
        assert gen.wait(timeout_s=120.0)
        res = gen.results()
    text = (tmp_path / "logs" / f"{victim.name}.log").read_text(errors="replace")
    assert "entering sleeping state" in text and "exiting sleeping state" in text
    assert res.failed == 0 and res.ok.all()
