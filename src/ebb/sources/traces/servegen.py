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

Per client (many services, one per client): :func:`load_servegen_clients` generates each client's
arrivals with the same window rule as :func:`load_servegen`, but from a generator of its own,
``numpy.random.default_rng([seed, client id])``, so a client's counts depend only on the folder, the
span, ``rate_scale``, ``bin_s`` and ``seed`` — never on which other clients were selected. (The sum
over clients therefore has the distribution of :func:`load_servegen`'s series, not its exact counts,
which come from one generator shared by all clients.) :func:`servegen_client_rates` reads only the
rate table, for scenarios that want the fluid rate; it samples nothing.

* ``clients`` is ``None`` (every client), a list of client ids (the ``<client>`` of the file names),
  or an int ``k``: the ``k`` clients with the highest mean rate over the span (ties: lower id first).
  Rows are always in numeric id order. An unknown id, an empty list or ``k < 1`` is an
  :class:`~ebb.errors.InputError` naming the folder.
* A client's *mean rate* is the time-weighted mean of the table's rate over the span (idle windows and
  time outside the client's windows count as 0), times ``rate_scale``: the expectation of its
  generated counts, known before any sampling (the realised mean differs by sampling noise).
* Memory: ``clients × ceil(span / bin_s)`` int32 counts — 162 clients of ``m-large`` over one day at
  1 s bins is 56 MB, 400 clients would be 138 MB; ``bin_s`` (whole seconds) aggregates. More than
  :data:`MAX_CELLS` counts, or a bin past int32, is refused with the fix, never allocated or wrapped.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ebb.errors import InputError, TraceFormatError
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries
from ebb.sources.traces._common import FloatArray, open_text

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


def looks_like_servegen(line: str) -> bool:
    """Whether one (non-blank) CSV line is a ServeGen window row: six values, the fourth ``Gamma``,
    ``Weibull`` or empty, the others numbers (format detection of a single chunk file)."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != 6 or cells[3] not in PATTERNS:
        return False
    try:
        for k in (0, 1, 2, 4, 5):
            float(cells[k])
    except ValueError:
        return False
    return True


def _client_files(path: Path, clients: Sequence[int] | None) -> list[tuple[int, Path]]:
    """The chunk files to replay: the one file ``path`` names, or the folder's (only ``clients``)."""
    if path.is_file():
        m = _CHUNK.search(path.name)
        return [(int(m.group(1)) if m else 0, path)]
    found = chunk_files(path)
    if clients is None:
        return found
    known = {cid for cid, _ in found}
    unknown = sorted(set(clients) - known)
    if unknown or not clients:
        raise InputError(f"unknown ServeGen client(s) {unknown[:5]!r}" if unknown else "no client selected",
                         path=str(path), fix=f"choose client ids from the chunk-<client>-trace.csv names, e.g. "
                                             f"{sorted(known)[:3]}")
    return [(cid, p) for cid, p in found if cid in set(clients)]


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
                  rate_scale: float = 1.0, seed: int = 0, clients: Sequence[int] | None = None) -> CountSeries:
    """Arrivals per second generated from the ServeGen windows in ``[start_s, end_s)``: of every client
    of a folder (or only ``clients``, ids from the file names), or of one ``chunk-*-trace.csv`` file.
    The selected clients' arrivals are summed; they share one generator, clients in id order."""
    path = Path(folder)
    if not (rate_scale > 0 and math.isfinite(rate_scale)) or start_s < 0 or (end_s is not None and end_s <= start_s):
        raise InputError(f"bad span or scale: start_s={start_s!r}, end_s={end_s!r}, rate_scale={rate_scale!r}",
                         path=str(path), fix="use 0 <= start_s < end_s and rate_scale > 0")
    files = _client_files(path, clients)
    clients_rows = [(cid, p, _rows(p)) for cid, p in files]
    last = max((r[-1][0] for _, _, r in clients_rows if r), default=0.0)
    end = float(end_s) if end_s is not None else last + DEFAULT_WINDOW_S
    if end <= start_s:
        raise InputError(f"the windows end at {end:g} s, before start_s={start_s:g}", path=str(path),
                         fix="use a start_s inside the trace")
    n_sec = int(math.ceil(end - start_s))
    counts = np.zeros(n_sec, dtype=np.int64)
    rng = np.random.default_rng(seed)
    for _, p, rows in clients_rows:
        _client_into(counts, rng, rows, p, start_s, end, rate_scale)
    which = "" if clients is None or path.is_file() else f", clients {sorted(set(clients))[:10]}"
    name = path.name.removesuffix("-trace.csv") if path.is_file() else path.name
    return CountSeries(TraceName(f"servegen-{name}"), counts, 1.0, source=str(path),
                       notes=(f"arrivals generated from ServeGen's per-client windows as its generator does "
                              f"(seed {seed}, rates x{rate_scale:g}{which}); token sizes are not in these files",))


