"""Dynamo SLA planner's pre-deployment profile and its interpolators, on the bundled H200 sweep.

Upstream: ``ai-dynamo/dynamo``, ``components/src/dynamo/planner/utils/perf_interpolation.py``
(commit ``0dcef4efeb3f714763bc01172abddf13285a2ca8``): ``PrefillInterpolator`` maps ISL to TTFT (ms)
and prefill throughput per GPU (tokens/s); ``DecodeInterpolator`` maps (active KV usage, context
length) to ITL (ms) and decode throughput per GPU (tokens/s) on a 100 × 100 grid
(``xi = linspace(0, 1, 100)``, ``yi = linspace(0, max context, 100)``), looks points up by rounding
to the nearest grid index, and ``find_best_throughput_per_gpu`` scans the context length's row from
the highest KV usage down for the first cell whose ITL meets the target (no binary search: the
interpolated ITL need not be monotone).

The profile is ``ebb/data/h200_profile.csv`` (see ``ebb/data/ATTRIBUTION.md``): prefill of one
request at ISL 128 / 512 / 896 and decode steps of batch 1–64 at context 128 / 512 / 896 on one H200,
KV capacity 64 slots × 1,024 positions = 65,536 tokens. Upstream's profiler records prefill the same
way (one request per ISL, throughput = ISL / TTFT).

Deviations (no SciPy here, and the sweep has 3 ISLs where ``interp1d(kind="cubic")`` needs 4):
prefill is piecewise linear in ISL (clamped to the profiled range, as upstream clamps); decode grid
cells are bilinear in (batch, context) on the regular sweep, the batch being
``kv_usage × max_kv_tokens / context`` clamped to the profiled 1–64 — upstream's
``griddata(method="cubic")`` with nearest-neighbour fill outside the hull gives the same edge values
(the nearest profiled point in (kv, context) space is the one at the same context and the largest
batch). Guarantee: every interpolated value lies within the profiled values' range.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

PROFILE_FILE = "h200_profile.csv"
MAX_KV_TOKENS = 65_536
"""KV capacity of one H200 replica in the sweep (64 slots × 1,024 positions)."""
GRID_RESOLUTION = 100
"""Upstream ``DecodeInterpolator(resolution=100)``."""


@dataclass(frozen=True)
class PrefillProfile:
    """Prefill of one request: TTFT (ms) and throughput per GPU (tokens/s) at each profiled ISL."""

    isl: FloatArray
    ttft_ms: FloatArray
    thpt_per_gpu: FloatArray

    def interpolate_ttft_ms(self, isl: float) -> float:
        """Profiled TTFT (ms) at ``isl`` tokens (clamped to the profiled ISL range)."""
        return float(np.interp(isl, self.isl, self.ttft_ms))

    def interpolate_thpt_per_gpu(self, isl: float) -> float:
        """Profiled prefill tokens/s per GPU at ``isl`` tokens (clamped to the profiled range)."""
        return float(np.interp(isl, self.isl, self.thpt_per_gpu))


@dataclass(frozen=True)
class DecodeProfile:
    """Decode ITL (ms) and throughput per GPU (tokens/s) on upstream's KV-usage × context grid.

    ``itl_grid[iy, ix]`` / ``thpt_grid[iy, ix]`` hold the values at context ``yi[iy]`` and KV usage
    ``xi[ix]``, as upstream's ``itl_interpolator`` / ``thpt_interpolator`` arrays."""

    xi: FloatArray
    yi: FloatArray
    itl_grid: FloatArray
    thpt_grid: FloatArray
    max_kv_tokens: int

    def _ix(self, kv_usage: float) -> int:
        step = self.xi[1] - self.xi[0]
        return int(np.clip(np.round((kv_usage - self.xi[0]) / step), 0, len(self.xi) - 1))

    def _iy(self, context_length: float) -> int:
        step = self.yi[1] - self.yi[0]
        return int(np.clip(np.round((context_length - self.yi[0]) / step), 0, len(self.yi) - 1))

    def interpolate_itl_ms(self, concurrency: float, context_length: float) -> float:
        """Profiled ITL (ms) with ``concurrency`` active requests of ``context_length`` tokens."""
        kv = concurrency * context_length / self.max_kv_tokens
        return float(self.itl_grid[self._iy(context_length), self._ix(kv)])

    def interpolate_thpt_per_gpu(self, concurrency: float, context_length: float) -> float:
        """Profiled decode tokens/s per GPU at that load."""
        kv = concurrency * context_length / self.max_kv_tokens
        return float(self.thpt_grid[self._iy(context_length), self._ix(kv)])

    def find_best_throughput_per_gpu(self, itl_ms: float, context_length: float) -> tuple[float, float, float]:
        """(throughput per GPU, its ITL in ms, its KV usage) at the highest KV usage whose profiled ITL
        is ≤ ``itl_ms`` on the context's row; the lowest-usage cell when none is (upstream's fallback)."""
        iy = self._iy(context_length)
        row = self.itl_grid[iy]
        for ix in range(len(self.xi) - 1, -1, -1):
            if row[ix] <= itl_ms:
                return float(self.thpt_grid[iy, ix]), float(row[ix]), float(self.xi[ix])
        return float(self.thpt_grid[iy, 0]), float(row[0]), float(self.xi[0])


