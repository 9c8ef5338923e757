"""`ebb run`: argument checks, and a short real run against an agent that is down."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.ledger import SqliteLedger
from ebb.testing.etcd import free_port

runner = CliRunner()


def test_a_bad_mode_or_missing_source_url_is_a_usage_error() -> None:
    res = runner.invoke(app, ["run", "--mode", "yolo"])
    assert res.exit_code != 0 and "recommend or act" in str(res.exception)
    res = runner.invoke(app, ["run", "--source", "prometheus", "--actuator", "kubernetes", "--deployment", "d",
                              "--kubeconfig", "/nonexistent"])
    assert res.exit_code != 0


def test_engine_mode_is_checked_before_anything_starts() -> None:
    base = ["run", "--actuator", "kubernetes", "--deployment", "vllm", "--kubeconfig", "/nonexistent"]
    for extra, said in ((["--engine", "vllm"], "--source prometheus"),
                        (["--max-concurrency", "8"], "need --engine"),
                        (["--source", "prometheus", "--prometheus-url", "http://127.0.0.1:9", "--engine", "vllm"],
                         "selector"),
                        (["--source", "prometheus", "--prometheus-url", "http://127.0.0.1:9", "--engine", "nope",
                          "--prometheus-selector", 'job="vllm"'], "vllm")):
        res = runner.invoke(app, base + extra)
        assert res.exit_code != 0 and said in str(res.exception), (extra, res.exception)


def test_engine_mode_builds_the_engine_source_with_the_pod_label() -> None:
    from ebb.cli.run import _source
    src = _source("prometheus", [], "http://127.0.0.1:9", prometheus_selector='job="vllm"', engine="vllm",
                  max_concurrency=256)
    assert src.engine is not None and src.replica_label == "pod"
    assert _source("prometheus", [], "http://127.0.0.1:9").replica_label == "worker"


def test_run_with_its_only_agent_down_holds_the_fleet_and_records_nothing(tmp_path: Path) -> None:
    """Fail static end to end: a real local fleet, a source that never answers, three cycles."""
    ledger = tmp_path / "ledger.sqlite"
    dead = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.run(
        [sys.executable, "-m", "ebb.cli.main", "run", "--mode", "act", "--source", "agents", "--agent", dead,
         "--actuator", "local", "--workers", "1", "--speed", "20", "--ledger", str(ledger), "--cycles", "3",
         "--interval-s", "0.2"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]
    assert any(dead in x["msg"] for x in lines), "each cycle says why it holds"
    in_cycle = [x for x in lines if x["logger"] == "ebb.live.controller"]
    assert in_cycle and all(len(x.get("trace_id") or "") == 32 for x in in_cycle), "log lines carry the trace id"
    store = SqliteLedger(ledger)
    try:
        assert store.decisions() == []
    finally:
        store.close()


def test_bad_config_is_refused_before_any_worker_starts(tmp_path: Path) -> None:
    broken = tmp_path / "gates.yaml"
    broken.write_text("gates: [\n")
    for extra in (["--gates", str(broken)], ["--gates", str(tmp_path / "missing.yaml")],
                  ["--workloads", str(broken)], ["--policy", "ebb:hold=3"], ["--elect", "--election", "etcd"],
                  ["--elect", "--kubeconfig", str(tmp_path / "missing-kubeconfig")]):
        res = runner.invoke(app, ["run", "--source", "agents", "--agent", "http://127.0.0.1:1", *extra])
        assert res.exit_code != 0, extra
        assert "router:" not in res.output, f"{extra}: the fleet started before the config was checked"


def test_a_bad_number_exits_2_on_one_line_naming_the_flag_before_anything_starts(tmp_path: Path) -> None:
    """Before: -5 s staleness or a -5 ms SLO was an "internal error: ValueError", --cycles -1 ran nothing
    and exited 0, and --print-config printed workers: -3."""
    (tmp_path / "h.yaml").write_text("actuator:\n  workers: -3\n  speed: 0\n")
    ledger = tmp_path / "l.sqlite"
    base = [sys.executable, "-m", "ebb.cli.main", "run", "--agent", "http://127.0.0.1:1", "--ledger", str(ledger)]
    for extra, flag in ((["--max-staleness-s", "-5"], "--max-staleness-s -5.0"),
                        (["--slo-ttft-ms", "-5"], "--slo-ttft-ms -5.0"), (["--cycles", "-1"], "--cycles -1"),
                        (["--config", str(tmp_path / "h.yaml"), "--print-config"], "--workers -3")):
        res = subprocess.run(base + extra, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert res.returncode == 2, (extra, res.stderr)
        assert res.stderr.count("\n") == 1 and flag in res.stderr and "fix:" in res.stderr, res.stderr
        assert "internal error" not in res.stderr and res.stdout == ""
    assert not ledger.exists()


def test_the_workloads_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One read: before, ebb run read it as a fleet file and again as a classes file (two reads, which a
    file replaced in between could answer differently)."""
    classes = tmp_path / "classes.yaml"
    classes.write_text("classes:\n  - {name: chat, base_weight: 0.5, alpha: 1.0}\n")
    reads: list[Path] = []
    read_text = Path.read_text

    def counting(self: Path, *args: Any, **kwargs: Any) -> str:
        if self == classes:
            reads.append(self)
        return read_text(self, *args, **kwargs)
    monkeypatch.setattr(Path, "read_text", counting)
    res = runner.invoke(app, ["run", "--agent", "http://127.0.0.1:1", "--workloads", str(classes),
                              "--workload-class", "nope", "--ledger", str(tmp_path / "l.sqlite")])
    assert "no workload class named 'nope'" in str(res.exception) and "one of chat" in str(res.exception)
    assert len(reads) == 1


