"""Reader for ServeGen's per-client rate windows (Alibaba Bailian; ``alibaba/ServeGen``, Apache-2.0).

A ServeGen model folder (e.g. ``data/language/m-large``) holds one ``chunk-<client>-trace.csv`` per
client, without a header; each row is one window of that client::

    window start (s), rate (req/s), IAT CV, pattern (Gamma | Weibull | empty = idle), shape, scale

These are production statistics, not arrivals. :func:`load_servegen` turns them into arrivals the way
ServeGen's own generator does (``servegen/construct.py`` ``_sample_iats`` and ``generate_workload``,
commit f891d11): per active client-window, ``ceil(rate × window)`` inter-arrival times drawn from the
fitted distribution (Gamma(shape, scale) or Weibull(shape) × scale), rescaled so they sum to the
window, accumulated from the window start, and those past its end dropped. A window lasts until the
client's next one (``clientpool.py``); a client's last window gets the folder's usual step (600 s).
``rate_scale`` multiplies every client's rate — ServeGen's target aggregate rate spread over clients
in proportion to their rates is the same thing.

Guarantees:

* The result is a :class:`~ebb.model.trace.CountSeries` of arrivals per second over
  ``[start_s, end_s)``; the same folder, span, scale and ``seed`` always give the same counts (one
  ``numpy`` generator, clients in numeric order).
* A malformed row raises :class:`~ebb.errors.TraceFormatError` naming the file, the 1-based line and
  the fix; a folder without ``chunk-*-trace.csv`` files raises :class:`~ebb.errors.InputError`.
* Cost: O(arrivals) numpy work plus one Python step per client-window; day 1 of ``m-large`` at
  ``rate_scale=0.05`` (~850 k arrivals) loads in about 2 s.
* Token sizes are not in these files (ServeGen's ``*-dataset.json`` are separate); a simulation
  gives the series :data:`~ebb.model.trace_ops.DEFAULT_TOKENS`, as for every count series.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from ebb.errors import InputError, TraceFormatError
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries
from ebb.sources.traces._common import open_text

PATTERNS = ("Gamma", "Weibull", "")
DEFAULT_WINDOW_S = 600.0
_CHUNK = re.compile(r"chunk-(\d+)-trace\.csv$")
_FIX = "each row must be: window start (s), rate (req/s), IAT CV, Gamma|Weibull|empty, shape, scale"
MAX_ARRIVALS_PER_WINDOW = 10_000_000
"""A client-window asking for more arrivals (rate × window × scale) is refused: 10 M in one 600 s window
is 16,700 req/s from one client, past every rate in the published data (max total 3,880 req/s)."""


def chunk_files(folder: Path) -> list[tuple[int, Path]]:
    """The folder's ``chunk-<client>-trace.csv`` files by client number."""
    if not folder.is_dir():
        raise InputError("ServeGen folder not found", path=str(folder),
                         fix="point at a ServeGen model folder such as servegen/language/m-large")
    found = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := _CHUNK.search(p.name)))
    if not found:
        raise InputError("no chunk-<client>-trace.csv files in this folder", path=str(folder),
                         fix="point at a ServeGen model folder such as servegen/language/m-large")
    return found


def is_servegen_folder(path: Path) -> bool:
    """Whether ``path`` is a folder holding ServeGen ``chunk-*-trace.csv`` files."""
    return path.is_dir() and any(_CHUNK.search(p.name) for p in path.iterdir())


