"""Drive a real Ray Serve deployment with recorded arrivals and record its replica timeline.

Run as a script in its own process (``python ray_serve_harness.py spec.json out.json``): Ray Serve
reads its metric push intervals from environment variables when ``ray.serve`` is first imported,
so the intervals under test are set before that import, in a fresh interpreter; and a separate
process group lets the caller kill Ray's whole process tree if anything hangs.

The deployment is a sleep: each request takes ``sleep_s`` whatever the load, so a replica with
``max_ongoing_requests`` slots serves ``max_ongoing_requests / sleep_s`` requests per second. The
client sends every request at its recorded arrival time through one ``DeploymentHandle`` (the
handle is where Ray counts running and queued requests), and a poller reads ``serve.status()``
every ``poll_s`` into ``(t_s, target, running, total)`` rows: target = replicas in any state but
STOPPING (the controller's target once its change is applied), running = RUNNING replicas, total =
the controller's current ``total_num_requests`` (diagnostics). Times are seconds since the time
origin of the arrivals. The second half of the module is the emulated side and the comparison.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class RealRunSpec:
    """One real run: the deployment, its autoscaling config, the arrivals and the polling."""

    arrivals_s: tuple[float, ...]
    sleep_s: float = 0.5
    max_ongoing_requests: int = 4
    autoscaling: dict[str, float | int] = field(default_factory=dict)
    """Ray ``autoscaling_config`` (``metrics_interval_s`` also sets both push-interval variables)."""
    poll_s: float = 0.25
    tail_s: float = 8.0
    """Keep polling this long after the last arrival (s)."""
    num_cpus: int = 8
    """Logical CPUs for ``ray.init``; replicas ask for none, so this only bounds Serve's actors."""


def arrivals_for(segments: tuple[tuple[float, float, float], ...], seed: int = 15) -> tuple[float, ...]:
    """Recorded arrivals of a piecewise-linear rate: ``(duration_s, rate_from, rate_to)`` per
    segment, a Poisson process drawn once with ``seed`` (unit-exponential steps of the integrated
    rate, integrated in 1 ms steps). Random gaps keep the simulator's whole-second snapshots from
    aliasing with a regular arrival grid; the seed makes the pattern the same every run."""
    import random

    rng = random.Random(seed)
    out: list[float] = []
    t0, acc = 0.0, 0.0
    nxt = rng.expovariate(1.0)
    for dur, r0, r1 in segments:
        steps = int(round(dur * 1000))
        for k in range(steps):
            acc += (r0 + (r1 - r0) * (k + 0.5) / steps) * dur / steps
            while acc >= nxt:
                out.append(round(t0 + (k + 1) * dur / steps, 4))
                nxt += rng.expovariate(1.0)
        t0 += dur
    return tuple(out)


def _main(spec_path: str, out_path: str) -> None:
    with open(spec_path) as f:
        raw = json.load(f)
    spec = RealRunSpec(**{**raw, "arrivals_s": tuple(raw["arrivals_s"])})
    interval = str(spec.autoscaling.get("metrics_interval_s", 10.0))
    # Must precede the first import of ray.serve (constants are read at import, and inherited by
    # the controller and replica processes Ray spawns from this one).
    os.environ["RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S"] = interval
    os.environ["RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S"] = interval
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import asyncio
    import logging
    import time
    import warnings

    import ray
    from ray import serve

    # metrics_interval_s is deprecated in favour of the variables above; we set both.
    warnings.simplefilter("ignore", DeprecationWarning)
    logging.getLogger("ray").setLevel(logging.ERROR)
    logging.getLogger("ray.serve").setLevel(logging.ERROR)
    tmp = f"/tmp/ebbray{os.getpid()}"
    ray.init(num_cpus=spec.num_cpus, include_dashboard=False, logging_level=logging.ERROR,
             log_to_driver=False, _temp_dir=tmp)
    result: dict[str, Any] = {"spec": asdict(spec)}
    try:
        sleep_s = spec.sleep_s

        @serve.deployment(max_ongoing_requests=spec.max_ongoing_requests,
                          autoscaling_config=dict(spec.autoscaling), ray_actor_options={"num_cpus": 0},
                          logging_config={"log_level": "ERROR", "enable_access_log": False})
        class Sleeper:
            async def __call__(self) -> float:
                await asyncio.sleep(sleep_s)
                return time.time()

        serve.start(logging_config={"log_level": "ERROR", "enable_access_log": False},
                    http_options={"host": "127.0.0.1", "port": 0})
        t_deploy = time.monotonic()
        handle = serve.run(Sleeper.bind(), name="ebbray", route_prefix=None,
                           logging_config={"log_level": "ERROR", "enable_access_log": False})
        result["deploy_s"] = time.monotonic() - t_deploy
        result["timeline"], result["latencies_s"] = asyncio.run(_drive(spec, handle, serve))
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
    with open(out_path, "w") as f:
        json.dump(result, f)


