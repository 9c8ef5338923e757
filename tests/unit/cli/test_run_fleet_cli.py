"""`ebb run --workloads FLEET.yaml`: the fleet file is checked first (exit 2, one line), the
single-workload flags it replaces are refused, and a run builds one namespaced actuator per
Deployment (against the fake API server) and writes nothing to the cluster without data or in
recommend mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.testing.etcd import free_port

runner = CliRunner()

FLEET = """\
workloads:
  - {namespace: shop, deployment: checkout, class: order-fulfilment, agents: [AGENT]}
  - {namespace: shop, deployment: recs, class: realtime-recommendation, agents: [AGENT]}
  - {namespace: lab, deployment: train, class: offline-training, agents: [AGENT]}
quotas: [{namespace: shop, min_gpus: 2, max_gpus: 8}]
cluster: {disruption_budget: 1}
"""


def fleet_file(tmp_path: Path, text: str = FLEET) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text.replace("AGENT", f"http://127.0.0.1:{free_port()}"))
    return path


def test_a_broken_fleet_file_exits_2_with_one_line_naming_the_key(tmp_path: Path) -> None:
    bad = fleet_file(tmp_path, FLEET.replace("offline-training", "offline"))
    proc = subprocess.run([sys.executable, "-m", "ebb.cli.main", "run", "--workloads", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "fleet.yaml: workloads[2].class: no class named 'offline'" in lines[0], proc.stderr


@pytest.mark.parametrize(("extra", "said"), [
    (["--deployment", "x"], "--deployment does not go with a fleet file"),
    (["--workload-class", "x"], "--workload-class"),
    (["--actuator", "local"], "drop --actuator local"),
    (["--agent", "http://127.0.0.1:1"], "--agent does not go"),
    (["--source", "prometheus", "--prometheus-url", "http://127.0.0.1:1"], "workloads[0].prometheus_selector"),
    (["--policy", "ebb:nope=1"], "workloads[0] (shop/checkout)"),
])
def test_the_flags_a_fleet_file_replaces_are_refused_before_anything_starts(tmp_path: Path, extra: list[str],
                                                                           said: str) -> None:
    res = runner.invoke(app, ["run", "--workloads", str(fleet_file(tmp_path)), *extra])
    assert res.exit_code != 0 and said in str(res.exception), res.exception


def test_a_workload_without_its_source_is_named(tmp_path: Path) -> None:
    text = FLEET.replace(", agents: [AGENT]}\n  - {namespace: lab", "}\n  - {namespace: lab", 1)
    text = text.replace("class: realtime-recommendation, agents: [AGENT]", "class: realtime-recommendation")
    res = runner.invoke(app, ["run", "--workloads", str(fleet_file(tmp_path, text))])
    assert res.exit_code != 0 and "workloads[1].agents: missing" in str(res.exception)


@pytest.mark.parametrize("mode", ["recommend", "act"])
def test_a_fleet_run_reads_every_deployment_and_writes_nothing_without_data(tmp_path: Path, mode: str) -> None:
    pytest.importorskip("kubernetes")
    from ebb.testing.fake_kube import FakeKubeApiServer

    with FakeKubeApiServer() as fake:
        fake.add_node("node-a", "zone-a")
        for ns, dep in (("shop", "checkout"), ("shop", "recs"), ("lab", "train")):
            fake.add_deployment(dep, 2, namespace=ns)
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        res = runner.invoke(app, ["run", "--workloads", str(fleet_file(tmp_path)), "--mode", mode,
                                  "--kubeconfig", str(kubeconfig), "--ledger", str(tmp_path / "l.sqlite"),
                                  "--cycles", "2", "--interval-s", "0.2", "--react-ms", "0", "--no-log-json"])
        assert res.exit_code == 0, (res.output, res.exception)
        assert "3 Deployments in 2 namespaces" in res.output
        read = {r.path.split("/")[-2] for r in fake.requests if r.method == "GET" and r.path.endswith("/scale")}
        assert read == {"checkout", "recs", "train"}
        assert [r for r in fake.requests if r.method != "GET"] == [], "no data: no write (fail static)"
