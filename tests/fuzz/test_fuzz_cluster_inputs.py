"""Fuzz the cluster-side readers (issue 32, item 9): scenarios, fleet files, sweep specs, ``ebb plan``
snapshots and ``ebb pareto`` measurement CSVs.

The second review's ``fuzz3.py`` targets ``scenario``, ``fleet``, ``sweep``, ``plan`` and ``pareto``,
folded in: each input is a seed mutated as bytes (hostile tokens — braces, format fields such as
``{i:>900000000}`` and ``{client.__class__}``, ``..`` paths, ``/dev/zero``, NaN, integers past int64,
``[`` by the hundred; bytes flipped, ranges deleted or repeated, truncation), written to a file and
read exactly as the CLI reads it (the scenario parsed, the fleet loaded, the sweep spec loaded and
expanded into jobs, the snapshot loaded and planned, the CSV reported in batch and windowed mode).
The property, as in ``fuzz3.py``: each reader returns or raises one single-line
:class:`~ebb.errors.ConfigError` / :class:`~ebb.errors.InputError` — never another exception, never a
hang (a 3 s per-input deadline). Budgets are small and fixed (``max_examples`` 150 per target, about 10 s in all), inputs derandomized.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebb.analysis.measurements import parse_objectives
from ebb.analysis.pareto import pareto_report
from ebb.config.fleet import load_fleet
from ebb.config.scenario import load_scenario
from ebb.config.workloads import default_workload_classes
from ebb.errors import ConfigError, InputError
from ebb.sim.cluster.inputs import ScenarioSeries, expand_services
from ebb.sim.snapshot import load_snapshot
from ebb.sim.snapshot_plan import plan_snapshot
from ebb.sim.sweep import expand_jobs, load_sweep_spec

from mutations import append, byte, delete_run, duplicate, insert, mutate, nest, overwrite, truncate

REPO = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=150, deadline=timedelta(seconds=3), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])

_SCENARIO = """name: tiny
duration_s: 600
zones: {a: 4, b: 4}
quotas: [{namespace: shop, min_gpus: 2, max_gpus: 8}]
services:
  - {name: web, namespace: shop, class: order-fulfilment, arrivals: {bundled: azure-code}, capacity_rps: 3}
  - {name: t, namespace: lab, class: offline-training, demand: {alibaba_gpu: pods.csv, qos: [BE], time_scale: 149}}
  - {name: s, namespace: lab, class: order-fulfilment, arrivals: {servegen: m, client: 7, rate_scale: 0.5}}
generate:
  - {servegen: m-mid, clients: 2, name: "x-{client}", namespace: "t-{i}", class: order-fulfilment}
"""
_SNAPSHOT = """budget: 3
max_skew: 1
workloads:
  - name: chat
    class: order-fulfilment
    namespace: serving
    remove: 2
    weight: 0.5
    pdb: {max_unavailable: 1}
    signals: {latency_p99_ms: 310, success_ratio: 0.9999, burst_active: false, utilisation_ratio: 0.3, staleness_s: 0.5}
    replicas:
      - {id: chat-0, zone: a, load: 0.2, ready: true, deletion_cost: 0}
      - {id: chat-1, zone: b, load: 0.1}
quotas:
  - {namespace: serving, min: {nvidia.com/gpu: 2000}, max: {nvidia.com/gpu: 4000}}
pods:
  - {name: chat-0, namespace: serving, priority: 0, created_s: 100, requests: {nvidia.com/gpu: 1000}}
  - {name: chat-1, namespace: serving, requests: {nvidia.com/gpu: 1000}, limits: {nvidia.com/gpu: 1000}}
pending:
  - {name: chat-9, namespace: serving, requests: {nvidia.com/gpu: 1000}, limits: {nvidia.com/gpu: 1000}}
"""
_SWEEP = """scenarios: [azure-conv, azure-code]
policies: [ebb, "hpa:target=0.7", static]
knobs:
  minutes: [30, 60]
  load_scale: [0.3, 1.0]
seed: 0
"""
SEEDS: dict[str, list[bytes]] = {
    "scenario": [_SCENARIO.encode(), *(p.read_bytes() for p in sorted((REPO / "examples" / "cluster").glob("*.yaml")))],
    "fleet": [(REPO / "docs" / "examples" / "fleet.yaml").read_bytes()],
    "sweep": [_SWEEP.encode()],
    "plan": [_SNAPSHOT.encode()],
    "pareto": [b"cfg,a,b,c,t\nx,1,2,3,0\ny,2,1,3,1\nz,3,3,1,2\n"],
}
TOKENS = [b"{", b"}", b"{i:>900000000}", b"{client.__class__}", b"{0}", b"[", b"]", b"\x00", b"\xff\xfe", b"\n- ",
          b": ", b"---\n", b"'", b'"', b"\\", b"&a ", b"*a", b"<<: *a\n", b"NaN", b".nan", b"-.inf", b"1e309",
          b"-1", b"-50", b"0", str(2**63).encode(), str(2**64).encode(), b"9" * 400, b"../../../../etc/passwd",
          b"/dev/zero", b"null", b"true", b"\t", b"\r", b",", b"#", b"\xe2\x80\xae"]
OPS = [overwrite(byte, 255), insert(TOKENS), delete_run(), duplicate(400), truncate(),
       nest([10, 70, 300], [b"[", b"{", b"- "]), append(TOKENS)]


class _Clients:
    """The one ``ScenarioSeries`` method service expansion needs: the asked clients, without data."""

    def client_ids(self, path: str, clients: int | Sequence[int]) -> tuple[int, ...]:
        return tuple(range(min(clients, 50))) if isinstance(clients, int) else tuple(clients[:50])


def _scenario(p: Path) -> None:
    # Expanding generate: entries runs their name patterns (str.format), where a format bomb would go off.
    expand_services(load_scenario(p), cast(ScenarioSeries, _Clients()))


def _fleet(p: Path) -> None:
    load_fleet(p)


def _sweep(p: Path) -> None:
    expand_jobs(load_sweep_spec(p))


_CLASSES = tuple(default_workload_classes())


def _plan(p: Path) -> None:
    plan_snapshot(load_snapshot(p, _CLASSES), _CLASSES)


_OBJECTIVES = parse_objectives("a,b,-c")


def _pareto(p: Path) -> None:
    pareto_report(p, _OBJECTIVES)
    pareto_report(p, _OBJECTIVES, time_column="t", window_s=1.5)


TARGETS: dict[str, tuple[Callable[[Path], None], str]] = {
    "scenario": (_scenario, ".yaml"), "fleet": (_fleet, ".yaml"), "sweep": (_sweep, ".yaml"),
    "plan": (_plan, ".yaml"), "pareto": (_pareto, ".csv"),
}


@st.composite
def mutated(draw: st.DrawFn, target: str) -> bytes:
    return mutate(draw, draw(st.sampled_from(SEEDS[target])), OPS)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_each_cluster_reader_returns_or_raises_one_line_config_or_input_error(
        target: str, tmp_path: Path, fuzz_tried: Callable[[str], None]) -> None:
    read, suffix = TARGETS[target]

    @FUZZ
    @given(raw=mutated(target))
    def run(raw: bytes) -> None:
        fuzz_tried(target)
        path = tmp_path / f"input{suffix}"
        path.write_bytes(raw)
        try:
            read(path)
        except (ConfigError, InputError) as exc:
            assert "\n" not in str(exc), str(exc)[:300]

    run()