def _replica_counts(serve: Any) -> tuple[int, int, float]:
    """(target, running, total) of the one deployment: counts from ``serve.status()``; total = the
    controller's current ``total_num_requests`` (a private test hook, for diagnostics; NaN if absent)."""
    import ray

    app = serve.status().applications["ebbray"]
    name, dep = next(iter(app.deployments.items()))
    states = dep.replica_states
    target = sum(n for s, n in states.items() if str(getattr(s, "value", s)) != "STOPPING")
    running = sum(n for s, n in states.items() if str(getattr(s, "value", s)) == "RUNNING")
    total = float("nan")
    try:
        from ray.serve._private.common import DeploymentID
        from ray.serve.context import _get_global_client

        ctrl = _get_global_client()._controller
        total = float(ray.get(ctrl._get_total_num_requests_for_deployment_for_testing.remote(
            DeploymentID(name=name, app_name="ebbray")), timeout=2))
    except Exception:  # noqa: BLE001 - diagnostics only; the comparison never reads it
        pass
    return target, running, total


async def _drive(spec: RealRunSpec, handle: Any, serve: Any) -> tuple[list[list[float]], list[list[float]]]:
    import asyncio
    import time

    loop = asyncio.get_running_loop()
    t0 = time.monotonic() + 1.0
    timeline: list[list[float]] = []
    latencies: list[list[float]] = []
    end = t0 + (spec.arrivals_s[-1] if spec.arrivals_s else 0.0) + spec.tail_s

    async def poll() -> None:
        while True:
            now = time.monotonic()
            if now >= end:
                return
            target, running, total = await loop.run_in_executor(None, _replica_counts, serve)
            timeline.append([round(now - t0, 3), target, running, round(total, 3)])
            await asyncio.sleep(max(0.0, spec.poll_s - (time.monotonic() - now)))

    async def one(at: float) -> None:
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
        sent = time.monotonic()
        await handle.remote()
        latencies.append([at, round(time.monotonic() - sent, 4)])

    await asyncio.gather(poll(), *(one(a) for a in spec.arrivals_s))
    return timeline, latencies


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: ray_serve_harness.py SPEC.json OUT.json")
    _main(sys.argv[1], sys.argv[2])


# ---- the emulated side and the comparison (importable; the real side runs as a script) ----------

Timeline = list[tuple[float, int]]
"""(t_s, replicas) change points of a step function, first point at t = 0 (or the first poll)."""


