"""The saved history trace (``--save-trace``): a request log rebuilt from Prometheus, with its provenance and as-run record.

``ebb simulate --from-prometheus URL --save-trace FILE`` writes it; ``ebb simulate --trace FILE``
replays it without the server (format ``history``, detected by its first line) and shows the same
scorecard, the as-run row included. Gzip when the name ends in ``.gz``. Layout::

    # ebb-history v1
    # name "prometheus-vllm"
    # start_epoch_s 1709510400.0
    # provenance {"prometheus": "http://...", "engine": "vllm", "selector": "...", "start": "...", ...}
    # measured {"start_unix_s": ..., "step_s": 30.0, "bin_s": 300.0, "replicas": [[steps, value], ...], ...}
    # notes ["...", ...]
    arrival_ms,tokens_in,tokens_out[,service_s]
    12,374,44[,3.25]

``arrival_ms``: whole milliseconds from the range's start (the rebuilt trace's own resolution, so the
replay is bit-identical); ``service_s``: Python's shortest round-trip text of each float; the header
values are JSON (floats round-trip; an infinite bucket bound is the string ``"+Inf"``; the replica
curve is run-length encoded, histogram counts are ``[bin, bucket, count]`` triples of the non-zero
cells). ``measured`` is absent when the history had no replica series.

Guarantees: ``read_history_trace(write_history_trace(...))`` gives back equal arrays and an equal
record. Reading is bounded (each header line at most :data:`MAX_HEADER_BYTES`, JSON through
:func:`ebb.untrusted.loads_json`) and every malformed part is one
:class:`~ebb.errors.TraceFormatError` naming the file, the line and the fix.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final

import numpy as np

from ebb.errors import InputError, TraceFormatError
from ebb.model.ids import TraceName
from ebb.model.measured import BucketSeries, MeasuredFleet
from ebb.model.trace import RequestTrace
from ebb.sources.traces._common import int_column, open_binary, open_text
from ebb.untrusted import UntrustedInput, loads_json

__all__ = ["MAGIC", "MAX_HEADER_BYTES", "is_history_file", "is_history_first_line", "read_history_measured",
           "read_history_trace", "write_history_trace"]

MAGIC: Final = "# ebb-history v1"
MAX_HEADER_BYTES: Final = 64 * 1024 * 1024
"""Longest header line read (a month's replica curve and histograms take a few MB)."""
_KEYS = ("name", "start_epoch_s", "provenance", "measured", "notes")
_FIX = "write the file with ebb simulate --from-prometheus URL --save-trace FILE, not by hand"


def is_history_first_line(line: str) -> bool:
    """Whether a file's first line marks a saved history trace."""
    return line.strip().startswith("# ebb-history")


def is_history_file(path: Path) -> bool:
    """Whether ``path`` is a regular file (gzip or not) whose first line marks a saved history trace;
    False for anything else, unreadable files included (their reader says why)."""
    try:
        if not path.is_file():
            return False
        with open_binary(path) as fh:
            head = fh.read(64)
    except (InputError, OSError, EOFError):
        return False
    return is_history_first_line(head.decode("utf-8", "replace").split("\n", 1)[0])


def _bound(b: float) -> float | str:
    return "+Inf" if math.isinf(b) else b


def _buckets(h: BucketSeries | None) -> dict[str, Any] | None:
    if h is None:
        return None
    i, j = np.nonzero(h.counts)
    return {"bounds": [_bound(b) for b in h.bounds], "bins": h.bins,
            "counts": [[int(a), int(b), float(h.counts[a, b])] for a, b in zip(i, j, strict=True)]}


def _rle(values: np.ndarray) -> list[list[float]]:
    if len(values) == 0:
        return []
    change = np.flatnonzero(np.diff(values) != 0) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [len(values)]])
    return [[int(e - s), float(values[s])] for s, e in zip(starts, ends, strict=True)]


def _measured(m: MeasuredFleet) -> dict[str, Any]:
    return {"start_unix_s": m.start_unix_s, "step_s": m.step_s, "bin_s": m.bin_s, "replicas": _rle(m.replicas),
            "ttft_s": _buckets(m.ttft_s), "e2e_s": _buckets(m.e2e_s), "replicas_from": m.replicas_from,
            "notes": list(m.notes)}


