"""Recommend mode observes a local fleet and starts nothing: no router, no worker process."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.actuate.observed import ObservedFleet
from ebb.errors import ConfigError, PermanentError, TransientError
from ebb.model.ids import DecisionId
from ebb.model.observation import ScaleRequest


def test_an_observed_fleet_reports_its_workers_ready_in_zones_and_never_changes() -> None:
    fleet = ObservedFleet(3)
    st = fleet.state()
    assert st.spec_replicas == 3 and st.ready_replicas == 3 and st.draining == 0
    assert [r.name for r in st.replicas] == ["worker-1", "worker-2", "worker-3"]
    assert [r.zone for r in st.replicas] == ["b", "c", "a"]
    with pytest.raises(PermanentError, match="observed in recommend mode"):
        fleet.apply(DecisionId("d-1"), ScaleRequest(2))
    assert fleet.state() == st


def test_an_observed_fleet_needs_a_non_negative_size() -> None:
    with pytest.raises(ConfigError):
        ObservedFleet(-1)


def test_ebb_run_in_recommend_mode_starts_no_router_and_no_worker(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import ebb.actuate.local as local
    from ebb.cli.main import app

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("recommend mode started a local fleet")

    monkeypatch.setattr(local.LocalActuator, "__init__", refuse)
    res = CliRunner().invoke(app, ["run", "--source", "agents", "--agent", "http://127.0.0.1:9", "--workers", "2",
                                   "--cycles", "2", "--interval-s", "0.5", "--no-log-json",
                                   "--ledger", str(tmp_path / "l.sqlite")])
    assert res.exit_code == 0, res.output
    assert "router:" not in res.output and "recommend mode" in res.output


def test_without_workers_the_observed_fleet_has_the_size_the_source_reads_and_says_what_it_needs() -> None:
    fleet = ObservedFleet()
    with pytest.raises(TransientError, match="--workers N.*--actuator kubernetes --deployment NAME"):
        fleet.state()
    fleet.source_saw(None)  # a read that said nothing about replicas leaves it unknown
    with pytest.raises(TransientError):
        fleet.state()
    fleet.source_saw(3)
    assert [r.name for r in fleet.state().replicas] == ["worker-1", "worker-2", "worker-3"]
    fleet.source_saw(1)
    st = fleet.state()
    assert st.spec_replicas == st.ready_replicas == 1 and st.replicas[0].name == "worker-1"
    fixed = ObservedFleet(2)
    fixed.source_saw(5)  # --workers N is what the operator said: the source does not change it
    assert fixed.state().spec_replicas == 2


def test_ebb_run_in_recommend_mode_without_workers_observes_the_replicas_its_source_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old recommend mode invented a 2-worker fleet: with a source reading one worker it logged
    'source covers 1 of 2 ready replicas' and recorded 2 as the fleet that ran."""
    import time

    import numpy as np

    import ebb.cli.run as run_cli
    from ebb.cli.main import app
    from ebb.ledger import SqliteLedger
    from ebb.model.live import LiveSignals
    from ebb.model.observation import FineSignals
    from ebb.model.shadow import shadow_of
    from ebb.testing.fakes import FakeSignalSource

    def one_worker(since_s: float) -> LiveSignals:
        t = time.time() - 0.1 * np.arange(5)[::-1]
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.1, slot_replicas=z + 0.1, queued=z),
                           newest_sample_s=float(t[-1]), replicas_seen=1)

    monkeypatch.setattr(run_cli, "_source", lambda *a, **k: FakeSignalSource(one_worker))
    ledger = tmp_path / "l.sqlite"
    res = CliRunner().invoke(app, ["run", "--source", "agents", "--agent", "http://127.0.0.1:9", "--cycles", "3",
                                   "--interval-s", "0.3", "--no-log-json", "--run-id", "rec",
                                   "--ledger", str(ledger)])
    assert res.exit_code == 0, res.output
    assert "covers 1 of 2" not in res.output and "incomplete fleet" not in res.output
    with SqliteLedger(ledger, read_only=True) as led:
        rows = [m for c in led.cycles() if (m := shadow_of(c)) is not None]
    assert rows and {v for m in rows for v in m.as_run if v is not None} == {1}
