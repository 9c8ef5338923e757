"""Recommend mode observes a local fleet and starts nothing: no router, no worker process."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.actuate.observed import ObservedFleet
from ebb.errors import ConfigError, PermanentError
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
