"""L1 demand in replica units from a source's fine samples, and the completions that count as served.

:func:`served_demand` turns an agent's 100 ms samples (or the fluid simulator's 1 s bins) into the
fleet's served demand; :func:`completion_weights` picks, from a batch of completion rows, the ones
that count a request once. Pure: arrays in, arrays out.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ebb.model.observation import FineSignals

__all__ = ["completion_weights", "served_demand", "served_demand_one"]

FloatArray = npt.NDArray[np.float64]


def served_demand(prefill: FloatArray, slots: FloatArray, ready: int) -> FloatArray:
    """Fleet demand in replica units from the agent's samples: the prefill busy share plus the slot
    occupancy of the time prefill leaves, ``P + S × (1 − P / ready)``.

    A replica splits its time between prefill and decode, and decode of the running sequences
    stalls while others prefill (the H200 calibration's ``1 / (1 − u)`` stretch), so occupancy
    measured at today's prefill share ``u = P / ready`` understates what a smaller fleet (larger
    ``u``) would hold: the decode work is ``S × (1 − u)`` and the prefill work ``P``, and a fleet
    of ``N`` serves both when ``N ≥ P + S (1 − u)``. A saturated replica reads 1.0; the larger of
    the two alone (prefill- or slot-bound traffic) is a lower bound of it.

    One sample (the fluid engine's 1 s bins) takes a scalar path with the same float operations in
    the same order as the array path, so the same bits (signed zeros included); numpy's fixed costs
    would dominate it."""
    if len(prefill) == 1 and len(slots) == 1:
        return np.array([served_demand_one(float(prefill[0]), float(slots[0]), ready)], dtype=np.float64)
    pf = np.asarray(prefill, dtype=np.float64)
    sv = np.asarray(slots, dtype=np.float64)
    # _served_one's operations element-wise: max(a, b) is "b if b > a else a" (its signed zeros too).
    p = np.where(np.isfinite(pf) & (pf > 0.0), pf, 0.0)
    sl = np.where(np.isfinite(sv) & (sv > 0.0), sv, 0.0)
    u = np.minimum(p / max(ready, 1), 1.0)
    decode = sl * (1.0 - u)
    inner = np.where(decode > p, decode, p)
    total = p + decode
    return np.asarray(np.where(inner > total, inner, total), dtype=np.float64)


def served_demand_one(prefill: float, slots: float, ready: int) -> float:
    """:func:`served_demand` of one sample, as a float (the scalar twin it is tested equal to): ``np.where(isfinite, maximum(x, 0), 0)``, ``clip`` and
    ``maximum`` as Python's ``min``/``max`` (all operands finite and non-negative here, so numpy's
    NaN and signed-zero rules never apply and both pick the same operand)."""
    p = prefill if math.isfinite(prefill) and prefill > 0.0 else 0.0
    sl = slots if math.isfinite(slots) and slots > 0.0 else 0.0
    u = min(p / max(ready, 1), 1.0)
    decode = sl * (1.0 - u)
    return max(p + decode, max(p, decode))


def completion_weights(f: FineSignals) -> FloatArray:
    """The completions' weights, one per request: sources report TTFT and end-to-end as separate
    rows (an agent's sketches; the simulator at the first token and at the end), so the rows with a
    TTFT count — the ones with an end-to-end latency where no row has a TTFT."""
    if len(f.done_weight) != len(f.done_t_s):
        return np.zeros(0)
    ttft = np.isfinite(f.done_ttft_ms) if len(f.done_ttft_ms) == len(f.done_weight) else np.zeros(0, dtype=bool)
    if ttft.any():
        return np.asarray(f.done_weight[ttft], dtype=np.float64)
    e2e = np.isfinite(f.done_e2e_ms) if len(f.done_e2e_ms) == len(f.done_weight) else np.zeros(0, dtype=bool)
    return np.asarray(f.done_weight[e2e], dtype=np.float64)