def write_history_trace(path: Path, trace: RequestTrace, *, provenance: Mapping[str, str],
                        measured: MeasuredFleet | None) -> None:
    """Write ``trace`` (arrivals in whole ms, as :mod:`ebb.sources.history_rebuild` makes them) and its record."""
    ms = np.rint(trace.arrival_s * 1000.0).astype(np.int64)
    if not np.array_equal(ms / 1000.0, trace.arrival_s):
        raise ValueError("a history trace's arrivals are whole milliseconds")
    head = [MAGIC, f"# name {json.dumps(str(trace.name))}", f"# start_epoch_s {json.dumps(trace.start_epoch_s)}",
            f"# provenance {json.dumps(dict(provenance), sort_keys=True)}"]
    if measured is not None:
        head.append(f"# measured {json.dumps(_measured(measured), allow_nan=False)}")
    head.append(f"# notes {json.dumps(list(trace.notes))}")
    svc = trace.service_s
    head.append("arrival_ms,tokens_in,tokens_out" + (",service_s" if svc is not None else ""))
    cols: list[Sequence[Any]] = [ms.tolist(), trace.tokens_in.tolist(), trace.tokens_out.tolist()]
    if svc is not None:
        cols.append([repr(float(v)) for v in svc])
    body = "\n".join(",".join(map(str, row)) for row in zip(*cols, strict=True))
    text = "\n".join(head) + "\n" + body + ("\n" if body else "")
    data = text.encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)


def _json(text: str, what: str, path: Path, line: int) -> Any:
    try:
        return loads_json(text, max_bytes=MAX_HEADER_BYTES)
    except (UntrustedInput, ValueError) as exc:
        raise TraceFormatError(f"the {what} header is not JSON: {str(exc)[:120]}", path=str(path), line=line,
                               fix=_FIX) from exc


def _header(fh: IO[str], path: Path) -> tuple[dict[str, Any], int]:
    """The header's values by key, and the line number of the column header (1-based)."""
    first = fh.readline(len(MAGIC) + 2)
    if first.rstrip("\r\n") != MAGIC:
        raise TraceFormatError(f"the first line is not {MAGIC!r}", path=str(path), line=1, fix=_FIX)
    values: dict[str, Any] = {}
    line = 1
    while True:
        text = fh.readline(MAX_HEADER_BYTES + 1)
        line += 1
        if len(text) > MAX_HEADER_BYTES:
            raise TraceFormatError(f"header line longer than {MAX_HEADER_BYTES:,} bytes", path=str(path), line=line,
                                   fix=_FIX)
        if not text.startswith("# "):
            if not text.startswith("arrival_ms,tokens_in,tokens_out"):
                raise TraceFormatError("expected the column header arrival_ms,tokens_in,tokens_out[,service_s]",
                                       path=str(path), line=line, fix=_FIX)
            values["columns"] = text.strip().split(",")
            return values, line
        key, _, rest = text[2:].rstrip("\r\n").partition(" ")
        if key not in _KEYS:
            raise TraceFormatError(f"unknown header {key[:40]!r} (known: {', '.join(_KEYS)})", path=str(path),
                                   line=line, fix=_FIX)
        values[key] = _json(rest, key, path, line)


def _bucket_series(doc: Any, bins: int, what: str) -> BucketSeries | None:
    if doc is None:
        return None
    bounds = tuple(math.inf if b == "+Inf" else float(b) for b in doc["bounds"])
    if int(doc["bins"]) != bins:
        raise ValueError(f"{what} has {doc['bins']} bins, the range {bins}")
    counts = np.zeros((bins, len(bounds)))
    cells = np.asarray(doc["counts"], dtype=np.float64).reshape(-1, 3)
    if len(cells):
        i, j = cells[:, 0].astype(np.int64), cells[:, 1].astype(np.int64)
        if i.min() < 0 or i.max() >= bins or j.min() < 0 or j.max() >= len(bounds):
            raise ValueError(f"{what} has a cell outside its {bins} bins x {len(bounds)} buckets")
        counts[i, j] = cells[:, 2]
    return BucketSeries(bounds, counts)