def _active_spans(rows: list[tuple[float, float, str, float, float]], start_s: float, end: float,
                  ) -> list[tuple[float, float, tuple[float, float, str, float, float]]]:
    """(lo, hi, row) of each window that generates arrivals, cut to ``[start_s, end)``.

    A window lasts until the client's next one; the last one lasts :data:`DEFAULT_WINDOW_S`. Idle windows
    (no pattern) and zero rates generate nothing and are left out.
    """
    spans = []
    for k, row in enumerate(rows):
        ts, rate, pat = row[0], row[1], row[2]
        nxt = rows[k + 1][0] if k + 1 < len(rows) else ts + DEFAULT_WINDOW_S
        lo, hi = max(ts, start_s), min(nxt, end)
        if hi <= lo or not pat or rate <= 0:
            continue
        spans.append((lo, hi, row))
    return spans


def _client_into(counts: np.ndarray, rng: np.random.Generator, rows: list[tuple[float, float, str, float, float]],
                 path: Path, start_s: float, end: float, rate_scale: float) -> None:
    """Add one client's arrivals in ``[start_s, end)`` to ``counts`` (index 0 = ``start_s``), window by window."""
    for lo, hi, (_ts, rate, pat, shape, scale) in _active_spans(rows, start_s, end):
        _window(counts, rng, lo - start_s, hi - lo, rate * rate_scale, pat, shape, scale, path)


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


Int32Array = npt.NDArray[np.int32]
MAX_CELLS = 500_000_000
"""Most counts (clients × bins) :func:`load_servegen_clients` returns: 2 GB of int32. Every client of a
published folder over its whole span at 1 s is at most 196 M (``m-large``, 14 days)."""
_INT32_MAX = int(np.iinfo(np.int32).max)
_CLIENTS_FIX = "pass None (all clients), a list of client ids from the chunk-<client>-trace.csv names, or an int k >= 1"


@dataclass(frozen=True)
class ServegenClients:
    """Arrivals per bin of each selected ServeGen client: one row per client, in numeric id order.

    ``counts[i, j]`` is the number of arrivals of client ``client_ids[i]`` in ``[start_s + j × bin_s,
    start_s + (j + 1) × bin_s)`` (the last bin may be cut by ``end_s``); ``mean_rate_rps[i]`` is that
    client's table mean rate over the span (see the module). Arrays are read-only.
    """

    client_ids: tuple[int, ...]
    counts: Int32Array
    mean_rate_rps: FloatArray
    bin_s: int
    start_s: float
    end_s: float
    seed: int
    rate_scale: float
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        n = len(self.client_ids)
        if self.counts.ndim != 2 or self.counts.shape[0] != n or self.mean_rate_rps.shape != (n,):
            raise ValueError(f"ServegenClients: {n} ids, counts {self.counts.shape}, rates {self.mean_rate_rps.shape}")
        self.counts.flags.writeable = False
        self.mean_rate_rps.flags.writeable = False

    def row(self, client_id: int) -> int:
        """The row of ``client_id`` in :attr:`counts`; :class:`KeyError` when it was not selected."""
        try:
            return self.client_ids.index(client_id)
        except ValueError:
            raise KeyError(f"client {client_id!r} is not among the selected clients") from None

    def series(self, client_id: int) -> CountSeries:
        """One client's counts as a :class:`~ebb.model.trace.CountSeries` (int64, ``bin_s`` seconds per bin)."""
        return CountSeries(TraceName(f"{Path(self.source).name}-client-{client_id}"),
                           self.counts[self.row(client_id)].astype(np.int64), float(self.bin_s),
                           source=self.source, notes=self.notes)