def _row(batches: FloatArray, contexts: FloatArray, table: FloatArray, b: FloatArray, c: float) -> FloatArray:
    """``table[ci, bi]`` at batches ``b`` and one context ``c``: linear in batch, then in context,
    each clamped to the sweep."""
    per_ctx = np.stack([np.interp(b, batches, table[i]) for i in range(len(contexts))])
    j = int(np.clip(np.searchsorted(contexts, c) - 1, 0, max(len(contexts) - 2, 0)))
    if len(contexts) == 1:
        return np.asarray(per_ctx[0], dtype=np.float64)
    w = float(np.clip((c - contexts[j]) / (contexts[j + 1] - contexts[j]), 0.0, 1.0))
    return np.asarray((1.0 - w) * per_ctx[j] + w * per_ctx[j + 1], dtype=np.float64)


def decode_grid(batches: FloatArray, contexts: FloatArray, itl_ms: FloatArray, thpt: FloatArray,
                max_kv_tokens: int = MAX_KV_TOKENS, resolution: int = GRID_RESOLUTION) -> DecodeProfile:
    """Upstream's grid from a regular sweep: ``itl_ms[ci, bi]`` at ``contexts[ci]``, ``batches[bi]``."""
    xi = np.linspace(0.0, 1.0, resolution)
    yi = np.linspace(0.0, float(contexts.max()), resolution)
    itl_g = np.empty((resolution, resolution))
    thpt_g = np.empty((resolution, resolution))
    for iy, y in enumerate(yi):
        ctx = float(np.clip(y, contexts.min(), contexts.max()))
        batch = xi * max_kv_tokens / ctx
        itl_g[iy] = _row(batches, contexts, itl_ms, batch, ctx)
        thpt_g[iy] = _row(batches, contexts, thpt, batch, ctx)
    return DecodeProfile(xi, yi, itl_g, thpt_g, max_kv_tokens)


def parse_profile(text: str) -> tuple[PrefillProfile, DecodeProfile]:
    """Both profiles from the CSV text (``kind,batch,seq,latency_ms_median,tokens_per_s``)."""
    pre: dict[float, tuple[float, float]] = {}
    dec: dict[tuple[float, float], tuple[float, float]] = {}
    for r in csv.DictReader(io.StringIO(text)):
        b, s = float(r["batch"]), float(r["seq"])
        lat, tps = float(r["latency_ms_median"]), float(r["tokens_per_s"])
        if r["kind"] == "prefill" and b == 1:
            pre[s] = (lat, tps)
        elif r["kind"] == "decode":
            dec[(s, b)] = (lat, tps)
    isl = np.array(sorted(pre))
    prefill = PrefillProfile(isl, np.array([pre[s][0] for s in isl]), np.array([pre[s][1] for s in isl]))
    ctxs = np.array(sorted({s for s, _ in dec}))
    bats = np.array(sorted({b for _, b in dec}))
    itl = np.array([[dec[(c, b)][0] for b in bats] for c in ctxs])
    thpt = np.array([[dec[(c, b)][1] for b in bats] for c in ctxs])
    return prefill, decode_grid(bats, ctxs, itl, thpt)


@lru_cache(maxsize=1)
def h200_profile() -> tuple[PrefillProfile, DecodeProfile]:
    """The bundled H200 profile (parsed once per process)."""
    text = (resources.files("ebb") / "data" / PROFILE_FILE).read_text(encoding="utf-8")
    return parse_profile(text)
