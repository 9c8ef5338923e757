"""Ebb on a seeded family of bursty traces with known physics, against static, the oracle and every peer.

Issue #31, deliverable 8. ``--n`` shapes of :func:`ebb.testing.traffic_family.family` (Poisson bases
0.5-50 req/s with and without a cycle; bursts 2-30x for 5-600 s, one-off, random, periodic and
irregularly recurring every 20-240 min over 6-8 h; step changes; lulls to zero; a long-service variant),
plus the issue's two hand-made traces (and, with ``--real``, the bundled Azure slices and the
``../shared`` traces of ``bench/frontier.py``), each written as the CSV a user would give
``ebb simulate`` and read back through the same settings, checks and :func:`ebb.sim.compare.compare`
(``--peak-replicas 20``, default SLO, every policy at its default setting: :data:`POLICIES`).

Prints, per trace, every policy's violations (%) and GPU-hours; how often Ebb is **dominated**
(another policy both cheaper and with fewer violations — the issue's wording; "weakly": no worse on
both and better on one) by static and by any peer (:data:`~ebb.score.frontier.PEER_FAMILIES`, static
included, the oracle never); the median of Ebb's GPU-hours over static's and over the oracle's;
the same per group (burst kind, diurnal, step, lulls, long-service). Writes ``DIR/bursts_family.json``
(every scorecard and the summary) and ``DIR/bursts_family.md``.

    python bench/bursts_family.py [--n 60] [--seed 0] [--jobs 2] [--quick] [--real] [--out DIR]
                                  [--tier asleep:wake_s=2,max=20]

``--tier`` (issue #33) runs static, Ebb, the oracle and ``static-sleep`` with an asleep tier and adds
Ebb's *running* GPU-hours (held minus asleep) over static's, and how often Ebb meets the SLO where
static does; it writes ``bursts_family_tier.json``/``.md`` beside the plain ones. It also runs the
**perfect reactor** (:func:`ebb.sim.compare.search_reactive`): the cheapest schedule that knows each
second's demand once it has arrived and gets capacity back one wake later, its headroom searched per
trace with hindsight. Its GPU-h over static's is what reacting alone, at that wake, can save: where
it needs more than 0.7x static to meet the SLO, only capacity held ahead of bursts (a floor the
history justifies, or a forecast) can.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from ebb.cli.trace_options import check_trace_flags
from ebb.config.policy_specs import parse_policies
from ebb.config.simulate_settings import TraceInputSettings
from ebb.config.tiers import parse_tier
from ebb.errors import EbbError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.score.frontier import PEER_FAMILIES, family
from ebb.score.verdict import SLO_VIOLATION_LIMIT_PCT
from ebb.sim.compare import compare
from ebb.sim.policies import KNOWN_POLICIES
from ebb.sim.settings import ClusterSettings, SimSettings, SloSettings
from ebb.sources.traces import open_trace
from ebb.testing.traffic_family import (TrafficShape, burst_onsets_s, family as shape_family, issue_counts_burst,
                                        issue_poisson_burst, simulate_argv, simulate_input, slo, tags, write_csv)

POLICIES = "hpa,keda,static,ebb,oracle,kpa,ray,keda-vllm,wva,dynamo,aibrix"
"""Every policy at its default setting."""
TIER_POLICIES = "static,ebb,oracle,static-sleep"
"""With ``--tier``: the policies the tier changes (Ebb, the static + idle-sleep baseline) and the
references; the peers keep their upstream behaviour (no tier), so their figures are the plain run's."""
REACTORS = ((1.5, 30), (2.0, 30), (3.0, 30), (4.0, 120), (8.0, 600))
"""With ``--tier``: the memoryless reactors run on every trace, as (headroom, hold s) — one headroom
for the whole family, no hindsight (:func:`ebb.sim.compare.run_reactors`); their (traces meeting the
SLO, median GPU-h / static) points are the frontier reacting with a one-wake comeback reaches."""
PEAK_REPLICAS = 20
"""The default ``--peak-replicas``: each trace's load is calibrated to an oracle peak of 20 replicas."""
QUICK_DURATION_S = 900
"""``--quick``: five shapes (one per burst kind, the long-service one among them) cut to 15 minutes."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One trace to run: a family shape, or a real trace named by ``ebb simulate --trace`` (or frontier's name)."""

    name: str
    group: str  # "family", "issue" or "real"
    shape: TrafficShape | None = None
    real: str | None = None


