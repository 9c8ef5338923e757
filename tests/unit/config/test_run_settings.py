"""`ebb run`'s settings check their own values when built, each refusal one line naming the flag and the fix."""

from __future__ import annotations

import pytest

from ebb.config.run_settings import ActuatorSettings, LoopSettings, PolicySettings, SourceSettings, run_settings
from ebb.errors import ConfigError


@pytest.mark.parametrize(("given", "said"), [
    ({"mode": "yolo"}, "--mode must be recommend or act, got 'yolo' (fix: "),
    ({"source": "foo"}, "--source must be agents or prometheus, got 'foo' (fix: "),
    ({"actuator": "docker"}, "--actuator must be local or kubernetes, got 'docker' (fix: "),
    ({"metrics_port": 70000}, "--metrics-port must be in 0-65535, got 70000 (fix: "),
    ({"cold_start_s": float("nan")}, "--cold-start-s must be within 0–86400 s, got nan (fix: "),
    ({"cold_start_s": 86_401.0}, "--cold-start-s must be within"),
    ({"react_ms": 1000}, "--react-ms must be within 0 and the cycle (1000 ms), got 1000 (fix: "),
    ({"interval_s": 0.05}, "got the agents' default 100 ms"),
])
def test_a_bad_value_is_refused_naming_its_flag(given: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError) as exc:
        run_settings(given)
    assert said in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(("given", "said"), [
    ({"interval_s": -1.0}, "--interval-s -1.0: must be a finite number > 0 (fix: "),
    ({"interval_s": float("nan")}, "--interval-s nan: must be a finite number > 0"),
    ({"max_staleness_s": -5.0}, "--max-staleness-s -5.0: must be a finite number > 0 (fix: "),
    ({"cycles": -1}, "--cycles -1: must be an integer from 1 to"),
    ({"cycles": 0}, "--cycles 0: must be an integer from 1 to"),
    ({"slo_ttft_ms": -5.0}, "--slo-ttft-ms -5.0: must be a finite number > 0 (fix: "),
    ({"slo_e2e_ms": float("inf")}, "--slo-e2e-ms inf: must be a finite number > 0"),
    ({"workers": -3}, "--workers -3: must be an integer from 0 to 1,000 (fix: "),
    ({"max_batch": 0}, "--max-batch 0: must be an integer from 1 to 4,096 (fix: "),
    ({"speed": 0.0}, "--speed 0.0: must be a finite number > 0 (fix: "),
])
def test_every_number_is_checked_when_the_settings_are_built(given: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError) as exc:
        run_settings(given)
    assert said in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(("given", "said"), [
    ({"engine": "vllm"}, "--engine is for --source prometheus"),
    ({"engines_file": "e.yaml"}, "--engines-file and --max-concurrency need --engine NAME (fix: "),
    ({"max_concurrency": 8}, "need --engine NAME"),
    ({"source": "prometheus"}, "--source prometheus needs --prometheus-url URL (fix: "),
])
def test_source_flags_that_do_not_go_together_are_refused_by_the_settings(given: dict[str, object],
                                                                          said: str) -> None:
    with pytest.raises(ConfigError) as exc:
        run_settings(given)
    assert said in str(exc.value) and "fix:" in str(exc.value)
    assert run_settings({"source": "prometheus", "prometheus_url": "http://p:9090", "engine": "vllm",
                         "prometheus_selector": 'job="vllm"', "max_concurrency": 8}).source.engine == "vllm"


def test_the_source_is_checked_before_the_fast_path_that_depends_on_it() -> None:
    with pytest.raises(ConfigError, match="--source must be"):
        run_settings({"source": "foo", "react_ms": 5000})


def test_the_fast_path_defaults_to_the_agents_buckets_and_is_off_with_prometheus() -> None:
    assert run_settings({}).react_s == 0.1
    prometheus = {"source": "prometheus", "prometheus_url": "http://127.0.0.1:9090"}
    assert run_settings({**prometheus, "interval_s": 0.05}).react_s == 0.0
    assert run_settings({"react_ms": 0}).react_s == 0.0


def test_the_defaults_are_the_flags_documented_defaults() -> None:
    s = run_settings({})
    assert s.loop == LoopSettings() and s.loop.mode == "recommend" and s.loop.interval_s == 1.0
    assert s.source == SourceSettings() and s.source.agent == ()
    assert s.actuator == ActuatorSettings() and s.actuator.actuator is None and s.actuator.workers is None \
        and s.actuator.workers_at_start == 2
    assert s.policy == PolicySettings() and s.policy.policy == "ebb"
    assert s.ledger.ledger == "ebb-ledger.sqlite" and s.security.metrics_bind == "127.0.0.1"