class ServegenRates(NamedTuple):
    """The rate table of the selected clients on one grid of windows (no sampling).

    ``rates[i, k]`` is client ``client_ids[i]``'s rate (req/s, unscaled) in window ``k``, which spans
    ``[window_start_s[k], window_start_s[k + 1])``, the last one up to ``end_s``. Idle windows are 0.
    """

    client_ids: tuple[int, ...]
    window_start_s: FloatArray
    rates: FloatArray
    end_s: float


def _mean_rate(rows: list[tuple[float, float, str, float, float]], start_s: float, end: float) -> float:
    """Time-weighted mean of the client's (generating) rate over ``[start_s, end)``, unscaled."""
    return math.fsum(row[1] * (hi - lo) for lo, hi, row in _active_spans(rows, start_s, end)) / (end - start_s)


def _select(found: list[int], clients: int | Sequence[int] | None, mean: dict[int, float], path: Path) -> list[int]:
    """The selected client ids in numeric order (see the module for the rules)."""
    if clients is None:
        return sorted(found)
    if isinstance(clients, bool):
        raise InputError(f"clients={clients!r} is neither a count nor a list of ids", path=str(path), fix=_CLIENTS_FIX)
    if isinstance(clients, int):
        if clients < 1:
            raise InputError(f"clients={clients} asks for no client", path=str(path), fix=_CLIENTS_FIX)
        busiest = sorted(found, key=lambda c: (-mean[c], c))[:clients]
        return sorted(busiest)
    ids = list(clients)
    try:
        if any(isinstance(c, bool) for c in ids):
            raise TypeError("a bool is not a client id")
        wanted = {operator.index(c) for c in ids}
    except TypeError:
        raise InputError(f"client ids must be integers, got {ids[:5]!r}", path=str(path), fix=_CLIENTS_FIX) from None
    if not wanted:
        raise InputError("an empty list of clients selects nothing", path=str(path), fix=_CLIENTS_FIX)
    unknown = sorted(wanted - set(found))
    if unknown:
        shown = ", ".join(map(str, unknown[:5])) + (", ..." if len(unknown) > 5 else "")
        raise InputError(f"no chunk file for client(s) {shown}; this folder has {len(found)} clients, "
                         f"ids {min(found)} to {max(found)}", path=str(path), fix=_CLIENTS_FIX)
    return sorted(wanted)


