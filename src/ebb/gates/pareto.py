"""Pareto frontier of serving configurations (SPEC §3.5, note §4.3).

Every objective is *minimised* (e.g. GPU memory MiB, P99 latency ms, cost per token).
Point ``a`` dominates ``b`` iff ``a <= b`` in every objective and ``a < b`` in at least one;
a point is on the frontier iff no other point dominates it. Identical points never dominate
each other, so duplicates of a frontier point are all on the frontier.

* :func:`pareto_mask` — batch: boolean mask of the non-dominated rows of an ``(n, k)`` array.
  ``k == 2``: one lexicographic sort and a running minimum, O(n log n).
  ``k >= 3``: sort by the sum of the objectives (a dominator always sorts first), then take the
  sorted points block by block: the non-dominated points of a block join the frontier and
  immediately eliminate, vectorised, every later point they dominate. O(n log n + n·f·k) for a
  frontier of ``f`` points, and in practice far less because eliminated points are never
  looked at again.
* :func:`dominated_by` — for each query point, the index of a frontier point dominating it.
* :class:`FrontierMonitor` — online frontier over a sliding time window: per-insert cost is
  one vectorised comparison with the current frontier; expiry re-examines only the points
  whose recorded dominator expired.

Pure: stdlib and numpy only.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Dominated",
    "FrontierMonitor",
    "ParetoPoint",
    "dominated_by",
    "pareto_mask",
]

_BLOCK = 64  # candidates examined together in the k >= 3 elimination (64 measured fastest)
_CELLS = 1 << 21  # max (dominators x candidates) pairs compared in one numpy step
_KEY_CLIP = 1e300  # keeps the sum key finite (and NaN-free) with ±inf objectives
_PREFILTER_MIN = 2048  # below this many points the pivot pre-filter is not worth it
_PIVOT_STOP = 512  # ... but once started, pivots keep paying down to about this many survivors
_PIVOT_ROUNDS = 24

_Arr = npt.NDArray[Any]


def _as_points(points: npt.ArrayLike) -> _Arr:
    arr = np.asarray(points)
    if arr.ndim != 2:
        raise ValueError(f"points must be a 2-D (n, k) array, got shape {arr.shape}")
    if arr.shape[1] == 0 and arr.shape[0] > 0:
        raise ValueError("points need at least one objective (k >= 1)")
    if arr.dtype == np.bool_:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"objectives must be numeric, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and bool(np.isnan(arr).any()):
        raise ValueError("objectives must not be NaN")
    return arr



def _dominated_mask(dom: _Arr, cand: _Arr) -> npt.NDArray[np.bool_]:
    """For each row of ``cand``: is it dominated by some row of ``dom``? Chunked broadcasting."""
    m, c = dom.shape[0], cand.shape[0]
    out = np.zeros(c, dtype=np.bool_)
    if m == 0 or c == 0:
        return out
    k = dom.shape[1]
    step = max(1, _CELLS // m)
    for s in range(0, c, step):
        cc = cand[s:s + step]
        le = dom[:, None, 0] <= cc[None, :, 0]
        lt = dom[:, None, 0] < cc[None, :, 0]
        for j in range(1, k):
            dj, cj = dom[:, None, j], cc[None, :, j]
            le &= dj <= cj
            lt |= dj < cj
        out[s:s + step] = (le & lt).any(axis=0)
    return out


def _mask_2d(arr: _Arr) -> npt.NDArray[np.bool_]:
    n = arr.shape[0]
    x, y = arr[:, 0], arr[:, 1]
    order = np.lexsort((y, x))  # by x, then y
    xs, ys = x[order], y[order]
    # Start of each run of identical points (duplicates are adjacent after the sort).
    new = np.ones(n, dtype=np.bool_)
    new[1:] = (xs[1:] != xs[:-1]) | (ys[1:] != ys[:-1])
    run_start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    # Every point sorted before a run differs from it and has x <= its x (y <= when x ties):
    # the run is dominated iff the smallest y seen before it is <= its y.
    cummin = np.minimum.accumulate(ys)
    before = np.empty(n, dtype=np.bool_)
    has_prev = run_start > 0
    before[~has_prev] = False
    before[has_prev] = cummin[run_start[has_prev] - 1] <= ys[has_prev]
    mask = np.empty(n, dtype=np.bool_)
    mask[order] = ~before
    return mask


def _mask_kd(arr: _Arr) -> npt.NDArray[np.bool_]:
    n, k = arr.shape
    key = np.clip(arr.astype(np.float64), -_KEY_CLIP, _KEY_CLIP).sum(axis=1)
    # Primary key: the sum (floating-point sums are monotone, so a dominator's sum is <=);
    # ties broken lexicographically, so a dominator always sorts strictly first.
    order = np.lexsort(tuple(arr[:, j] for j in range(k - 1, -1, -1)) + (key,))
    pts = arr[order]
    alive = np.arange(n)
    keep: list[npt.NDArray[np.intp]] = []
    while alive.size:
        blk, rest = alive[:_BLOCK], alive[_BLOCK:]
        # Every earlier point is on the frontier or dominated by a frontier point, and the
        # frontier found so far has already removed what it dominates: only the block itself
        # can still dominate a block point.
        bp = pts[blk]
        front = blk[~_dominated_mask(bp, bp)]
        keep.append(front)
        if rest.size:
            rest = rest[~_dominated_mask(pts[front], pts[rest])]
        alive = rest
    mask = np.zeros(n, dtype=np.bool_)
    mask[order[np.concatenate(keep)]] = True
    return mask


def _sum_key(cols: list[_Arr]) -> npt.NDArray[np.float64]:
    """Sum of the objectives, each clipped to ±1e300: monotone in every objective, never NaN."""
    key = np.clip(cols[0], -_KEY_CLIP, _KEY_CLIP).astype(np.float64)
    for c in cols[1:]:
        key += np.clip(c, -_KEY_CLIP, _KEY_CLIP)
    return key


def _prefilter(arr: _Arr) -> npt.NDArray[np.intp]:
    """Indices of the rows that survive elimination by a few pivot points.

    A pivot is the survivor with the smallest objective sum not used yet; every point it
    dominates is dropped (safe: a dropped point cannot be the only dominator of anything, as
    the pivot dominates whatever it dominates). Each round only touches the survivors, and
    on typical data the first pivot alone removes most points.
    """
    n, k = arr.shape
    cols = [arr[:, j] for j in range(k)]  # strided views: no copy of the full input
    key = _sum_key(cols)
    idx = np.arange(n)
    used = np.zeros(n, dtype=np.bool_)
    for _ in range(_PIVOT_ROUNDS):
        m = idx.size
        if m < _PIVOT_STOP:
            break
        cand = np.where(used, np.inf, key)
        i = int(cand.argmin())
        if used[i]:
            break
        used[i] = True
        p = [c[i] for c in cols]
        ge = cols[0] >= p[0]
        for c, pj in zip(cols[1:], p[1:], strict=True):
            ge &= c >= pj
        # ge & (x != p): x != p is certain when the key is larger, else check exactly.
        tie = ge & (key <= key[i])
        if bool(tie.any()):
            t = np.flatnonzero(tie)
            same = np.ones(t.size, dtype=np.bool_)
            for c, pj in zip(cols, p, strict=True):
                same &= c[t] == pj
            ge[t[same]] = False
        kept = np.flatnonzero(~ge)
        removed = m - kept.size
        if removed:
            idx, key, used = idx[kept], key[kept], used[kept]
            sub = arr[idx]
            cols = [sub[:, j] for j in range(k)]
        if removed * 8 < m:  # under 1/8 removed: diminishing returns
            break
    return idx


def pareto_mask(points: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """Boolean mask of the non-dominated rows of ``points`` (shape ``(n, k)``, all minimised).

    Duplicated points are all kept (none dominates the other). ``±inf`` is allowed; NaN raises
    :class:`ValueError`.
    """
    arr = _as_points(points)
    n, k = arr.shape
    if n == 0:
        return np.zeros(0, dtype=np.bool_)
    if k == 1:
        return np.asarray(arr[:, 0] == arr[:, 0].min(), dtype=np.bool_)
    if n >= _PREFILTER_MIN:
        keep = _prefilter(arr)
        if keep.size < n:
            mask = np.zeros(n, dtype=np.bool_)
            sub = arr[keep]
            mask[keep] = _mask_2d(sub) if k == 2 else _mask_kd(sub)
            return mask
    if k == 2:
        return _mask_2d(arr)
    return _mask_kd(arr)


def dominated_by(points: npt.ArrayLike, frontier: npt.ArrayLike) -> npt.NDArray[np.intp]:
    """For each row of ``points``, the index of the first row of ``frontier`` dominating it, or -1."""
    p, f = _as_points(points), _as_points(frontier)
    out = np.full(p.shape[0], -1, dtype=np.intp)
    if f.shape[0] == 0 or p.shape[0] == 0:
        return out
    if p.shape[1] != f.shape[1]:
        raise ValueError(f"objective counts differ: {p.shape[1]} vs {f.shape[1]}")
    step = max(1, _CELLS // f.shape[0])
    for s in range(0, p.shape[0], step):
        cc = p[s:s + step]
        le = np.all(f[:, None, :] <= cc[None, :, :], axis=2)
        lt = np.any(f[:, None, :] < cc[None, :, :], axis=2)
        d = le & lt
        hit = d.any(axis=0)
        out[s:s + step] = np.where(hit, d.argmax(axis=0), -1)
    return out


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    """One measurement of one configuration: its id, timestamp and objective values."""

    config_id: Hashable
    ts_s: float
    objectives: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Dominated:
    """A dominated point and a frontier point that dominates it (costs no more, no slower)."""

    point: ParetoPoint
    by: ParetoPoint


@dataclass(slots=True)
class _Entry:
    point: ParetoPoint
    obj: npt.NDArray[np.float64]
    witness: int  # seq of a live point dominating this one; -1 when on the frontier


class FrontierMonitor:
    """Online non-dominated set of ``(config, objectives)`` points over a sliding time window.

    A point inserted at ``ts_s`` is inside the window until ``expire(now_s)`` is called with
    ``now_s - window_s >= ts_s``. Points may arrive out of order. Invariant: every live point
    is either on the frontier or has a live *witness* that dominates it; expiring a point
    re-examines only the points it witnessed.
    """

    def __init__(self, window_s: float, n_objectives: int) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        if n_objectives < 1:
            raise ValueError(f"n_objectives must be >= 1, got {n_objectives}")
        self.window_s = float(window_s)
        self.n_objectives = n_objectives
        self._seq = 0
        self._live: dict[int, _Entry] = {}
        self._front: dict[int, None] = {}  # insertion-ordered set of frontier seqs
        self._witnessed: dict[int, set[int]] = {}  # witness seq -> seqs it covers
        self._heap: list[tuple[float, int]] = []  # (ts_s, seq) for expiry
        self._front_cache: tuple[list[int], npt.NDArray[np.float64]] | None = None

    def __len__(self) -> int:
        return len(self._live)

    # -- internals -------------------------------------------------------------------------
    def _front_arrays(self) -> tuple[list[int], npt.NDArray[np.float64]]:
        if self._front_cache is None:
            seqs = list(self._front)
            objs = (np.stack([self._live[s].obj for s in seqs]) if seqs
                    else np.empty((0, self.n_objectives), dtype=np.float64))
            self._front_cache = (seqs, objs)
        return self._front_cache

    def _set_witness(self, seq: int, witness: int) -> None:
        self._live[seq].witness = witness
        self._witnessed.setdefault(witness, set()).add(seq)

    def _promote(self, seq: int) -> None:
        self._live[seq].witness = -1
        self._front[seq] = None
        self._front_cache = None

    # -- public API ------------------------------------------------------------------------
    def insert(self, config_id: Hashable, ts_s: float, objectives: Sequence[float]) -> bool:
        """Add one measurement; returns True iff it is on the frontier right after insertion."""
        obj = np.asarray(objectives, dtype=np.float64)
        if obj.shape != (self.n_objectives,):
            raise ValueError(f"expected {self.n_objectives} objectives, got shape {obj.shape}")
        if bool(np.isnan(obj).any()):
            raise ValueError("objectives must not be NaN")
        if math.isnan(ts_s):
            raise ValueError("ts_s must not be NaN")
        seq = self._seq
        self._seq += 1
        point = ParetoPoint(config_id, float(ts_s), tuple(float(v) for v in obj))
        self._live[seq] = _Entry(point, obj, -1)
        heapq.heappush(self._heap, (float(ts_s), seq))
        seqs, front = self._front_arrays()
        if seqs:
            le = np.all(front <= obj, axis=1)
            lt = np.any(front < obj, axis=1)
            dom = le & lt
            if bool(dom.any()):
                self._set_witness(seq, seqs[int(dom.argmax())])
                return False
            beaten = np.all(obj <= front, axis=1) & np.any(obj < front, axis=1)
            if bool(beaten.any()):
                for i in np.flatnonzero(beaten):
                    s = seqs[int(i)]
                    del self._front[s]
                    self._set_witness(s, seq)
        self._promote(seq)
        return True

    def expire(self, now_s: float) -> int:
        """Drop every point with ``ts_s <= now_s - window_s``; returns how many were dropped."""
        cutoff = now_s - self.window_s
        gone: list[int] = []
        while self._heap and self._heap[0][0] <= cutoff:
            _, seq = heapq.heappop(self._heap)
            gone.append(seq)
        if not gone:
            return 0
        orphans: set[int] = set()
        for seq in gone:
            e = self._live.pop(seq)
            if e.witness >= 0:
                covered = self._witnessed.get(e.witness)
                if covered is not None:
                    covered.discard(seq)
            else:
                del self._front[seq]
                self._front_cache = None
            orphans |= self._witnessed.pop(seq, set())
        orphans.intersection_update(self._live)
        if orphans:
            self._reexamine(sorted(orphans))
        return len(gone)

    def _reexamine(self, orphans: list[int]) -> None:
        """Orphans lost their witness: re-dominate them by the frontier or among themselves."""
        objs = np.stack([self._live[s].obj for s in orphans])
        seqs, front = self._front_arrays()
        w = dominated_by(objs, front)
        left = [i for i in range(len(orphans)) if w[i] < 0]
        for i in range(len(orphans)):
            if w[i] >= 0:
                self._set_witness(orphans[i], seqs[int(w[i])])
        if not left:
            return
        sub = objs[left]
        nd = pareto_mask(sub)
        new_front = [orphans[left[i]] for i in np.flatnonzero(nd)]
        for s in new_front:
            self._promote(s)
        rest = [left[i] for i in np.flatnonzero(~nd)]
        if rest:
            w2 = dominated_by(objs[rest], sub[nd])
            for i, wi in zip(rest, w2, strict=True):
                self._set_witness(orphans[i], new_front[int(wi)])

    def points(self) -> list[ParetoPoint]:
        """Every live point, in insertion order."""
        return [e.point for e in self._live.values()]

    def frontier(self) -> list[ParetoPoint]:
        """The non-dominated live points, in insertion order."""
        return [self._live[s].point for s in sorted(self._front)]

    def frontier_mask(self) -> list[bool]:
        """Aligned with :meth:`points`: True for the points on the frontier."""
        return [e.witness < 0 for e in self._live.values()]

    def dominated(self) -> list[Dominated]:
        """Every dominated live point with a frontier point that dominates it (insertion order).

        Among several dominating frontier points the earliest inserted is reported.
        """
        seqs, front = self._front_arrays()
        order = sorted(range(len(seqs)), key=lambda i: seqs[i])
        seqs = [seqs[i] for i in order]
        front = front[order] if seqs else front
        dom = [(s, e) for s, e in self._live.items() if e.witness >= 0]
        if not dom:
            return []
        w = dominated_by(np.stack([e.obj for _, e in dom]), front)
        return [Dominated(e.point, self._live[seqs[int(wi)]].point) for (_, e), wi in zip(dom, w, strict=True)]