def _rows(path: Path) -> list[tuple[float, float, str, float, float]]:
    """(start s, rate, pattern, shape, scale) per row, validated."""
    rows: list[tuple[float, float, str, float, float]] = []
    with open_text(path) as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            cells = [c.strip() for c in line.split(",")]
            if len(cells) != 6:
                raise TraceFormatError(f"expected 6 comma-separated values, found {len(cells)}", path=str(path),
                                       line=i, fix=_FIX)
            try:
                start, rate, _cv, shape, scale = (float(cells[k]) for k in (0, 1, 2, 4, 5))
            except ValueError:
                raise TraceFormatError(f"not a number in {line.strip()[:80]!r}", path=str(path), line=i,
                                       fix=_FIX) from None
            pat = cells[3]
            if pat not in PATTERNS:
                raise TraceFormatError(f"unknown inter-arrival pattern {pat[:40]!r}", path=str(path), line=i,
                                       fix="the pattern must be Gamma, Weibull or empty (idle window)")
            if not all(math.isfinite(v) for v in (start, rate, shape, scale)) or start < 0 or rate < 0:
                raise TraceFormatError("window start and rate must be finite and >= 0", path=str(path), line=i,
                                       fix=_FIX)
            if pat and rate > 0 and not (shape > 0 and scale > 0):
                raise TraceFormatError(f"{pat} needs shape > 0 and scale > 0, got {shape!r}, {scale!r}",
                                       path=str(path), line=i, fix=_FIX)
            if rows and start <= rows[-1][0]:
                raise TraceFormatError(f"window start {start:g} s does not follow {rows[-1][0]:g} s", path=str(path),
                                       line=i, fix="windows must be in increasing time order")
            rows.append((start, rate, pat, shape, scale))
    return rows


def load_servegen(folder: str | Path, *, start_s: float = 0.0, end_s: float | None = None,
                  rate_scale: float = 1.0, seed: int = 0) -> CountSeries:
    """Arrivals per second generated from the ServeGen folder's windows in ``[start_s, end_s)``."""
    path = Path(folder)
    if not (rate_scale > 0 and math.isfinite(rate_scale)) or start_s < 0 or (end_s is not None and end_s <= start_s):
        raise InputError(f"bad span or scale: start_s={start_s!r}, end_s={end_s!r}, rate_scale={rate_scale!r}",
                         path=str(path), fix="use 0 <= start_s < end_s and rate_scale > 0")
    clients = [(cid, p, _rows(p)) for cid, p in chunk_files(path)]
    last = max((r[-1][0] for _, _, r in clients if r), default=0.0)
    end = float(end_s) if end_s is not None else last + DEFAULT_WINDOW_S
    n_sec = int(math.ceil(end - start_s))
    counts = np.zeros(n_sec, dtype=np.int64)
    rng = np.random.default_rng(seed)
    for _, p, rows in clients:
        for k, (ts, rate, pat, shape, scale) in enumerate(rows):
            nxt = rows[k + 1][0] if k + 1 < len(rows) else ts + DEFAULT_WINDOW_S
            lo, hi = max(ts, start_s), min(nxt, end)
            if hi <= lo or not pat or rate <= 0:
                continue
            _window(counts, rng, lo - start_s, hi - lo, rate * rate_scale, pat, shape, scale, p)
    return CountSeries(TraceName(f"servegen-{path.name}"), counts, 1.0, source=str(path),
                       notes=(f"arrivals generated from ServeGen's per-client windows as its generator does "
                              f"(seed {seed}, rates x{rate_scale:g}); token sizes are not in these files",))


def _window(counts: np.ndarray, rng: np.random.Generator, t0: float, width: float, rate: float, pat: str,
            shape: float, scale: float, path: Path) -> None:
    """Add one client-window's arrivals, ``t0`` seconds into the series, to ``counts``."""
    n = int(math.ceil(rate * width))
    if n > MAX_ARRIVALS_PER_WINDOW:
        raise InputError(f"a window asks for {n:,} arrivals (rate {rate:g} req/s)", path=str(path),
                         fix="lower rate_scale")
    iats = rng.gamma(shape, scale, n) if pat == "Gamma" else rng.weibull(shape, n) * scale
    total = float(iats.sum())
    if not (total > 0 and math.isfinite(total)):
        return  # a degenerate draw (all zeros): ServeGen's rescale would divide by zero; no arrivals
    t = t0 + np.cumsum(iats * (width / total))
    t = t[t < t0 + width]
    np.add.at(counts, np.minimum(t.astype(np.int64), len(counts) - 1), 1)
