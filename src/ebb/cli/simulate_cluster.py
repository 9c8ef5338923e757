"""``ebb simulate --cluster SCENARIO``: every service on one pool, Ebb's L1–L3 against per-Deployment peers."""

from __future__ import annotations

import hashlib
import html
import io
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from ebb.cli.checks import STDOUT, human_console, write_scorecards
from ebb.config.scenario import load_scenario
from ebb.config.workloads import WorkloadClass, default_workload_classes
from ebb.errors import ConfigError
from ebb.score.units import human_span, plural
from ebb.sim.cluster.estimate import measure_cluster
from ebb.sim.cluster.inputs import build_inputs
from ebb.sim.cluster.ledger_rows import batch_cycles
from ebb.sim.cluster.run import (
    BUDGET,
    PEER_GRID,
    ClusterResult,
    compare_cluster,
    stacked_series,
)
from ebb.sim.warmup import check_warmup
from ebb.sources.traces.external import check_scenario_inputs
from ebb.sources.traces.scenario_series import TraceSeries

__all__ = ["DEFAULT_CLUSTER_POLICIES", "class_limit_pct", "cluster_verdict", "simulate_cluster"]

DEFAULT_CLUSTER_POLICIES = ",".join(("ebb", *PEER_GRID))


def simulate_cluster(scenario: Path, policy: str, *, json_out: Path | None, report: Path | None, ledger: str,
                     quiet: bool, warmup_s: float | None = None, max_run_min: float = 0.0) -> None:
    """Run the scenario under each policy, print the cluster scorecard, write JSON / report / ledger.
    ``warmup_s`` (``--warmup-s``, whole seconds rounded up) replaces the scenario's own ``warmup_s``.
    Measured first on a slice of the scenario (:mod:`ebb.sim.cluster.estimate`), said unless ``quiet``,
    and refused past ``max_run_min`` minutes (0: no limit) before any policy runs whole."""
    console = human_console(json_out)
    started = time.monotonic()
    sc = load_scenario(scenario)  # outputs and ledger were checked by ``ebb simulate`` before this call
    if warmup_s is not None:
        check_warmup(warmup_s, sc.duration_s)
        sc = replace(sc, warmup_s=math.ceil(warmup_s))
    check_scenario_inputs(sc)  # every missing external file named at once, with where it comes from
    inp = build_inputs(sc, TraceSeries())
    if not quiet:
        console.print(f"{sc.name}: {len(inp.names)} online + {len(inp.batch_names)} batch services, "
                      f"{plural(len(inp.zones), 'zone')} ({plural(int(inp.zone_gpus.sum()), 'GPU')}), "
                      f"{inp.seconds / 3600:.2f} h, "
                      f"{plural(int(inp.arrivals.sum()), 'request')}"
                      + (f"; the first {inp.warmup_s:,} s warm-up, not scored" if inp.warmup_s else ""))
    policies = [p.strip() for p in policy.split(",") if p.strip()]
    est = None if quiet and max_run_min <= 0 else measure_cluster(sc, inp, policies)  # nothing to say or check
    if est is not None and max_run_min > 0 and est.expected_s > max_run_min * 60.0:
        raise ConfigError(f"this cluster run would take too long: {est.line()}, past --max-run-min {max_run_min:g} "
                          f"(fix: fewer policies with --policy, a shorter duration_s in {scenario.name}; or raise "
                          "--max-run-min, 0 for no limit)")
    if est is not None and not quiet:
        console.print(escape(est.line()), soft_wrap=True)
    done = 0
    run_started = time.monotonic()

    def tick(r: ClusterResult) -> None:
        nonlocal done
        done += 1
        if est is not None and not quiet:
            left = est.left_s(done, time.monotonic() - run_started)
            more = f", ≈ {human_span(left)} left" if done < len(policies) else ""
            print(f"  {r.policy}: done at {time.monotonic() - started:.0f} s{more}", file=sys.stderr, flush=True)

    results, best = compare_cluster(sc, policies, inp=inp, progress=tick)
    said = cluster_verdict(results, best, sc.classes)
    if said is not None:  # the verdict first, as in the single-service scorecard
        console.print(escape(said))
    console.print(_table(results, best, console.width, warmup_s=inp.warmup_s, classes=sc.classes))
    if ledger:
        _record(ledger, sc.name, results, inp, console)
    cards: list[dict[str, Any]] = [r.scorecard for r in results]
    if json_out is not None:
        write_scorecards(json_out, {"scenario": sc.name, "runs": cards, "best_per_service_peer": best})
        if json_out != STDOUT:
            console.print(f"scorecards written to {json_out}")
    if report is not None:
        report.write_text(_html(sc.name, results, best, inp, sc.classes), encoding="utf-8")
        console.print(f"report written to {report}")