def load_servegen_clients(folder: str | Path, *, clients: int | Sequence[int] | None = None, start_s: float = 0.0,
                          end_s: float | None = None, rate_scale: float = 1.0, seed: int = 0,
                          bin_s: int = 1) -> ServegenClients:
    """Each selected client's arrivals per ``bin_s`` seconds over ``[start_s, end_s)`` (see the module).

    ``end_s`` defaults to the folder's last window end (as :func:`load_servegen`), whichever clients are
    selected. Client ``c``'s arrivals come from ``numpy.random.default_rng([seed, c])``.
    """
    path = Path(folder)
    if not (rate_scale > 0 and math.isfinite(rate_scale)) or not (start_s >= 0 and math.isfinite(start_s)) \
            or (end_s is not None and not (math.isfinite(end_s) and end_s > start_s)):
        raise InputError(f"bad span or scale: start_s={start_s!r}, end_s={end_s!r}, rate_scale={rate_scale!r}",
                         path=str(path), fix="use 0 <= start_s < end_s and rate_scale > 0")
    if isinstance(bin_s, bool) or not isinstance(bin_s, int) or bin_s < 1:
        raise InputError(f"bin_s must be a whole number of seconds >= 1, got {bin_s!r}", path=str(path),
                         fix="pass bin_s=1 (per second) or a larger integer to aggregate")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be an integer >= 0, got {seed!r}", path=str(path), fix="pass seed=0 or another")
    table = {cid: (p, _rows(p)) for cid, p in chunk_files(path)}
    last = max((r[-1][0] for _, r in table.values() if r), default=0.0)
    end = float(end_s) if end_s is not None else last + DEFAULT_WINDOW_S
    if end <= start_s:
        raise InputError(f"start_s={start_s!r} is past the folder's last window (ends at {end:g} s)", path=str(path),
                         fix=f"use start_s < {end:g}")
    mean = {cid: _mean_rate(rows, start_s, end) for cid, (_, rows) in table.items()}
    chosen = _select(list(table), clients, mean, path)
    n_sec = int(math.ceil(end - start_s))
    n_bins = -(-n_sec // bin_s)
    if len(chosen) * n_bins > MAX_CELLS:
        raise InputError(f"{len(chosen)} clients x {n_bins:,} bins of {bin_s} s is past {MAX_CELLS:,} counts",
                         path=str(path), fix="aggregate with a larger bin_s, or select fewer clients or a shorter span")
    out = np.zeros((len(chosen), n_bins), dtype=np.int32)
    for i, cid in enumerate(chosen):
        p, rows = table[cid]
        per_s = np.zeros(n_bins * bin_s, dtype=np.int64)  # padded to whole bins; the padding stays 0
        _client_into(per_s[:n_sec], np.random.default_rng([seed, cid]), rows, p, start_s, end, rate_scale)
        binned = per_s.reshape(n_bins, bin_s).sum(axis=1) if bin_s > 1 else per_s
        if len(binned) and int(binned.max()) > _INT32_MAX:
            raise InputError(f"client {cid} has {int(binned.max()):,} arrivals in one {bin_s} s bin, past int32",
                             path=str(p), fix="lower rate_scale or bin_s")
        out[i] = binned
    rates = np.array([mean[c] * rate_scale for c in chosen], dtype=np.float64)
    return ServegenClients(
        tuple(chosen), out, rates, bin_s, float(start_s), end, seed, float(rate_scale), source=str(path),
        notes=(f"per-client arrivals generated from ServeGen's windows as its generator does, client c from "
               f"default_rng([{seed}, c]), rates x{rate_scale:g}; token sizes are not in these files",))


def servegen_client_rates(folder: str | Path, clients: int | Sequence[int] | None = None) -> ServegenRates:
    """The selected clients' rate table on the union of every client's window boundaries (no arrivals sampled).

    ``clients`` as for :func:`load_servegen_clients`; an int ``k`` ranks clients by their mean rate from 0 s
    to the folder's last window end, so it picks the same clients as that function's default span.
    """
    path = Path(folder)
    table = {cid: _rows(p) for cid, p in chunk_files(path)}
    last = max((r[-1][0] for r in table.values() if r), default=0.0)
    end = last + DEFAULT_WINDOW_S
    mean = {cid: _mean_rate(rows, 0.0, end) for cid, rows in table.items()}
    chosen = _select(list(table), clients, mean, path)
    bounds: set[float] = set()
    for rows in table.values():  # every client's, so the grid does not depend on the selection
        bounds.update(r[0] for r in rows)
        if rows:
            bounds.add(rows[-1][0] + DEFAULT_WINDOW_S)  # where the client's last window ends
    grid = np.array(sorted(b for b in bounds if b < end), dtype=np.float64)
    rates = np.zeros((len(chosen), len(grid)), dtype=np.float64)
    for i, cid in enumerate(chosen):
        rows = table[cid]
        if not rows:
            continue
        ts = np.array([r[0] for r in rows], dtype=np.float64)
        nxt = np.append(ts[1:], ts[-1] + DEFAULT_WINDOW_S)
        rate = np.array([r[1] if r[2] and r[1] > 0 else 0.0 for r in rows], dtype=np.float64)
        k = np.searchsorted(ts, grid, side="right") - 1
        inside = (k >= 0) & (grid < nxt[np.maximum(k, 0)])
        rates[i] = np.where(inside, rate[np.maximum(k, 0)], 0.0)
    grid.flags.writeable = False
    rates.flags.writeable = False
    return ServegenRates(tuple(chosen), grid, rates, end)