def _simulate(settings_in: TraceInputSettings, objective: SloSettings, trace: RequestTrace | CountSeries | None = None,
              fidelity: str | None = None, warmup_s: float = 0.0, tier: str | None = None) -> dict[str, Any]:
    """Read the trace as ``ebb simulate`` does (unless given), then compare every policy (with
    ``tier``: :data:`TIER_POLICIES` on a cluster with that asleep tier)."""
    tflags = check_trace_flags(settings_in)
    if trace is None:
        trace = tflags.after_load(open_trace(
            settings_in.trace, settings_in.format, time_col=settings_in.time_col, count_col=settings_in.count_col,
            tokens_in_col=settings_in.tokens_in_col, tokens_out_col=settings_in.tokens_out_col,
            service_col=settings_in.service_time_column))
    fid = fidelity or ("fluid" if isinstance(trace, CountSeries) and tflags.model is None else "request")
    load_scale, peak = settings_in.scaling
    sleep = None if tier is None else parse_tier(tier)
    cluster = ClusterSettings(service=tflags.model, sleep=sleep)
    policies = parse_policies(POLICIES if tier is None else TIER_POLICIES, KNOWN_POLICIES)
    # With a tier, the perfect reactor whose capacity comes back in one wake: what reacting alone can save.
    cmp = compare(trace, policies, SimSettings(slo=objective, cluster=cluster, warmup_s=warmup_s),
                  fidelity=fid, load_scale=load_scale, peak_replicas=peak,
                  reactive_comeback_s=None if sleep is None else sleep.wake_s, reactors=REACTORS)
    cards = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.scorecard.as_dict().items()}
             for r in cmp.runs]
    out: dict[str, Any] = {"requests": cmp.requests, "load_scale": cmp.load_scale, "fidelity": cmp.fidelity,
                           "duration_s": cmp.duration_s, "cards": cards}
    if cmp.reactive is not None:
        r = cmp.reactive
        out["reactive"] = {"gpu_hours": r.replica_seconds / 3600.0, "slo_violation_pct": r.violation_pct,
                           "headroom": r.headroom, "smoothing_s": r.smoothing_s, "comeback_s": sleep.wake_s if sleep else None}
        out["reactors"] = [{"headroom": x.headroom, "hold_s": x.hold_s, "gpu_hours": x.gpu_hours,
                            "slo_violation_pct": x.violation_pct} for x in cmp.reactors]
    return out


def _real_trace(name: str, peak: int | None) -> tuple[TraceInputSettings, RequestTrace | CountSeries | None, str | None]:
    """A bundled slice (``azure-code``), or one of ``bench/frontier.py``'s ``../shared`` traces."""
    if name.startswith("bundled:"):
        return TraceInputSettings(trace=name, peak_replicas=_peak_text(peak)), None, None
    import frontier  # bench/ is on sys.path when this file runs as a script

    return (TraceInputSettings(trace=str(frontier.TRACES[name][1]), peak_replicas=_peak_text(peak)),
            frontier.load(name), frontier.FIDELITY[name])


def _peak_text(peak: int | None) -> str:
    return "off" if peak is None else str(peak)


RECURRING = ("periodic", "irregular")
"""Burst kinds that recur: with ``--seen`` their runs are judged from after the second burst."""


