"""read_dcgm and DcgmSource on synthetic dcgm-exporter text: units, blank sentinels, the GPU_UTIL fallback flag, identity labels."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ebb.errors import InputError, SourceUnavailable
from ebb.sources.base import MetricSource
from ebb.sources.engines import DcgmSource, parse_exposition, read_dcgm
from ebb.testing.hostile_http import HostilePeer, answer

L0 = 'gpu="0",UUID="GPU-a",pci_bus_id="00000000:31:00.0",device="nvidia0",modelName="NVIDIA H200",Hostname="node-1"'
L1 = 'gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H200",hostname="node-1",pod="vllm-0",namespace="ml"'


def text(lines: dict[str, dict[str, str]]) -> str:
    return "".join(f"{field}{{{labels}}} {v}\n" for labels, fields in lines.items() for field, v in fields.items())


def test_fields_in_their_units_and_busy_from_sm_active() -> None:
    t = text({L0: {"DCGM_FI_PROF_SM_ACTIVE": "0.5", "DCGM_FI_PROF_SM_OCCUPANCY": "0.25",
                   "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "0.75", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "0.125",
                   "DCGM_FI_PROF_DRAM_ACTIVE": "0.0625", "DCGM_FI_PROF_PCIE_TX_BYTES": "4791810",
                   "DCGM_FI_PROF_PCIE_RX_BYTES": "6935930", "DCGM_FI_DEV_FB_USED": "5120", "DCGM_FI_DEV_GPU_UTIL": "91"}})
    (g,) = read_dcgm(parse_exposition(t, source="s"), source="s")
    assert (g.gpu, g.uuid, g.model, g.hostname, g.pod, g.namespace) == ("0", "GPU-a", "NVIDIA H200", "node-1", "", "")
    assert (g.sm_active_ratio, g.sm_occupancy_ratio, g.gr_engine_active_ratio) == (0.5, 0.25, 0.75)
    assert (g.tensor_active_ratio, g.dram_active_ratio) == (0.125, 0.0625)
    assert (g.pcie_tx_bytes_per_s, g.pcie_rx_bytes_per_s) == (4791810.0, 6935930.0)
    assert g.fb_used_bytes == 5120 * 2**20 and g.gpu_util_ratio == 0.91
    assert g.busy_ratio == 0.5 and not g.util_fallback


def test_gpu_util_is_only_a_flagged_fallback_and_gr_engine_comes_before_it() -> None:
    t = text({L0: {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": "0.2", "DCGM_FI_DEV_GPU_UTIL": "94"},
              L1: {"DCGM_FI_DEV_GPU_UTIL": "94"}})
    g0, g1 = read_dcgm(parse_exposition(t, source="s"), source="s")
    assert (g0.busy_ratio, g0.util_fallback) == (0.2, False)
    assert (g1.busy_ratio, g1.util_fallback) == (0.94, True)
    assert (g1.hostname, g1.pod, g1.namespace) == ("node-1", "vllm-0", "ml")  # `hostname` on exporter main (#655)


@pytest.mark.parametrize("blank", ["9223372036854775794", "9223372036854775792", "140737488355328",
                                   "1.40737488355329e+14"])
def test_dcgm_blank_sentinels_are_missing_not_values(blank: str) -> None:
    t = text({L0: {"DCGM_FI_PROF_SM_ACTIVE": blank, "DCGM_FI_DEV_FB_USED": blank, "DCGM_FI_DEV_GPU_UTIL": "10"}})
    (g,) = read_dcgm(parse_exposition(t, source="s"), source="s")
    assert g.sm_active_ratio is None and g.fb_used_bytes is None
    assert g.busy_ratio == 0.1 and g.util_fallback
    assert sum("blank sentinel" in d for d in g.dropped) == 2


def test_out_of_range_ratios_are_dropped_with_a_reason() -> None:
    t = text({L0: {"DCGM_FI_PROF_SM_ACTIVE": "1.5", "DCGM_FI_DEV_GPU_UTIL": "250", "DCGM_FI_PROF_PCIE_TX_BYTES": "-1"}})
    (g,) = read_dcgm(parse_exposition(t, source="s"), source="s")
    assert g.sm_active_ratio is None and g.gpu_util_ratio is None and g.pcie_tx_bytes_per_s is None
    assert g.busy_ratio is None and len(g.dropped) == 3


def test_mig_instances_are_separate_gpus_sorted_numerically() -> None:
    t = ('DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="10",UUID="GPU-z"} 0.1\n'
         'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="2",UUID="GPU-y",GPU_I_ID="1",GPU_I_PROFILE="1g.18gb"} 0.3\n'
         'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="2",UUID="GPU-y",GPU_I_ID="2",GPU_I_PROFILE="1g.18gb"} 0.4\n')
    assert [g.gpu for g in read_dcgm(parse_exposition(t, source="s"), source="s")] == ["2/mig1", "2/mig2", "10"]


def test_a_scrape_without_dcgm_series_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no DCGM_FI_"):
        read_dcgm(parse_exposition("vllm:num_requests_running 1\n", source="s"), source="s")


def test_dcgm_source_reads_an_exporter_over_http_in_nvml_series_names(
        peer: Callable[..., HostilePeer]) -> None:
    body = text({L0: {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": "0.5", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "0.25",
                      "DCGM_FI_PROF_PCIE_TX_BYTES": "2097152", "DCGM_FI_DEV_FB_USED": "1024",
                      "DCGM_FI_DEV_GPU_UTIL": "90"}}).encode()
    p = peer(answer(body))
    src = DcgmSource(p.url + "/metrics", clock=lambda: 123)
    assert isinstance(src, MetricSource)
    batch = src.read()
    got = {name: float(batch.of(name)[1][0]) for name in batch.series}
    assert got == {"gpu0/gpm_tensor_util_pct": 25.0, "gpu0/gr_engine_active_pct": 50.0, "gpu0/gpm_pcie_tx_mibs": 2.0,
                   "gpu0/mem_used_mib": 1024.0, "gpu0/util_gpu_pct": 90.0, "gpu0/busy_pct": 50.0,
                   "gpu0/busy_util_fallback": 0.0}
    assert set(batch.ts_ns.tolist()) == {123}
    assert src.last[0].uuid == "GPU-a"


def test_dcgm_source_classifies_http_failures(peer: Callable[..., HostilePeer]) -> None:
    with pytest.raises(SourceUnavailable, match="HTTP 503"):
        DcgmSource(peer(answer(b"busy", status="503 Service Unavailable")).url + "/metrics").read()
    with pytest.raises(InputError, match="HTTP 404"):
        DcgmSource(peer(answer(b"no", status="404 Not Found")).url + "/metrics").read()
    with pytest.raises(InputError, match="not UTF-8"):
        DcgmSource(peer(answer(b"\xff\xfe\xfd")).url + "/metrics").read()
    with pytest.raises(InputError):
        DcgmSource("file:///etc/passwd")