def emulate(spec: RealRunSpec, cold_start_s: float, **knobs: float | int) -> Timeline:
    """Replay ``spec.arrivals_s`` through :mod:`ebb.sim.peers.ray_serve` in the request engine, each
    request taking ``sleep_s`` whatever the batch; ``knobs`` override the autoscaling config (e.g.
    ``upscale_delay_s=0`` for an ablation). Returns the target replica timeline."""
    import numpy as np

    from ebb.model.latency import LatencyModel
    from ebb.model.trace import RequestTrace
    from ebb.sim.peers.ray_serve import RayAutoscalingConfig, RayServePolicy
    from ebb.sim.request_engine import simulate_requests
    from ebb.sim.settings import ClusterSettings, SimSettings

    cfg = RayAutoscalingConfig(**{**spec.autoscaling, **knobs})  # type: ignore[arg-type]
    initial = cfg.initial_replicas if cfg.initial_replicas is not None else cfg.min_replicas
    n = len(spec.arrivals_s)
    trace = RequestTrace("ray-harness", np.asarray(spec.arrivals_s, dtype=np.float64),  # type: ignore[arg-type]
                         np.ones(n, dtype=np.int64), np.full(n, 2, dtype=np.int64))
    # One prefill of ~0 ms then one decode step of sleep_s: service time = sleep_s at any batch.
    lat = LatencyModel(prefill_floor_ms=1e-6, prefill_ms_per_token=0.0, decode_base_ms=spec.sleep_s * 1000.0,
                       decode_ms_per_seq=0.0, max_batch=spec.max_ongoing_requests)
    settings = SimSettings(cluster=ClusterSettings(cold_start_s=cold_start_s, latency=lat, initial_replicas=initial))
    _, log = simulate_requests(trace, RayServePolicy("ray", cfg, initial), settings)
    timeline: Timeline = [(0.0, initial)]
    for t, _, to in log.decisions:
        timeline.append((float(t), int(to)))
    return timeline


def real_timeline(rows: list[list[float]]) -> Timeline:
    """The polled target as change points (the first poll's value also stands for t = 0)."""
    out: Timeline = []
    for t, target, *_ in rows:
        if not out or int(target) != out[-1][1]:
            out.append((max(0.0, float(t)) if out else 0.0, int(target)))
    return out


def start_lags(rows: list[list[float]]) -> list[float]:
    """Seconds from each target increase to the running count reaching it (real replica starts)."""
    lags: list[float] = []
    pending: list[float] = []  # request times of replicas not yet running, oldest first
    prev_target = prev_running = None
    for t, target, running, *_ in rows:
        if prev_target is not None and target > prev_target:
            pending.extend([t] * int(target - prev_target))
        if prev_running is not None and running > prev_running:
            for _ in range(int(running - prev_running)):
                if pending:
                    lags.append(t - pending.pop(0))
        if prev_target is not None and target < prev_target:
            pending = pending[: max(0, len(pending) - int(prev_target - target))]
        prev_target, prev_running = target, running
    return lags


@dataclass(frozen=True)
class TimelineSummary:
    """What the comparison looks at, over ``[0, end_s]``."""

    first_up_s: float | None
    """First increase of the target."""
    settle_s: float | None
    """Last change of the target: when it reached its final count for good."""
    peak: int
    final: int
    mean: float
    """Time-weighted mean target (replicas)."""
    changes: int


def summarize(tl: Timeline, end_s: float) -> TimelineSummary:
    pts = [(t, n) for t, n in tl if t <= end_s]
    up = next((t for (t, n), (_, m) in zip(pts[1:], pts) if n > m), None)
    settle = pts[-1][0] if len(pts) > 1 else None
    area = sum(n * (min(t2, end_s) - t) for (t, n), (t2, _) in zip(pts, [*pts[1:], (end_s, 0)]))
    return TimelineSummary(up, settle, max(n for _, n in pts), pts[-1][1], area / end_s, len(pts) - 1)


SPEC = RealRunSpec(
    arrivals_s=arrivals_for(((8, 2, 2), (12, 2, 10), (10, 10, 10), (4, 20, 20), (20, 1, 1))),
    sleep_s=0.5, max_ongoing_requests=4,
    autoscaling={"target_ongoing_requests": 2, "min_replicas": 1, "max_replicas": 5, "initial_replicas": 1,
                 "upscale_delay_s": 3.0, "downscale_delay_s": 6.0, "look_back_period_s": 6.0,
                 "metrics_interval_s": 0.5})