def class_limit_pct(name: str, entry: dict[str, Any], classes: Sequence[WorkloadClass]) -> float | None:
    """The most violations (%) class ``name`` may have in a cluster scorecard, None when it states none.

    An online class (its entry counts ``requests``) may have :data:`~ebb.sim.cluster.run.BUDGET` of its
    requests late (0.1 %: the bar the best per-service peer is chosen by); a batch class (its entry
    counts ``demand_gpu_s``: violations are demanded GPU time not served) may miss
    ``1 - epoch_completion_min`` of it (2 % for offline-training), None without that floor."""
    if "demand_gpu_s" not in entry:
        return 100.0 * BUDGET
    wc = next((c for c in classes if c.name == name), None)
    # rounded: 100 × (1 − 0.98) is 2.0000000000000018 in floats, and a limit is printed and compared
    return None if wc is None or wc.epoch_completion_min is None else round(100.0 * (1.0 - wc.epoch_completion_min), 9)


def _misses(name: str, entry: dict[str, Any] | None, classes: Sequence[WorkloadClass]) -> bool:
    """Whether a class's figure is over its limit (:func:`class_limit_pct`)."""
    if entry is None:
        return False
    limit = class_limit_pct(name, entry, classes)
    return limit is not None and float(entry["violation_pct"]) > limit + 1e-12


def cluster_verdict(results: list[ClusterResult], best: dict[str, Any] | None,
                    classes: Sequence[WorkloadClass] = ()) -> str | None:
    """Ebb against the best per-service peer configuration, in one sentence (None without both):
    online GPU-hours as a ratio and in %, then **every** class's violations, Ebb's and the peer's,
    each marked ✗ when it is over its limit (:func:`class_limit_pct`), the limit in brackets."""
    ebb = next((r.scorecard for r in results if r.policy.split(":")[0] == "ebb"), None)
    if ebb is None or best is None or not best["gpu_hours_online"] > 0:
        return None
    classes = classes or default_workload_classes()
    ratio = ebb["gpu_hours_online"] / best["gpu_hours_online"]
    more = f"{(ratio - 1) * 100:.0f} % more" if ratio >= 1 else f"{(1 - ratio) * 100:.0f} % fewer"
    parts = []
    for name in sorted(set(ebb["violations_by_class"]) | set(best["violations_by_class"])):
        mine, theirs = ebb["violations_by_class"].get(name), best["violations_by_class"].get(name)
        either = mine if mine is not None else theirs
        assert either is not None  # the name came from one of the two
        limit = class_limit_pct(name, either, classes)
        unserved = " unserved" if "demand_gpu_s" in either else ""

        def cell(e: dict[str, Any] | None, name: str = name) -> str:
            return "-" if e is None else f"{e['violation_pct']:.3f} %" + (" ✗" if _misses(name, e, classes) else "")

        parts.append(f"{name} {cell(mine)}{unserved} vs {cell(theirs)}"
                     + (f" (limit {limit:g} %)" if limit is not None else ""))
    return (f"Ebb: {ebb['gpu_hours_online']:.1f} online GPU-h = {ratio:.2f}× the best per-service peer "
            f"configuration ({best['gpu_hours_online']:.1f}; {more} GPU-h); violations, Ebb vs that peer: "
            + "; ".join(parts) + ".")


_CLUSTER_DROPS = ("reclaim s", "max/100ms", "writes/s", "quota", "skew", "preempt", "asleep", "BE done", "batch")
"""Columns given up, first to last, until the cluster table fits the terminal (all stay in --json)."""


