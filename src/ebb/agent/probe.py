"""What Ebb derives from one or two scrapes of an inference server's metrics page (``ebb probe``).

:func:`probe_report` turns one or two :class:`~ebb.sources.engines.reading.EngineReading` values
into one JSON-ready dict (of the model read, ``model``, when the reading is of one): running and waiting requests, the max concurrency (the engine's metric, else the operator's
``--max-concurrency``), KV-cache usage, the slot share the agent would report (its own
:func:`~ebb.agent.engine_poll.slot_share`), the busy share over the interval (two scrapes), and per
latency histogram (TTFT, inter-token, end-to-end, queue) the observations and the P99 — over the
interval with two scrapes, since the engine started with one — as the **upper bound** of the bucket
holding it (never understated; ``p99_above_ms`` when it lies in the +Inf bucket); then which metric
each value came from, what is missing (with the profile's hint) and what the parser dropped.
Numbers are finite or None (never NaN or Infinity), so the dict is strict JSON.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ebb.agent.engine_poll import slot_share
from ebb.sources.engines.profiles import EngineProfile
from ebb.sources.engines.reading import CumulativeHistogram, EngineReading, LatencyDelta, interval

__all__ = ["PROBE_SIGNALS", "probe_report"]

PROBE_SIGNALS = ("ttft", "itl", "e2e", "queue")
"""The latency histograms a probe reports, in order."""


def _since_start(h: CumulativeHistogram) -> LatencyDelta:
    cum = np.asarray(h.cumulative, dtype=np.float64)
    counts = np.diff(cum, prepend=0.0)
    return LatencyDelta(upper_ms=np.asarray(h.upper_s, dtype=np.float64) * 1000.0, counts=counts,
                        count=float(cum[-1]) if cum.size else 0.0)


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _latency(delta: LatencyDelta, metric: str | None, window: str) -> dict[str, Any]:
    p99 = delta.quantile_ms(0.99) if delta.count > 0 else math.nan
    finite = [float(u) for u in delta.upper_ms.tolist() if math.isfinite(float(u))]
    return {"count": float(delta.count), "p99_ms": _num(p99),
            "p99_above_ms": max(finite) if math.isinf(p99) and finite else None,
            "window": window, "metric": metric}


def probe_report(profile: EngineProfile, cur: EngineReading, prev: EngineReading | None, interval_s: float,
                 *, source: str, pod: str, max_concurrency: int | None = None) -> dict[str, Any]:
    """The probe's findings as a JSON-ready dict (see the module docstring for the fields)."""
    mc_metric = cur.max_concurrency
    mc = mc_metric or max_concurrency
    out: dict[str, Any] = {
        "pod": pod, "engine": profile.name, "title": profile.title, "source": source, "model": cur.model,
        "scrapes": 1 if prev is None else 2, "interval_s": None if prev is None else interval_s,
        "running": cur.running, "waiting": cur.waiting, "max_concurrency": mc,
        "max_concurrency_from": "metric" if mc_metric else ("--max-concurrency" if mc else None),
        "kv_usage_ratio": _num(cur.kv_usage_ratio),
        "slot_ratio": slot_share(cur.running, mc, cur.kv_usage_ratio), "busy_ratio": None,
        "latency": {}, "read_from": dict(cur.read_from), "missing": list(cur.missing),
        "hint": profile.enable_hint, "notes": profile.notes, "dropped": list(cur.dropped), "resets": [],
        "no_histogram": [s for s in PROBE_SIGNALS if getattr(profile, s) is None],
    }
    if prev is not None:
        iv = interval(prev, cur, interval_s)
        out["busy_ratio"] = _num(iv.busy_ratio)
        out["resets"] = list(iv.resets)
        out["dropped"] = list(dict.fromkeys(list(prev.dropped) + list(cur.dropped)))
        for s in PROBE_SIGNALS:
            if s in iv.latency:
                out["latency"][s] = _latency(iv.latency[s], cur.read_from.get(s), "interval")
    else:
        for s in PROBE_SIGNALS:
            if s in cur.histograms:
                out["latency"][s] = _latency(_since_start(cur.histograms[s]), cur.read_from.get(s), "since start")
    return out
