"""`ebb simulate`'s settings: the simulator's defaults, numbers checked when built, and the load scaling."""

from __future__ import annotations

import math

import pytest

from ebb.config.simulate_settings import (
    DEFAULT_PEAK_REPLICAS,
    SimModelSettings,
    load_scaling,
    simulate_settings,
)
from ebb.errors import ConfigError
from ebb.sim.settings import ClusterSettings, MetricPipelineSettings, SloSettings


def test_the_defaults_are_the_simulators_own() -> None:
    m = SimModelSettings()
    assert (m.slo_ttft_ms, m.slo_e2e_ms) == (SloSettings.ttft_ms, SloSettings.e2e_ms)
    assert (m.cold_start_s, m.gpu_hour_usd) == (ClusterSettings.cold_start_s, ClusterSettings.gpu_hour_usd)
    p = MetricPipelineSettings()
    assert (m.metric_resolution_s, m.scrape_interval_s, m.hpa_sync_s, m.kubelet_resolution_s) == (
        p.metrics_server_resolution_s, p.scrape_interval_s, p.hpa_sync_s, p.kubelet_resolution_s)


@pytest.mark.parametrize(("load_scale", "peak", "want"), [
    (None, None, (1.0, DEFAULT_PEAK_REPLICAS)),
    (2.5, None, (2.5, None)),
    (None, "12", (1.0, 12)),
    (None, "off", (1.0, None)),
    (3.0, " OFF ", (3.0, None)),
])
def test_the_load_is_scaled_or_calibrated_never_both(load_scale: float | None, peak: str | None,
                                                     want: tuple[float, int | None]) -> None:
    assert load_scaling(load_scale, peak) == want


@pytest.mark.parametrize(("given", "said"), [
    ({"load_scale": 2.0, "peak_replicas": "4"}, "--load-scale 2 and --peak-replicas 4 both set the load"),
    ({"peak_replicas": "many"}, "--peak-replicas 'many': expected a whole number of replicas or 'off'"),
    ({"peak_replicas": "0"}, "--peak-replicas 0: must be an integer from 1 to 100,000"),
    ({"load_scale": -1.0}, "--load-scale -1.0: must be a finite number > 0"),
    ({"slo_ttft_ms": 0.0}, "--slo-ttft-ms 0.0: must be a finite number > 0"),
    ({"cold_start_s": math.inf}, "--cold-start-s inf: must be a finite number >= 0"),
    ({"fluid_bin_ms": 50.0}, "--fluid-bin-ms 50.0: must be a number from 100 to 1000"),
    ({"hpa_sync_s": 0}, "--hpa-sync-s 0: must be an integer from 1 to 86,400"),
    ({"seed": -1}, "--seed -1: must be an integer from 0"),
    ({"fault_slowdown": 0.5}, "--fault-slowdown 0.5: must be a finite number >= 1"),
    ({"fault_after_s": -1.0}, "--fault-after-s -1.0: must be a finite number >= 0"),
])
def test_a_bad_number_is_refused_naming_its_flag_and_the_fix(given: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError) as exc:
        simulate_settings(given)
    assert said in str(exc.value) and "(fix: " in str(exc.value)