def test_the_agent_refuses_an_endpoint_that_is_not_a_url() -> None:
    res = runner.invoke(app, ["agent", "--endpoint", "notaurl", "--no-nvml"])
    assert res.exit_code != 0 and "not an http(s) URL" in str(res.exception)


def test_bad_agent_credentials_are_refused_before_anything_starts(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    spaced = tmp_path / "spaced"
    spaced.write_text("two words\n")
    cert = tmp_path / "cert.pem"
    cert.write_text("not a certificate")
    for extra in (["--agent-token-file", str(empty)], ["--agent-token-file", str(spaced)],
                  ["--agent-token-file", str(tmp_path / "missing")], ["--agent-cert", str(cert)],
                  ["--agent-ca", str(cert)], ["--metrics-port", "70000"], ["--agent", "http://127.0.0.1:"]):
        res = runner.invoke(app, ["run", "--source", "agents", "--agent", "http://127.0.0.1:1", *extra])
        assert res.exit_code != 0, extra
        assert "router:" not in res.output, f"{extra}: the fleet started before the config was checked"


def test_metrics_listen_on_the_bind_address_given(tmp_path: Path) -> None:
    """H3: in a pod, probes and scrapes reach /metrics on the pod IP, so it must not be loopback only."""
    import time
    import urllib.request

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ebb.cli.main", "run", "--source", "agents", "--agent", f"http://127.0.0.1:{free_port()}",
         "--actuator", "local", "--workers", "1", "--speed", "20", "--ledger", str(tmp_path / "l.sqlite"),
         "--metrics-port", str(port), "--metrics-bind", "0.0.0.0", "--cycles", "40", "--interval-s", "0.25"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # 127.0.0.2 is another address of this host: a server bound to 127.0.0.1 alone is not there.
        host = "127.0.0.2"
        body = b""
        for _ in range(80):
            try:
                with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=1.0) as resp:
                    body = resp.read()
                break
            except OSError:
                time.sleep(0.25)
        assert b"ebb_cycles_total" in body, f"/metrics not reachable on {host}:{port}"
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_a_tier_is_refused_on_one_line_before_anything_starts_where_nothing_could_sleep(tmp_path: Path) -> None:
    """A snapshot tier (simulator-only), a tier in recommend mode (nothing changes, nothing sleeps), a
    bad tier key, ``--tier`` with a fleet file (each workload names its own) and a fleet file's tier in
    recommend mode: exit 2, one line."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("workloads:\n  - {namespace: ns, deployment: chat, class: order-fulfilment, agents: [\"http://127.0.0.1:1\"]}\n")
    tiered = tmp_path / "tiered.yaml"
    tiered.write_text(fleet.read_text().replace("agents:", "tier: 'asleep:wake_s=2,max=4', agents:"))
    ledger = tmp_path / "l.sqlite"
    base = [sys.executable, "-m", "ebb.cli.main", "run", "--agent", "http://127.0.0.1:1", "--ledger", str(ledger)]
    for extra, needle in ((["--mode", "act", "--tier", "snapshot"], "simulator-only"),
                          (["--tier", "asleep"], "only act mode"),
                          (["--mode", "act", "--tier", "asleep:wake=2"], "'wake=2' is not one of"),
                          (["--mode", "act", "--tier", "asleep", "--workloads", str(fleet)], "its own tier"),
                          (["--workloads", str(tiered)], "only act mode puts replicas to sleep")):
        res = subprocess.run(base + extra, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert res.returncode == 2, (extra, res.stderr)
        assert res.stderr.count("\n") == 1 and needle in res.stderr and "fix:" in res.stderr, res.stderr
        assert "router:" not in res.stdout
    assert not ledger.exists()
