"""Simulated requests per second, per policy, in ``request`` fidelity (and bins/s in ``fluid``).

Workload: the Azure LLM 2023 conversation trace (bundled slice, or the full file in
``../shared`` when present) scaled ×K with ``scale_requests`` so that it holds about
``--requests`` requests. Each policy is run ``--repeat`` times on the same workload; the
median wall time gives requests/s. The peer is the simplest possible policy (``static``),
which measures the engine alone; every other policy's ratio to it shows its own overhead.

    python bench/sim_throughput.py [--requests 1000000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from ebb.model.trace import RequestTrace
from ebb.model.trace_ops import scale_requests
from ebb.sim.compare import prepare, simulate_one
from ebb.sim.policies import KNOWN_POLICIES, PolicyContext, build_policy
from ebb.sim.settings import SimSettings
from ebb.config.policy_specs import parse_policies
from ebb.sources.traces import bundled_trace, load_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces" / "azure-llm-2023"


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
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
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
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"workload: {trace.requests:,} requests ({trace.duration_s / 60:.0f} min, conv x{k:.1f}), "
              f"median of {args.repeat}")
        for key, v in out.items():
            if key.endswith("_requests_per_s"):
                print(f"  {key:32s} {v:12,.0f} req/s   ratio to static engine {v / engine:5.2f}")
        print(f"  {'fluid_hpa_bins_per_s':32s} {out['fluid_hpa_bins_per_s']:12,.0f} bins/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
