"""LocalActuator's launcher seam: a worker whose URL the launcher fixes before start (as llama-server's),
its own health path and router API, logs to a file; the default launcher stays the ebb worker."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ebb.actuate.local import EbbWorkerLauncher, Launch, LocalActuator
from ebb.errors import ConfigError
from ebb.demo.local_prometheus import free_port
from ebb.model.ids import DecisionId
from ebb.model.observation import ScaleRequest


class Registry:
    """Records what the actuator tells the router."""

    def __init__(self) -> None:
        self.added: list[tuple[str, str, int, str]] = []

    def add_worker(self, name: str, url: str, max_batch: int, api: str = "ebb") -> None:
        self.added.append((name, url, max_batch, api))

    def drain(self, name: str) -> Any:
        import concurrent.futures as cf
        done: cf.Future[None] = cf.Future()
        done.set_result(None)
        return done


@dataclass(frozen=True)
class FixedPortLauncher:
    """The ebb worker on a port chosen here (so its URL is known before start), stdout to a log file."""

    log_dir: Path
    api: str = "custom"
    health_path: str = "/healthz"

    def launch(self, name: str, max_batch: int) -> Launch:
        port = free_port()
        return Launch((sys.executable, "-m", "ebb.demo.worker", "--name", name, "--port", str(port),
                       "--max-batch", str(max_batch), "--warmup-s", "0.2"),
                      url=f"http://127.0.0.1:{port}", log_path=self.log_dir / f"{name}.log")


def test_a_launcher_with_a_known_url_is_promoted_on_its_health_path_with_its_api(tmp_path: Path) -> None:
    reg = Registry()
    with LocalActuator(reg, initial=2, max_batch=3, launcher=FixedPortLauncher(tmp_path)) as act:
        urls = [r.endpoint for r in act.state().replicas]
        assert all(u.startswith("http://127.0.0.1:") for u in urls)  # known at once, before health
        act.wait_ready(timeout_s=30.0)
        assert sorted(reg.added) == [("worker-0", urls[0], 3, "custom"), ("worker-1", urls[1], 3, "custom")]
        act.apply(DecisionId("d"), ScaleRequest(1))
        act.wait_idle(timeout_s=30.0)
        assert act.state().spec_replicas == 1
    # the worker's LISTENING line went to its log, not to a pipe nobody reads
    assert (tmp_path / "worker-0.log").read_text().startswith("LISTENING http://127.0.0.1:")


def test_a_launcher_whose_binary_cannot_start_is_a_config_error(tmp_path: Path) -> None:
    @dataclass(frozen=True)
    class Missing:
        api: str = "ebb"
        health_path: str = "/healthz"

        def launch(self, name: str, max_batch: int) -> Launch:
            return Launch((str(tmp_path / "no-such-binary"),), url="http://127.0.0.1:1")

    with pytest.raises(ConfigError, match="cannot start worker"):
        LocalActuator(Registry(), initial=1, launcher=Missing())


def test_the_default_launcher_is_the_ebb_worker_with_the_actuator_s_settings() -> None:
    launch = EbbWorkerLauncher(warmup_s=2.0, speed=3.0, python="/py").launch("worker-4", 5)
    assert launch.args[:3] == ("/py", "-m", "ebb.demo.worker") and launch.url is None and launch.log_path is None
    args = list(launch.args)
    assert args[args.index("--max-batch") + 1] == "5" and args[args.index("--speed") + 1] == "3.0"