def _measured_of(doc: Any) -> MeasuredFleet:
    runs = np.asarray(doc["replicas"], dtype=np.float64).reshape(-1, 2)
    lengths = runs[:, 0]
    if len(runs) == 0 or not (np.all(lengths >= 1) and np.all(lengths == np.floor(lengths))) or lengths.sum() > 10**7:
        raise ValueError("replicas must be [steps >= 1, value] runs of at most 10,000,000 steps in all")
    replicas = np.repeat(runs[:, 1], lengths.astype(np.int64))
    step_s, bin_s = float(doc["step_s"]), float(doc["bin_s"])
    k = max(1, int(round(bin_s / step_s))) if step_s > 0 else 1
    bins = -(-len(replicas) // k)
    return MeasuredFleet(start_unix_s=float(doc["start_unix_s"]), step_s=step_s, replicas=replicas, bin_s=bin_s,
                         ttft_s=_bucket_series(doc.get("ttft_s"), bins, "ttft_s"),
                         e2e_s=_bucket_series(doc.get("e2e_s"), bins, "e2e_s"),
                         replicas_from=str(doc.get("replicas_from", "")),
                         notes=tuple(str(n) for n in doc.get("notes", [])))


def read_history_measured(path: Path) -> MeasuredFleet | None:
    """Only the as-run record of a saved history trace (None when it has none); reads the header only."""
    with open_text(path) as fh:
        values, line = _header(fh, path)
    if "measured" not in values:
        return None
    try:
        return _measured_of(values["measured"])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise TraceFormatError(f"the measured header is not an as-run record: {type(exc).__name__}: "
                               f"{str(exc)[:120]}", path=str(path), fix=_FIX) from exc


def read_history_trace(path: Path) -> RequestTrace:
    """The saved trace's requests (module docstring for the layout)."""
    with open_text(path) as fh:
        values, header_line = _header(fh, path)
        columns = values["columns"]
        if columns not in (["arrival_ms", "tokens_in", "tokens_out"],
                           ["arrival_ms", "tokens_in", "tokens_out", "service_s"]):
            raise TraceFormatError(f"unexpected columns {','.join(columns)[:80]!r}", path=str(path),
                                   line=header_line, fix=_FIX)
        rows = [r for r in csv.reader(fh) if r]
    if not rows:
        raise TraceFormatError("no request rows", path=str(path), line=header_line + 1, fix=_FIX)
    if any(len(r) != len(columns) for r in rows):
        bad = next(i for i, r in enumerate(rows) if len(r) != len(columns))
        raise TraceFormatError(f"row has {len(rows[bad])} fields, not {len(columns)}", path=str(path),
                               line=header_line + 1 + bad, fix=_FIX)
    lines = list(range(header_line + 1, header_line + 1 + len(rows)))
    cols = list(zip(*rows, strict=True))
    ms = int_column(cols[0], what="arrival_ms", path=path, lines=lines, fix=_FIX, hi=2**53)
    if len(ms) > 1 and bool(np.any(np.diff(ms) < 0)):
        raise TraceFormatError("arrival_ms is not sorted", path=str(path), fix=_FIX)
    tin = int_column(cols[1], what="tokens_in", path=path, lines=lines, fix=_FIX)
    tout = int_column(cols[2], what="tokens_out", path=path, lines=lines, fix=_FIX)
    svc = None
    if len(cols) == 4:
        try:
            svc = np.asarray(cols[3], dtype=np.str_).astype(np.float64)
        except ValueError as exc:
            raise TraceFormatError(f"service_s is not a number: {exc}", path=str(path), fix=_FIX) from exc
        if not bool(np.all(np.isfinite(svc) & (svc >= 0))):
            raise TraceFormatError("service_s holds a negative or non-finite value", path=str(path), fix=_FIX)
    start = values.get("start_epoch_s")
    notes = values.get("notes", [])
    try:
        return RequestTrace(name=TraceName(str(values.get("name", path.stem))), arrival_s=ms / 1000.0,
                            tokens_in=tin, tokens_out=tout, source=str(path),
                            start_epoch_s=None if start is None else float(start),
                            notes=tuple(str(n) for n in notes) if isinstance(notes, list) else (),
                            service_s=svc)
    except (TypeError, ValueError) as exc:
        raise InputError(f"not a usable history trace: {exc}", path=str(path), fix=_FIX) from exc

