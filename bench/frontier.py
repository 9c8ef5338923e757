"""The cost–SLO comparison of the README: every baseline setting, Ebb's profiles and the oracle.

For each trace (Azure code, Azure conversation, Mooncake conversation — from ``../shared``),
scaled with ``--peak-replicas 20`` and the default SLO, runs ``hpa`` at targets 30–90 %,
``keda``, ``static``, ``ebb`` (cautious, balanced, lean) and ``oracle``; prints a Markdown
table, checks the acceptance rule against the HPA frontier (the lower convex hull of the HPA
and static points), and writes ``docs/frontier.svg`` (GPU-hours vs violations, one panel per
trace) and ``docs/frontier.json``.

    python bench/frontier.py [--traces code,conv,mooncake] [--out docs]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ebb.sim.compare import compare
from ebb.score.frontier import hpa_frontier_at, render_frontier_svg
from ebb.sim.policies import KNOWN_POLICIES
from ebb.sim.settings import SimSettings
from ebb.config.policy_specs import parse_policies
from ebb.sources.traces import load_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"
TRACES = {
    "code": SHARED / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv",
    "conv": SHARED / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv",
    "mooncake": SHARED / "mooncake-fast25" / "conversation_trace.jsonl",
}
POLICIES = ",".join([f"hpa:target=0.{t}" for t in range(3, 10)]
                    + ["keda", "static", "ebb:profile=cautious", "ebb:profile=balanced", "ebb:profile=lean",
                       "oracle"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="code,conv,mooncake")
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    results: dict[str, list[dict[str, object]]] = {}
    for name in args.traces.split(","):
        path = TRACES[name]
        if not path.exists():
            print(f"skip {name}: {path} absent")
            continue
        cmp = compare(load_trace(path), parse_policies(POLICIES, KNOWN_POLICIES), SimSettings(),
                      fidelity="request", peak_replicas=20)
        cards = [r.scorecard.as_dict() for r in cmp.runs]
        results[name] = cards
        print(f"\n### {name} ({cmp.requests:,} requests, load x{cmp.load_scale:.3g})\n")
        print("| policy | GPU-h | viol % | TTFT p99 ms | scale-downs | misjudged | delay ms | vs HPA frontier |")
        print("|---|---|---|---|---|---|---|---|")
        for c in cards:
            ratio = ""
            if str(c["policy"]).startswith("ebb"):
                f = hpa_frontier_at(cards, float(c["slo_violation_pct"]))
                ratio = f"{float(c['gpu_hours']) / f:.2f}x" if f == f else ""
            print(f"| {c['policy']} | {c['gpu_hours']:.2f} | {c['slo_violation_pct']:.3f} | {c['ttft_p99_ms']:.0f} | "
                  f"{c['scale_downs']} | {c['misjudged_scale_downs']} | {c['sla_violation_delay_ms']:.0f} | {ratio} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "frontier.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    (out / "frontier.svg").write_text(render_frontier_svg(results), encoding="utf-8")
    print(f"\nwrote {out / 'frontier.svg'} and {out / 'frontier.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