SEEN_MIN_DURATION_S = 6 * 3600.0
"""The issue's recurring-burst figure is over the recurring traces of at least 6 hours."""


def seen_warmup_s(shape: TrafficShape, cold_start_s: float = 60.0) -> float:
    """``--seen``: a recurring shape's warm-up, through its second burst plus two cold starts (a
    recurrence is known from two bursts: the bursts judged are ones the policies have seen recur),
    at most 90 % of the trace; 0 for every other shape. (Capped at half the trace, as it was, the
    warm-up of bursts 2.4 hours apart ended before the second burst, which was then judged.)"""
    onsets = burst_onsets_s(shape)
    if shape.burst_kind not in RECURRING or len(onsets) < 2:
        return 0.0
    return float(min(onsets[1] + shape.burst_len_s + 2 * cold_start_s, 0.9 * shape.duration_s))


def judged_bursts(shape: TrafficShape, warmup_s: float) -> int:
    """The shape's bursts that start after the warm-up: those a run judges."""
    return int((burst_onsets_s(shape) >= warmup_s).sum())


def run_case(case: Case, workdir: str, peak: int | None = PEAK_REPLICAS, seen: bool = False,
             tier: str | None = None) -> dict[str, Any]:
    """One trace: its record (shape, tags, the ``ebb simulate`` command, scorecards), or its error;
    with ``seen``, a recurring shape is judged after its second burst (:func:`seen_warmup_s`)."""
    t0 = time.perf_counter()
    rec: dict[str, Any] = {"name": case.name, "group": case.group, "shape": None, "tags": ["real"], "command": None,
                           "error": None}
    try:
        if case.shape is not None:
            path = write_csv(case.shape, Path(workdir) / f"{case.name}.csv")
            settings_in = simulate_input(case.shape, path, peak_replicas=peak)
            rec.update(shape=dataclasses.asdict(case.shape), tags=list(tags(case.shape)))
            objective = slo(case.shape)
            warm = seen_warmup_s(case.shape) if seen else 0.0
            rec["warmup_s"] = warm
            rec["judged_bursts"] = judged_bursts(case.shape, warm)
            rec.update(_simulate(settings_in, objective, warmup_s=warm, tier=tier))
        else:
            assert case.real is not None
            settings_in, tr, fid = _real_trace(case.real, peak)
            objective = SloSettings()
            rec.update(_simulate(settings_in, objective, tr, fid, tier=tier))
        warm_flag = ["--warmup-s", f"{rec['warmup_s']:.0f}"] if rec.get("warmup_s") else []
        tier_flag = [] if tier is None else ["--tier", tier]
        rec["command"] = " ".join(["ebb simulate", *simulate_argv(settings_in, objective), *warm_flag, *tier_flag,
                                   "--policy", POLICIES if tier is None else TIER_POLICIES])
    except EbbError as exc:  # one trace the simulator refuses does not stop the bench
        rec["error"] = f"{type(exc).__name__}: {exc}"
    rec["wall_s"] = time.perf_counter() - t0
    print(f"[{rec['wall_s']:6.1f} s] {case.name}" + (f": {rec['error']}" if rec["error"] else ""),
          file=sys.stderr, flush=True)
    return rec


# --- dominance and the summary (pure: scorecard dicts in, numbers out) ---------------------------

def _point(card: Mapping[str, Any]) -> tuple[float, float] | None:
    v, g = card.get("slo_violation_pct"), card.get("gpu_hours")
    if v is None or g is None or not (math.isfinite(float(v)) and math.isfinite(float(g))):
        return None
    return float(v), float(g)


def dominates(a: Mapping[str, Any], b: Mapping[str, Any], *, weak: bool = False) -> bool:
    """``a`` is both cheaper (GPU-h) and has fewer violations than ``b``; ``weak``: no worse on both
    and better on one (Pareto). A card without finite figures dominates nothing and is never dominated."""
    pa, pb = _point(a), _point(b)
    if pa is None or pb is None:
        return False
    (va, ga), (vb, gb) = pa, pb
    eps_v, eps_g = 1e-9, 1e-9 * max(1.0, gb)
    if weak:
        return va <= vb + eps_v and ga <= gb + eps_g and (va < vb - eps_v or ga < gb - eps_g)
    return va < vb - eps_v and ga < gb - eps_g