def _table(results: list[ClusterResult], best: dict[str, Any] | None, width: int = 80, *,
           warmup_s: int = 0, classes: Sequence[WorkloadClass] = ()) -> Table:
    """The cluster scorecard at most ``width`` columns wide when the class columns allow it (columns
    dropped in :data:`_CLUSTER_DROPS` order; policy, GPU-h, online and the classes always stay). A
    class cell over its limit (:func:`class_limit_pct`) carries a red ✗, the best peer's row too."""
    known = tuple(classes) or tuple(default_workload_classes())
    classes_shown = sorted({k for r in results for k in r.scorecard["violations_by_class"]})

    def cls_pct(c: dict[str, Any], k: str, missing: str) -> str:
        v = c["violations_by_class"].get(k)
        return missing if v is None else f"{v['violation_pct']:.3f}" + (" [red]✗[/]" if _misses(k, v, known) else "")

    cols: dict[str, Callable[[dict[str, Any]], str]] = {
        "policy": lambda c: escape(c["policy"] + (f" (l1={c['l1']})" if "l1" in c else "")),
        "GPU-h": lambda c: f"{c['gpu_hours']:.1f}",
        "online": lambda c: f"{c['gpu_hours_online']:.1f}", "batch": lambda c: f"{c['gpu_hours_batch']:.1f}",
        **{k: _class_cell(cls_pct, k) for k in classes_shown},
        "skew": lambda c: str(c["max_zone_skew"]), "writes/s": lambda c: f"{c['writes_per_s']:.2f}",
        "max/100ms": lambda c: str(c["max_writes_per_100ms"]), "quota": lambda c: str(c["quota_breach_s"]),
    }
    if any("best_effort_gpu_hours_done" in r.scorecard for r in results):  # a tier or lending costs
        cols.update({"asleep": lambda c: f"{c['gpu_hours_online_asleep']:.1f}",
                     "BE done": lambda c: f"{c['best_effort_gpu_hours_done']:.1f}",
                     "preempt": lambda c: str(c["preemptions"]), "reclaim s": _reclaim_cell})
    measure = Console(width=10_000, file=io.StringIO())  # measures natural widths, prints nothing
    shown = list(cols)
    for drop in (None, *_CLUSTER_DROPS):
        shown = [k for k in shown if k != drop]
        t = Table(title="cluster scorecard (GPU-h online + batch; violations % by class"
                        + ("; online includes asleep (held, billed), BE done = best-effort work net of preemption "
                           "costs" if "asleep" in shown else "")
                        + (f"; first {warmup_s:,} s warm-up, not scored)" if warmup_s else ")"))
        for col in shown:
            t.add_column(col, justify="left" if col == "policy" else "right")
        for r in results:
            t.add_row(*(cols[col](r.scorecard) for col in shown))
        if best is not None:
            t.add_row("best per-service peer",
                      *(f"{best['gpu_hours_online']:.1f}" if col == "online" else
                        cls_pct(best, col, "-") if col in classes_shown else "" for col in shown[1:]))
        if Measurement.get(measure, measure.options.update_width(10_000), t).maximum <= width:
            break
    limits = ", ".join(f"{k} {lim:g} %" for k in classes_shown
                       if (lim := _limit_of(k, results, known)) is not None)
    caption = f"✗ = over the class's limit ({limits})" if limits else ""
    if best is not None:
        ebb = next((r.scorecard for r in results if r.policy.split(":")[0] == "ebb"), None)
        if ebb is not None and best["gpu_hours_online"] > 0:
            ratio = ebb["gpu_hours_online"] / best["gpu_hours_online"]
            caption = (f"Ebb online GPU-h = {ratio:.2f}x the best per-service peer configuration"
                       + (f"; {caption}" if caption else ""))
    t.caption = caption or None
    return t


def _limit_of(name: str, results: list[ClusterResult], classes: Sequence[WorkloadClass]) -> float | None:
    """Class ``name``'s limit as the first scorecard that has it states it (:func:`class_limit_pct`)."""
    entry = next((e for r in results if (e := r.scorecard["violations_by_class"].get(name)) is not None), None)
    return None if entry is None else class_limit_pct(name, entry, classes)


def _reclaim_cell(c: dict[str, Any]) -> str:
    """Median / max seconds from a wake on a lent GPU to ready ("-" when none happened)."""
    r = c["reclaim_delay_s"]
    return "-" if not r["count"] else f"{r['median']:.0f}/{r['max']:.0f}"


def _class_cell(fmt: Callable[[dict[str, Any], str, str], str], k: str) -> Callable[[dict[str, Any]], str]:
    # A factory, so each class column keeps its own class name (a lambda in a loop would share the last).
    return lambda c: fmt(c, k, "0.000")


