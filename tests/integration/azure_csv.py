"""A synthetic trace in the Azure LLM inference CSV format, for the live tests that replay one."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import numpy as np


def write_azure_trace(path: Path, points: tuple[tuple[float, float], ...], seed: int = 0) -> float:
    """Poisson arrivals at the piecewise-linear rate through ``points`` (thinning), 500-1500 prompt and
    50-150 output tokens, written as an Azure LLM inference CSV; the trace's length (s)."""
    rng = np.random.default_rng(seed)
    at, rate = np.array([p[0] for p in points], dtype=float), np.array([p[1] for p in points], dtype=float)
    top, end = float(rate.max()), float(at[-1])
    cand = np.sort(rng.uniform(0.0, end, rng.poisson(top * end)))
    arrivals = cand[rng.uniform(0.0, top, len(cand)) < np.interp(cand, at, rate)]
    tokens_in, tokens_out = rng.integers(500, 1500, len(arrivals)), rng.integers(50, 150, len(arrivals))
    t0 = datetime(2023, 11, 16, 18, 0, 0)
    stamps = [(t0 + timedelta(seconds=float(s))).strftime("%Y-%m-%d %H:%M:%S.%f") + "0" for s in arrivals]
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"{s},{i},{o}\n" for s, i, o in zip(stamps, tokens_in, tokens_out)))
    return end