def card_of(cards: Sequence[Mapping[str, Any]], fam: str) -> Mapping[str, Any] | None:
    """The first card of policy family ``fam`` (``ebb``, ``static``, ``oracle``)."""
    return next((c for c in cards if family(str(c["policy"])) == fam), None)


def dominators(cards: Sequence[Mapping[str, Any]], *, among: Iterable[str] = PEER_FAMILIES,
               weak: bool = False) -> list[str]:
    """The policies (families in ``among``; never Ebb or the oracle) that dominate Ebb's card."""
    ours = card_of(cards, "ebb")
    allowed = set(among) - {"ebb", "oracle"}
    if ours is None:
        return []
    return [str(c["policy"]) for c in cards if family(str(c["policy"])) in allowed and dominates(c, ours, weak=weak)]


def _ratio(cards: Sequence[Mapping[str, Any]], fam: str) -> float | None:
    ours, other = card_of(cards, "ebb"), card_of(cards, fam)
    if ours is None or other is None or not float(other["gpu_hours"]) > 0:
        return None
    return float(ours["gpu_hours"]) / float(other["gpu_hours"])


def _running_ratio(cards: Sequence[Mapping[str, Any]]) -> float | None:
    """Ebb's running GPU-h (held minus asleep: an asleep tier) over static's GPU-h."""
    ours, other = card_of(cards, "ebb"), card_of(cards, "static")
    if ours is None or other is None or not float(other["gpu_hours"]) > 0:
        return None
    return (float(ours["gpu_hours"]) - float(ours.get("asleep_gpu_hours") or 0.0)) / float(other["gpu_hours"])


def _meets(card: Mapping[str, Any] | None) -> bool:
    p = None if card is None else _point(card)
    return p is not None and p[0] <= SLO_VIOLATION_LIMIT_PCT


def _reactive_ratio(cards: Sequence[Mapping[str, Any]], reactive: Mapping[str, Any] | None) -> float | None:
    """The perfect reactor's GPU-h (all running: it holds nothing asleep) over static's."""
    static = card_of(cards, "static")
    if reactive is None or static is None or not float(static["gpu_hours"]) > 0:
        return None
    return float(reactive["gpu_hours"]) / float(static["gpu_hours"])


