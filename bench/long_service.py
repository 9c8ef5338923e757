"""A long-service trace: 23 days of a diffusion-like service (seeded), as a request log.

No public trace of a diffusion (or other long-service) GPU service is in ``../shared`` (its README
lists what is), so this one is generated to the shape of issue #35's: about 27,000 requests over 23
days, up to ~2,200 on a busy day; traffic from 07:00 to midnight (a half-sine, sharpened) with quiet
nights, weekends at 60 % and each day's volume varying ±35 % (lognormal); Poisson within each hour;
each request served 5–600 s (log-uniform; the long-service case of ``tests/unit/sim/test_compare.py``).
Most of its span has nothing arriving and a handful of requests in flight: the case where a
simulator's cost should follow the requests, not the seconds.

    python bench/long_service.py OUT.csv [--days 23] [--seed 35]

writes ``ts,exec_time_seconds`` rows, for ``ebb simulate --trace OUT.csv --time-col ts
--service-time-column exec_time_seconds --slo-ttft-ms 30000 --slo-e2e-ms 630000``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ebb.model.ids import TraceName
from ebb.model.trace import RequestTrace

PEAK_PER_HOUR = 132.0
"""Requests in the busiest hour of an average weekday (about 1,600 a weekday)."""


def long_service_trace(days: float = 23.0, seed: int = 35) -> RequestTrace:
    """The trace of the module docstring over ``days`` days: the first ``days × 24`` hours of the
    23-day trace (of a longer one past 23 days)."""
    rng = np.random.default_rng(seed)
    n_days = max(23, int(np.ceil(days)))  # drawn whole, then cut: fewer days are the same first days
    day_scale = np.exp(rng.normal(0.0, 0.35, n_days)) * np.where(np.arange(n_days) % 7 >= 5, 0.6, 1.0)
    hours = np.arange(n_days * 24)
    shape = np.clip(np.sin((hours % 24 - 7) / 17 * np.pi), 0.0, None) ** 1.5  # 07:00 to midnight
    per_hour = rng.poisson(PEAK_PER_HOUR * shape * day_scale[hours // 24])
    t = np.sort(np.concatenate([h * 3600.0 + rng.uniform(0.0, 3600.0, k) for h, k in zip(hours, per_hour)]))
    service = np.exp(rng.uniform(np.log(5.0), np.log(600.0), len(t)))
    keep = t < days * 86400.0
    t, service = t[keep], service[keep]
    one = np.ones(len(t), dtype=np.int64)
    return RequestTrace(TraceName("long-service"), t, one, one, service_s=service)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--days", type=float, default=23.0)
    ap.add_argument("--seed", type=int, default=35)
    args = ap.parse_args()
    trace = long_service_trace(args.days, args.seed)
    assert trace.service_s is not None
    rows = "".join(f"{a:.3f},{s:.3f}\n" for a, s in zip(trace.arrival_s.tolist(), trace.service_s.tolist()))
    args.out.write_text("ts,exec_time_seconds\n" + rows)
    per_day = np.bincount((trace.arrival_s // 86400).astype(np.int64))
    print(f"{trace.requests:,} requests over {trace.duration_s / 86400:.1f} days "
          f"({per_day.min():,}–{per_day.max():,} a day) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