"""The recorded pattern: 8 s at 2/s (1 ongoing: one replica), a 12 s ramp to 10/s, 10 s at 10/s,
a 4 s burst at 20/s, 20 s at 1/s; Ray's delays shortened (3 s up, 6 s down, 6 s look-back,
0.5 s pushes) so one run takes about 80 s of wall time."""

WARM_S = 8.0
"""Arrivals before this see an idle replica: their latency is the service time (sleep + Ray)."""

TOLERANCES = {"first_up_s": 2.0, "settle_s": 3.0, "peak": 1, "final": 0, "mean_rel": 0.2, "changes": 2}
"""Allowed |real − emulated| per summary field (``mean_rel``: relative to the real mean)."""


def violations(real: TimelineSummary, emu: TimelineSummary) -> list[str]:
    """Which tolerances the emulated summary breaks (empty = it tracks the real one)."""
    out: list[str] = []
    for name in ("first_up_s", "settle_s"):
        a, b = getattr(real, name), getattr(emu, name)
        if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > TOLERANCES[name]):
            out.append(f"{name}: real {a}, emulated {b} (±{TOLERANCES[name]})")
    for name in ("peak", "final", "changes"):
        a, b = getattr(real, name), getattr(emu, name)
        if abs(a - b) > TOLERANCES[name]:
            out.append(f"{name}: real {a}, emulated {b} (±{TOLERANCES[name]})")
    if abs(real.mean - emu.mean) > TOLERANCES["mean_rel"] * real.mean:
        out.append(f"mean: real {real.mean:.3f}, emulated {emu.mean:.3f} (±{TOLERANCES['mean_rel']:.0%})")
    return out


def compare_run(result: dict[str, Any], **knobs: float | int) -> dict[str, Any]:
    """Replay a real run's spec through the emulation (``knobs`` override its config) and compare."""
    import statistics

    raw = result["spec"]
    spec = RealRunSpec(**{**raw, "arrivals_s": tuple(raw["arrivals_s"])})
    rows = result["timeline"]
    lags = start_lags(rows)
    warm = [lat for at, lat in result["latencies_s"] if at < WARM_S]
    service_s = statistics.median(warm) if warm else spec.sleep_s
    cold_s = statistics.mean(lags) if lags else 0.0
    emu_spec = RealRunSpec(**{**asdict(spec), "arrivals_s": spec.arrivals_s, "sleep_s": service_s})
    end_s = spec.arrivals_s[-1] + spec.tail_s - 1.0  # the last polls, before the poller stops
    real_tl, emu_tl = real_timeline(rows), emulate(emu_spec, cold_s, **knobs)
    real_sum, emu_sum = summarize(real_tl, end_s), summarize(emu_tl, end_s)
    return {"knobs": knobs, "service_s": service_s, "lags_s": lags, "cold_start_s": cold_s, "end_s": end_s,
            "real": real_tl, "emulated": emu_tl, "real_summary": asdict(real_sum), "emulated_summary": asdict(emu_sum),
            "violations": violations(real_sum, emu_sum)}


def describe(report: dict[str, Any]) -> str:
    """A readable account of one comparison (printed by the test, quoted in failures)."""
    def tl(points: Timeline) -> str:
        return " ".join(f"{t:.1f}s→{n}" for t, n in points)

    return "\n".join([
        f"knobs {report['knobs'] or 'as configured'}; service {report['service_s']:.3f} s; replica starts "
        f"{[round(x, 2) for x in report['lags_s']]} s (mean {report['cold_start_s']:.2f} s used as cold start)",
        f"real     {tl(report['real'])}",
        f"emulated {tl(report['emulated'])}",
        f"real     {report['real_summary']}",
        f"emulated {report['emulated_summary']}",
        f"violations: {report['violations'] or 'none'}"])