def _record(where: str, name: str, results: list[ClusterResult], inp: Any, console: Console) -> None:
    from ebb.ledger import open_ledger

    now_ns = time.time_ns()
    run_id = "c" + hashlib.sha1(f"{now_ns}{name}".encode()).hexdigest()[:5]
    book = open_ledger(where)
    n = 0
    try:
        for i, r in enumerate(results, start=1):
            if r.run.batches and r.policy.split(":")[0] == "ebb":
                for cyc in batch_cycles(f"{run_id}-{i}", r.policy, inp, r.run, recorded_unix_ns=now_ns):
                    book.append_cycle(cyc)
                    n += len(cyc.decisions)
    finally:
        book.close()
    console.print(f"{n} throttled writes recorded in {where} (run {run_id}), one cycle per batch")


def _html(name: str, results: list[ClusterResult], best: dict[str, Any] | None, inp: Any,
          classes: Sequence[WorkloadClass] = ()) -> str:
    parts = [f"<!doctype html><meta charset=utf-8><title>ebb cluster — {html.escape(name)}</title>",
             "<style>body{font:14px sans-serif;max-width:1240px;margin:auto}table{border-collapse:collapse}"
             "td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}td:first-child{text-align:left}"
             "svg{max-width:100%}</style>", f"<h1>Cluster: {html.escape(name)}</h1>"]
    if inp.warmup_s:
        parts.append(f"<p>Warm-up: the first {inp.warmup_s:,} s fed every policy but are not scored (figures "
                     "count from then on; the charts show the whole run).</p>")
    said = cluster_verdict(results, best, classes)
    if said is not None:
        parts.append(f"<p><b>{html.escape(said)}</b></p>")
    parts.append("<table><tr><th>policy<th>GPU-h<th>online<th>batch<th>max skew<th>writes/s<th>max per 100 ms"
                 "<th>quota breach s</tr>")
    for r in results:
        c = r.scorecard
        parts.append(f"<tr><td>{html.escape(c['policy'])}<td>{c['gpu_hours']:.1f}<td>{c['gpu_hours_online']:.1f}"
                     f"<td>{c['gpu_hours_batch']:.1f}<td>{c['max_zone_skew']}<td>{c['writes_per_s']:.2f}"
                     f"<td>{c['max_writes_per_100ms']}<td>{c['quota_breach_s']}</tr>")
    parts.append("</table>")
    for r in results:
        t, by_service, by_zone = stacked_series(inp, r.run)
        parts.append(f"<h2>{html.escape(r.policy)}: GPUs by service</h2>" + _stacked_svg(t, by_service, inp.names))
        parts.append(f"<h3>{html.escape(r.policy)}: GPUs by zone (batch included)</h3>"
                     + _stacked_svg(t, by_zone, inp.zones))
    return "\n".join(parts) + "\n"


def _stacked_svg(t: np.ndarray, values: np.ndarray, labels: tuple[str, ...], w: int = 1200, h: int = 260) -> str:
    """A stacked area chart (one layer per label) as inline SVG, with a legend of the 12 largest."""
    if len(t) < 2 or values.size == 0:
        return "<p>(no samples)</p>"
    cum = np.cumsum(values, axis=1)
    top = float(cum[:, -1].max()) or 1.0
    x = (t - t[0]) / max(float(t[-1] - t[0]), 1.0) * (w - 60) + 50
    out = [f'<svg viewBox="0 0 {w} {h + 40}" role="img"><text x="4" y="12" font-size="11">GPUs (max {top:.0f})</text>']
    prev = np.zeros(len(t))
    order = np.argsort(-values.sum(axis=0))
    for j in range(values.shape[1]):
        hi = cum[:, j]
        y_hi = h - hi / top * (h - 20)
        y_lo = h - prev / top * (h - 20)
        pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(x, y_hi)) + " " + \
              " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(x[::-1], y_lo[::-1]))
        hue = (j * 137) % 360
        out.append(f'<polygon points="{pts}" fill="hsl({hue},55%,60%)" stroke="none">'
                   f"<title>{html.escape(labels[j])}</title></polygon>")
        prev = hi
    for k, j in enumerate(order[:12]):
        hue = (int(j) * 137) % 360
        out.append(f'<rect x="{50 + k * 95}" y="{h + 12}" width="10" height="10" fill="hsl({hue},55%,60%)"/>'
                   f'<text x="{64 + k * 95}" y="{h + 21}" font-size="10">{html.escape(labels[int(j)][:14])}</text>')
    out.append("</svg>")
    return "".join(out)
