"""Simulated requests per second, per policy, in ``request`` fidelity (and bins/s in ``fluid``);
and seconds per simulated day on sparse traces, where the span dwarfs the work.

Dense workload: the Azure LLM 2023 conversation trace (bundled slice, or the full file in
``../shared`` when present) scaled ×K with ``scale_requests`` so that it holds about
``--requests`` requests. Each policy is run ``--repeat`` times on the same workload; the
median wall time gives requests/s. The peer is the simplest possible policy (``static``),
which measures the engine alone; every other policy's ratio to it shows its own overhead.

Sparse workloads (``--sparse-days`` > 0), each run in request fidelity on the service-time model
(one slot a replica) as every run goes and with the reference settings that cost span (signal rows
written every second, every reconcile run: ``simulate_requests(every_second=True)``; the results are
the same, ``tests/unit/sim/test_request_signals.py``), median of ``--repeat``, as seconds per
simulated day:

* ``long-service``: the first ``--sparse-days`` days of ``bench/long_service.py``'s 23-day
  diffusion-like trace (~1,200 requests a day, 5–600 s each; ``--sparse-trace CSV`` replays a log of
  your own instead: ``ts`` and ``exec_time_seconds`` columns);
* ``idle``: two requests 28 h apart.

    python bench/sim_throughput.py [--requests 1000000] [--repeat 3] [--sparse-days 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from ebb.model.ids import TraceName
from ebb.model.trace import RequestTrace
from ebb.model.trace_ops import scale_requests
from ebb.sim.baselines.oracle import occupancy_rate, schedule_for
from ebb.sim.compare import prepare, simulate_one
from ebb.sim.policies import KNOWN_POLICIES, PolicyContext, build_policy
from ebb.sim.request_engine import simulate_requests
from ebb.sim.service_time import ServiceTimeModel
from ebb.sim.settings import ClusterSettings, SimSettings, SloSettings
from ebb.config.policy_specs import parse_policies
from ebb.sources.traces import bundled_trace, load_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_service import long_service_trace  # noqa: E402  (bench/ is not a package)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces" / "azure-llm-2023"
SPARSE_POLICIES = "static,hpa,keda,oracle,ebb"
SERVICE = SimSettings(slo=SloSettings(ttft_ms=30_000.0, e2e_ms=630_000.0),
                      cluster=ClusterSettings(service=ServiceTimeModel(concurrency=1)))


def _trace() -> RequestTrace:
    f = SHARED / "AzureLLMInferenceTrace_conv.csv"
    t = load_trace(f) if f.exists() else bundled_trace("azure-conv")
    assert isinstance(t, RequestTrace)
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=40, help="fleet size the baselines are bounded by")
    ap.add_argument("--sparse-days", type=float, default=1.0,
                    help="days of the long-service trace to time (0: no sparse workloads)")
    ap.add_argument("--sparse-trace", type=Path, help="a request log (ts, exec_time_seconds) instead")
    ap.add_argument("--sparse-policies", default=SPARSE_POLICIES)
    ap.add_argument("--dense", action=argparse.BooleanOptionalAction, default=True,
                    help="time the dense Azure workload too")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: dict[str, float] = {}
    if args.dense:
        out.update(_dense(args))
    if args.sparse_days > 0:
        out.update(_sparse(args))
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


def _dense(args: argparse.Namespace) -> dict[str, float]:
    """The dense workload's requests/s per policy and the fluid engine's bins/s."""
    base = _trace()
    k = max(1.0, args.requests / base.requests)
    trace = scale_requests(base, k, seed=0)
    settings = SimSettings()
    ctx = PolicyContext(settings, np.full(int(trace.duration_s) + 2, args.replicas // 2, dtype=np.int64))
    specs = f"static:replicas={args.replicas // 2},hpa:max={args.replicas},hpa:metric=inflight,max={args.replicas}," \
            f"keda:max={args.replicas},oracle"
    out: dict[str, float] = {"requests": float(trace.requests)}
    for item in parse_policies(specs, KNOWN_POLICIES):
        walls = []
        for _ in range(args.repeat):
            pol = build_policy(item, ctx)
            t0 = time.perf_counter()
            simulate_one(trace, pol, settings)
            walls.append(time.perf_counter() - t0)
        rps = trace.requests / statistics.median(walls)
        out[f"{item.name}{'' if item.name != 'hpa' or not item.get('metric') else '_' + str(item.get('metric'))}"
            "_requests_per_s"] = rps
    fluid = prepare(trace, "fluid", settings)
    walls = []
    for _ in range(args.repeat):
        pol = build_policy(parse_policies(f"hpa:max={args.replicas}", KNOWN_POLICIES)[0], ctx)
        t0 = time.perf_counter()
        simulate_one(fluid, pol, settings)
        walls.append(time.perf_counter() - t0)
    out["fluid_hpa_bins_per_s"] = len(fluid.counts) / statistics.median(walls)
    engine = out["static_requests_per_s"]
    if not args.json:
        print(f"workload: {trace.requests:,} requests ({trace.duration_s / 60:.0f} min, conv x{k:.1f}), "
              f"median of {args.repeat}")
        for key, v in out.items():
            if key.endswith("_requests_per_s"):
                print(f"  {key:32s} {v:12,.0f} req/s   ratio to static engine {v / engine:5.2f}")
        print(f"  {'fluid_hpa_bins_per_s':32s} {out['fluid_hpa_bins_per_s']:12,.0f} bins/s")
    return out


def _sparse_traces(args: argparse.Namespace) -> dict[str, RequestTrace]:
    """The sparse workloads of the module docstring."""
    if args.sparse_trace is not None:
        log = load_trace(args.sparse_trace, time_col="ts", service_col="exec_time_seconds")
        assert isinstance(log, RequestTrace)
        m = log.arrival_s - log.arrival_s[0] < args.sparse_days * 86400.0
        long = RequestTrace(log.name, log.arrival_s[m] - log.arrival_s[0], log.tokens_in[m], log.tokens_out[m],
                            service_s=None if log.service_s is None else log.service_s[m])
    else:
        long = long_service_trace(args.sparse_days)
    one = np.ones(2, dtype=np.int64)
    idle = RequestTrace(TraceName("idle"), np.array([0.0, 28 * 3600.0]), one, one, service_s=np.array([30.0, 30.0]))
    return {"long-service": long, "idle": idle}


def _sparse(args: argparse.Namespace) -> dict[str, float]:
    """Seconds per simulated day per sparse workload and policy, as runs go and with the reference
    settings (rows every second, every reconcile), and their ratio."""
    out: dict[str, float] = {}
    for name, trace in _sparse_traces(args).items():
        days = (trace.duration_s + 1.0) / 86400.0
        rate = occupancy_rate(trace.arrival_s, np.asarray(trace.service_s), trace.duration_s)
        ctx = PolicyContext(SERVICE, schedule_for(rate, 1.2, 10, SERVICE.cluster.cold_start_s))
        if not args.json:
            print(f"sparse workload {name}: {trace.requests:,} requests over {days:.2f} days, "
                  f"median of {args.repeat}, seconds per simulated day")
        for item in parse_policies(args.sparse_policies, KNOWN_POLICIES):
            per_day = {}
            for label, every in (("skipped", False), ("dense", True)):
                walls = []
                for _ in range(args.repeat):
                    pol = build_policy(item, ctx)
                    t0 = time.perf_counter()
                    simulate_requests(trace, pol, SERVICE, every_second=every)
                    walls.append(time.perf_counter() - t0)
                per_day[label] = statistics.median(walls) / days
                out[f"{name}_{item.name}_{label}_s_per_day"] = per_day[label]
            ratio = per_day["skipped"] / per_day["dense"]
            out[f"{name}_{item.name}_skipped_over_dense"] = ratio
            if not args.json:
                print(f"  {item.text:10s} {per_day['skipped']:9.3f} s/day   rows every second {per_day['dense']:9.3f} "
                      f"s/day   ratio {ratio:5.3f}")
    return out


if __name__ == "__main__":
    sys.exit(main())