def trace_verdict(cards: Sequence[Mapping[str, Any]], reactive: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Ebb's standing on one trace: who dominates it, its cost against static and the oracle, the SLO;
    with ``reactive`` (a ``--tier`` run), the perfect reactor's cost against static and whether it met."""
    oracle = card_of(cards, "oracle")
    peers_below_oracle = [str(c["policy"]) for c in cards if family(str(c["policy"])) in PEER_FAMILIES
                          and oracle is not None and _meets(c) and float(c["gpu_hours"]) < float(oracle["gpu_hours"])]
    return {
        "dominated_by_static": bool(dominators(cards, among=("static",))),
        "dominated_by": dominators(cards),
        "weakly_dominated_by": dominators(cards, weak=True),
        "ebb_over_static": _ratio(cards, "static"),
        "ebb_running_over_static": _running_ratio(cards),
        "ebb_over_oracle": _ratio(cards, "oracle"),
        "ebb_meets_slo": _meets(card_of(cards, "ebb")),
        "static_meets_slo": _meets(card_of(cards, "static")),
        "peers_cheaper_than_oracle_at_slo": peers_below_oracle,
        "reactive_over_static": _reactive_ratio(cards, reactive),
        "reactive_meets_slo": _meets(reactive),
    }


def _median(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def summarise(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts and medians over the records that ran (``error`` None), overall and per tag."""
    ok = [r for r in records if r.get("error") is None]

    def block(rs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        vs = [r["verdict"] for r in rs]
        return {
            "traces": len(rs),
            "dominated_by_static": sum(v["dominated_by_static"] for v in vs),
            "dominated_by_peer": sum(bool(v["dominated_by"]) for v in vs),
            "weakly_dominated_by_static": sum(any(family(p) == "static" for p in v["weakly_dominated_by"]) for v in vs),
            "weakly_dominated_by_peer": sum(bool(v["weakly_dominated_by"]) for v in vs),
            "ebb_meets_slo": sum(v["ebb_meets_slo"] for v in vs),
            "ebb_misses_slo_static_meets": sum(v["static_meets_slo"] and not v["ebb_meets_slo"] for v in vs),
            "median_ebb_over_static": _median(v["ebb_over_static"] for v in vs),
            "median_ebb_running_over_static": _median(v.get("ebb_running_over_static") for v in vs),
            "static_meets_slo": sum(v["static_meets_slo"] for v in vs),
            "ebb_meets_slo_where_static_does": sum(v["static_meets_slo"] and v["ebb_meets_slo"] for v in vs),
            "median_ebb_over_oracle": _median(v["ebb_over_oracle"] for v in vs),
            "oracle_beaten_at_slo": sum(bool(v["peers_cheaper_than_oracle_at_slo"]) for v in vs),
            # The perfect reactor (--tier): where static meets the SLO, how often reacting within 0.7x can.
            "median_reactive_over_static": _median(v.get("reactive_over_static") for v in vs),
            "reactive_meets_within_0_7_where_static_does": sum(
                bool(v["static_meets_slo"] and v.get("reactive_meets_slo")
                     and (v.get("reactive_over_static") or math.inf) <= 0.7) for v in vs),
        }

    groups = sorted({t for r in ok for t in r["tags"]})
    # The issue's recurring-burst figure: recurring traces of 6 h or more judged on bursts they recur with
    # (a --seen run; without it every burst judged includes the first two).
    recurring = [r for r in ok if r.get("shape") and r["shape"]["burst_kind"] in RECURRING
                 and r["shape"]["duration_s"] >= SEEN_MIN_DURATION_S and r.get("judged_bursts", 0) > 0]
    ebb_points = [_point(c) for r in recurring for c in r["cards"] if c["policy"] == "ebb"]
    ebb_viol = [pt[0] for pt in ebb_points if pt is not None]
    return {"all": block(ok), "family": block([r for r in ok if r["group"] == "family"]),
            "reactors": reactor_frontier(ok),
            "recurring": {**block(recurring), "median_ebb_violation_pct": _median(ebb_viol),
                          "seen": any(r.get("warmup_s") for r in recurring)},
            "by_tag": {t: block([r for r in ok if t in r["tags"]]) for t in groups},
            "errors": [f"{r['name']}: {r['error']}" for r in records if r.get("error") is not None],
            "dominated": [{"trace": r["name"], "by": r["verdict"]["dominated_by"]} for r in ok if r["verdict"]["dominated_by"]]}


def reactor_frontier(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per fixed-headroom reactor (:data:`REACTORS`): on how many traces where static meets the SLO it
    meets it too, and its median GPU-h over static's (the traces that ran it)."""
    runs: dict[tuple[float, int], list[tuple[bool, float]]] = {}
    for r in records:
        static = card_of(r["cards"], "static")
        if not _meets(static) or static is None or not float(static["gpu_hours"]) > 0:
            continue
        for x in r.get("reactors") or ():
            runs.setdefault((x["headroom"], x["hold_s"]), []).append(
                (_meets(x), float(x["gpu_hours"]) / float(static["gpu_hours"])))
    return [{"headroom": h, "hold_s": hold, "traces": len(v), "meets_slo": sum(m for m, _ in v),
             "median_over_static": statistics.median(g for _, g in v)} for (h, hold), v in sorted(runs.items())]


# --- rendering -------------------------------------------------------------------------------------

def _fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if x is None else f"{x:{spec}}{suffix}"


def trace_rows(records: Sequence[Mapping[str, Any]], order: Sequence[str]) -> list[str]:
    """One row per trace: its groups, then ``violations % / GPU-h`` per policy, then the dominators."""
    reacts = any(r.get("reactive") for r in records)
    cols = [*order, *(["perfect reactor"] if reacts else [])]
    rows = ["| trace | groups | " + " | ".join(cols) + " | Ebb dominated by |", "|---" * (len(cols) + 3) + "|"]
    for r in records:
        if r.get("error") is not None:
            rows.append(f"| {r['name']} | {' '.join(r['tags'])} | " + " | ".join("" for _ in cols) + f" | error: {r['error']} |")
            continue
        by_fam = {str(c["policy"]): c for c in r["cards"]}
        cells = []
        for p in order:
            pt = _point(by_fam[p]) if p in by_fam else None
            cells.append("–" if pt is None else f"{pt[0]:.2f} / {pt[1]:.1f}")
        if reacts:
            pt = _point(r["reactive"]) if r.get("reactive") else None
            cells.append("–" if pt is None else f"{pt[0]:.2f} / {pt[1]:.1f}")
        rows.append(f"| {r['name']} | {' '.join(r['tags'])} | " + " | ".join(cells) + " | "
                    + (", ".join(r["verdict"]["dominated_by"]) or "") + " |")
    return rows


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The headline block and the per-group table."""
    a = summary["all"]
    n = a["traces"]

    def pct(k: int) -> str:
        return f"{k}/{n} ({100.0 * k / n:.0f} %)" if n else "0/0"

    lines = [f"- traces run: {n} ({len(summary['errors'])} refused)",
             f"- Ebb dominated by static: {pct(a['dominated_by_static'])}; weakly: {pct(a['weakly_dominated_by_static'])}",
             f"- Ebb dominated by some peer (static included): {pct(a['dominated_by_peer'])}; "
             f"weakly: {pct(a['weakly_dominated_by_peer'])}",
             f"- Ebb meets the SLO (≤ {SLO_VIOLATION_LIMIT_PCT} %): {pct(a['ebb_meets_slo'])}; misses it where static "
             f"meets it: {pct(a['ebb_misses_slo_static_meets'])}",
             f"- median Ebb GPU-h / static: {_fmt(a['median_ebb_over_static'], '.3f')}; / oracle: "
             f"{_fmt(a['median_ebb_over_oracle'], '.3f')}",
             f"- traces where a peer meets the SLO cheaper than the oracle: {pct(a['oracle_beaten_at_slo'])}",
             _recurring_line(summary["recurring"]),
             f"- Ebb meets the SLO on {a['ebb_meets_slo_where_static_does']} of the {a['static_meets_slo']} traces "
             f"where static does; median Ebb running GPU-h (held minus asleep) / static: "
             f"{_fmt(a['median_ebb_running_over_static'], '.3f')}",
             *[f"- memoryless reactor, headroom {x['headroom']:g}, rises held {x['hold_s']} s: meets the SLO on "
               f"{x['meets_slo']} of the {x['traces']} traces where static does, median GPU-h / static "
               f"{x['median_over_static']:.3f}" for x in summary.get("reactors", [])],
             *([] if a["median_reactive_over_static"] is None else [
                 f"- the perfect reactor (demand known once it arrives, capacity back one wake later, headroom "
                 f"searched per trace with hindsight): median GPU-h / static "
                 f"{_fmt(a['median_reactive_over_static'], '.3f')}; meets the SLO within 0.7x static on "
                 f"{a['reactive_meets_within_0_7_where_static_does']} of the {a['static_meets_slo']} traces "
                 "where static does"]),
             "", "| group | traces | dominated by static | by a peer | weakly by a peer | Ebb meets SLO | "
             "median Ebb/static | median Ebb/oracle |", "|---|---|---|---|---|---|---|---|"]
    for tag, b in {"all": a, **summary["by_tag"]}.items():
        lines.append(f"| {tag} | {b['traces']} | {b['dominated_by_static']} | {b['dominated_by_peer']} | "
                     f"{b['weakly_dominated_by_peer']} | {b['ebb_meets_slo']} | {_fmt(b['median_ebb_over_static'], '.3f')} | "
                     f"{_fmt(b['median_ebb_over_oracle'], '.3f')} |")
    if summary["dominated"]:
        lines += ["", "Traces where Ebb is dominated: " + "; ".join(
            f"{d['trace']} (by {', '.join(d['by'])})" for d in summary["dominated"])]
    lines += [f"- refused: {e}" for e in summary["errors"]]
    return lines


def _recurring_line(r: Mapping[str, Any]) -> str:
    """The recurring-burst figure: medians over the periodic and irregular traces of 6 h or more."""
    judged = "judged after their second burst (--seen)" if r["seen"] else "judged whole (first bursts included)"
    return (f"- recurring bursts (periodic and irregular traces of ≥ 6 h, {judged}): {r['traces']} traces, median Ebb "
            f"GPU-h / static {_fmt(r['median_ebb_over_static'], '.3f')} at a median "
            f"{_fmt(r['median_ebb_violation_pct'], '.3f')} % violations; Ebb meets the SLO on {r['ebb_meets_slo']}")


# --- running ------------------------------------------------------------------------------------

def cases(n: int, seed: int, *, quick: bool, real: bool) -> list[Case]:
    """The family's shapes and the issue's two (``--quick``: one shape per burst kind and the long-service
    one, cut to 15 min, and the issue's per-second trace), then the real traces."""
    shapes = shape_family(n, seed)
    if quick:
        picked = {s.burst_kind: s for s in reversed(shapes) if not s.long_service}
        long_one = next(s for s in shapes if s.long_service)
        shapes = [dataclasses.replace(s, duration_s=min(s.duration_s, QUICK_DURATION_S))
                  for s in [*picked.values(), long_one]]
    out = [Case(s.name, "family", shape=s) for s in shapes]
    issue = [issue_counts_burst()] if quick else [issue_poisson_burst(), issue_counts_burst()]
    out += [Case(s.name, "issue", shape=s) for s in issue]
    if real:
        out += [Case(f"real-{b}", "real", real=f"bundled:{b}") for b in ("azure-code", "azure-conv")]
        import frontier

        for name, (_, path) in frontier.TRACES.items():
            if path.exists():
                out.append(Case(f"real-{name}", "real", real=name))
            else:
                print(f"skip real trace {name}: {path} absent (the traces live in ../shared/data/traces)")
    return out


def run_all(todo: Sequence[Case], jobs: int, workdir: str, peak: int | None = PEAK_REPLICAS,
            seen: bool = False, tier: str | None = None) -> list[dict[str, Any]]:
    """Every case's record (in ``todo``'s order), with its verdict; ``jobs`` > 1 runs them in processes."""
    # Longest first so that the workers finish together.
    order = sorted(range(len(todo)), key=lambda i: -(shape.duration_s if (shape := todo[i].shape) else 86_400))
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(run_case, [todo[i] for i in order], [workdir] * len(order), [peak] * len(order),
                                 [seen] * len(order), [tier] * len(order)))
    else:
        done = [run_case(todo[i], workdir, peak, seen, tier) for i in order]
    records = [rec for _, rec in sorted(zip(order, done), key=lambda p: p[0])]
    for rec in records:
        rec["verdict"] = trace_verdict(rec["cards"], rec.get("reactive")) if rec["error"] is None else None
    return records


def render(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], header: str,
           policies: str = POLICIES) -> str:
    """The markdown report: summary, per-group table, then every trace's row."""
    order = policies.split(",")
    return "\n".join(["# Ebb on a family of bursty traces", "", header, "", "## Summary", "", *summary_lines(summary),
                      "", "## Per trace: violations % / GPU-h", "", *trace_rows(records, order)]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60, help="family traces (>= 60 for the issue's figures)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="traces simulated in parallel (processes)")
    ap.add_argument("--quick", action="store_true", help="five 15-minute family traces and the issue's counts one (smoke)")
    ap.add_argument("--peak-replicas", default=str(PEAK_REPLICAS), help="oracle peak the load is calibrated to, or 'off'")
    ap.add_argument("--real", action="store_true", help="also the bundled Azure slices and ../shared's traces")
    ap.add_argument("--out", type=Path, default=Path("docs"), help="where bursts_family.json and .md go")
    ap.add_argument("--seen", action="store_true",
                    help="judge periodic and irregular traces after their second burst (a --warmup-s): bursts seen recur")
    ap.add_argument("--traces-dir", type=Path, default=None, help="keep the generated CSVs here (default: a temp dir)")
    ap.add_argument("--tier", default=None,
                    help="an asleep tier (asleep:wake_s=2,max=20): static, Ebb, the oracle and static-sleep run with it")
    args = ap.parse_args(argv)
    if args.tier is not None:
        try:
            parse_tier(args.tier)
        except EbbError as exc:
            print(str(exc), file=sys.stderr)
            return 2
    if args.n < 1 or args.jobs < 1:
        print(f"--n {args.n} / --jobs {args.jobs}: both must be >= 1 (fix: e.g. --n 60 --jobs 2)", file=sys.stderr)
        return 2
    peak = None if args.peak_replicas == "off" else int(args.peak_replicas) if args.peak_replicas.isdigit() else 0
    if peak is not None and peak < 1:
        print(f"--peak-replicas {args.peak_replicas!r}: a whole number >= 1 or 'off' (fix: e.g. --peak-replicas 20)",
              file=sys.stderr)
        return 2
    policies = POLICIES if args.tier is None else TIER_POLICIES
    t0 = time.perf_counter()
    todo = cases(args.n, args.seed, quick=args.quick, real=args.real)
    with tempfile.TemporaryDirectory(prefix="ebb-bursts-") as tmp:
        workdir = args.traces_dir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        records = run_all(todo, args.jobs, str(workdir), peak, args.seen, args.tier)
    wall = time.perf_counter() - t0
    summary = summarise(records)
    header = (f"Generated by `python bench/bursts_family.py --n {args.n} --seed {args.seed}"
              f"{' --quick' if args.quick else ''}{' --real' if args.real else ''}{' --seen' if args.seen else ''}"
              f"{'' if args.tier is None else ' --tier ' + args.tier}` "
              f"in {wall:.0f} s "
              f"({args.jobs} jobs); `--peak-replicas {args.peak_replicas}`, default SLO (long service: 30 s wait), policies `{policies}` at their "
              "defaults. Dominated = another policy both cheaper and with fewer violations; weakly = no worse on "
              "both, better on one. Peers = " + ", ".join(PEER_FAMILIES) + " (the oracle never).")
    text = render(records, summary, header, policies)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"settings": {"n": args.n, "seed": args.seed, "quick": args.quick, "real": args.real, "seen": args.seen,
                        "peak_replicas": args.peak_replicas, "policies": policies, "tier": args.tier, "wall_s": wall},
           "summary": summary, "traces": records}
    stem = "bursts_family" if args.tier is None else "bursts_family_tier"
    (args.out / f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (args.out / f"{stem}.md").write_text(text, encoding="utf-8")
    print(f"wrote {args.out / (stem + '.json')} and {args.out / (stem + '.md')}; wall time {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
