"""``ebb run --elect``: which election runs, the combinations refused before anything starts, and two real
``ebb run`` processes sharing one SQLite ledger under a Kubernetes Lease (the fake API server's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.testing.etcd import free_port

runner = CliRunner()
BASE = ["run", "--source", "agents", "--agent", "http://127.0.0.1:1"]


@pytest.mark.parametrize(("extra", "said"), [
    (["--election", "kubernetes"], "--elect is not given"),
    (["--lease-duration-s", "30"], "--elect is not given"),
    (["--elect", "--election", "etcd"], "--election etcd needs an etcd ledger"),
    (["--elect", "--election", "kubernetes", "--ledger", "etcd://127.0.0.1:2379/ebb"], "does not go with an etcd ledger"),
    (["--elect", "--ledger", "etcd://127.0.0.1:2379/ebb", "--lease-namespace", "ebb-system"], "runs on etcd"),
    (["--elect", "--ledger", "memory:"], "the replicas share"),
    (["--elect", "--election", "swarm"], "auto, etcd or kubernetes"),
    (["--elect", "--lease-renew-deadline-s", "20"], "below --lease-duration-s"),
    (["--elect", "--lease-retry-s", "9"], "above 1.2 x --lease-retry-s"),
    (["--elect", "--lease-namespace", "Ebb_System"], "must be a namespace name"),
    (["--elect", "--kubeconfig", "/nonexistent/kubeconfig"], "cannot load Kubernetes credentials"),
])
def test_an_election_that_cannot_work_is_refused_on_one_line_with_its_fix(tmp_path: Path, extra: list[str],
                                                                          said: str) -> None:
    ledger = tmp_path / "l.sqlite"
    res = runner.invoke(app, [*BASE, "--ledger", str(ledger), *extra] if "--ledger" not in extra else [*BASE, *extra])
    assert res.exit_code != 0 and said in str(res.exception) and "fix:" in str(res.exception), res.exception
    assert "\n" not in str(res.exception)
    assert not ledger.exists(), "the ledger was opened before the election was checked"


def test_a_pod_namespace_that_is_not_a_name_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "Not A Namespace")
    res = runner.invoke(app, [*BASE, "--ledger", str(tmp_path / "l.sqlite"), "--elect"])
    assert res.exit_code != 0 and "$POD_NAMESPACE" in str(res.exception)


def test_the_election_settings_read_from_a_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "ebb.yaml"
    cfg.write_text("ledger:\n  elect: true\n  election: kubernetes\n  lease_namespace: team-a\n  lease_duration_s: 20\n")
    res = runner.invoke(app, [*BASE, "--config", str(cfg), "--print-config"])
    assert res.exit_code == 0, res.output
    for line in ("election: kubernetes", "lease_namespace: team-a", "lease_duration_s: 20",
                 "lease_renew_deadline_s: 10.0", "lease_retry_s: 2.0"):
        assert line in res.output


def test_two_ebb_run_processes_share_one_sqlite_ledger_under_one_lease_in_the_pod_namespace(tmp_path: Path) -> None:
    """Without an election the second would be refused ("another controller holds this ledger"); with
    the Lease both run, one leads, and the Lease (named from the target, in $POD_NAMESPACE) is
    released when they stop."""
    pytest.importorskip("kubernetes")
    from ebb.ledger.kube_lease_store import lease_name
    from ebb.testing.fake_kube import FakeKubeApiServer

    with FakeKubeApiServer() as fake:
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        env = {**os.environ, "POD_NAMESPACE": "team-a"}
        procs = [subprocess.Popen(
            [sys.executable, "-m", "ebb.cli.main", *BASE[:4], f"http://127.0.0.1:{free_port()}", "--ledger",
             str(tmp_path / "shared.sqlite"), "--elect", "--kubeconfig", str(kubeconfig), "--candidate-id", who,
             "--cycles", "8", "--interval-s", "0.25", "--no-log-json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path) for who in ("one", "two")]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (_, err) in zip(procs, outs):
            assert p.returncode == 0, err[-3000:]
            assert "another controller holds" not in err
        lease: Any = fake.lease(lease_name("local/serving"), "team-a")
        assert lease is not None, [r.path for r in fake.requests]
        assert lease["spec"]["holderIdentity"] == "", "the last leader did not release the Lease on exit"
        created = [r for r in fake.calls("POST") if r.path.endswith("/leases") and r.status == 201]
        assert len(created) == 1 and created[0].body["spec"]["holderIdentity"] in ("one", "two")
        leader = created[0].body["spec"]["holderIdentity"]
        assert f"{leader} leads Lease team-a/" in outs[("one", "two").index(leader)][1]
