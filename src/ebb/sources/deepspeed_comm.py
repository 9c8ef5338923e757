"""DeepSpeed communication logs (``comms_logger`` with ``verbose: true``) -> per-op latency series.

Line format, from ``CommsLogger.append`` in DeepSpeed's ``deepspeed/utils/comms_logging.py`` as
printed through ``log_dist`` (see also ``docs/_tutorials/comms-logging.md``)::

    [2022-06-26 01:39:55,722] [INFO] [logging.py:69:log_dist] [Rank 0] rank=0 | comm op: all_reduce | time (ms): 9.46 | msg size: 678.86 MB | algbw (Gbps): 1204.52  | busbw (Gbps): 1129.23

With the logger's ``debug`` option the op name is followed by ``| [Caller Func: name]``.

Output: one sample per logged op, series ``nccl_<op without underscores>_latency_ms`` (so
``all_reduce`` -> ``nccl_allreduce_latency_ms``, the series the L1 multi-signal trigger
"NCCL AllReduce latency > 12 ms" reads). ``ops`` limits which ops are kept (default: all).

Timestamps: the logging prefix's wall time (``YYYY-MM-DD HH:MM:SS,mmm``, read as UTC, since the
log does not say its zone) when the line has one. Lines without it (logs captured without the
logging prefix) get ``base_ns + k * assumed_interval_ns`` where ``k`` counts such lines in file
order (default one op every 10 ms). A file that mixes both keeps each line's own rule. Other
lines (training output, summaries) are ignored; a line that says ``comm op:`` but does not parse,
or a negative/non-finite latency, raises :class:`~ebb.errors.InputError` with file and line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ebb.errors import InputError
from ebb.model.samples import SampleBatch

__all__ = ["parse_comm_log", "parse_comm_lines", "series_for_op"]

_STAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3})\]")
_OP = re.compile(r"comm op:\s*(?P<op>[A-Za-z0-9_]+)(?:\s*\|\s*\[Caller Func:[^\]]*\])?\s*\|"
                 r"\s*time \(ms\):\s*(?P<ms>\S+)")
DEFAULT_INTERVAL_NS = 10_000_000


def series_for_op(op: str) -> str:
    """``all_reduce`` -> ``nccl_allreduce_latency_ms``."""
    return f"nccl_{op.replace('_', '')}_latency_ms"


def parse_comm_lines(lines: Iterable[str], *, path: str = "<lines>", ops: Collection[str] | None = None,
                     base_ns: int = 0, assumed_interval_ns: int = DEFAULT_INTERVAL_NS) -> SampleBatch:
    """Parse comms-logger lines; see the module docstring for the rules."""
    names: dict[str, int] = {}
    idx: list[int] = []
    val: list[float] = []
    ts: list[int] = []
    k_unstamped = 0
    for lineno, line in enumerate(lines, start=1):
        if "comm op:" not in line:
            continue
        m = _OP.search(line)
        if m is None:
            raise InputError("a 'comm op:' line does not match the DeepSpeed comms_logger format", path=path,
                             line=lineno, fix="expect '... | comm op: NAME | time (ms): X | msg size: ...'")
        op = m.group("op")
        if ops is not None and op not in ops:
            continue
        try:
            ms = float(m.group("ms"))
        except ValueError:
            ms = math.nan
        if not math.isfinite(ms) or ms < 0:
            raise InputError(f"latency {m.group('ms')!r} ms is not a finite non-negative number",
                             path=path, line=lineno, fix="repair or drop the line")
        stamp = _STAMP.match(line)
        if stamp is not None:
            wall = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
            t = int(wall.timestamp()) * 1_000_000_000 + int(stamp.group(2)) * 1_000_000
        else:
            t = base_ns + k_unstamped * assumed_interval_ns
            k_unstamped += 1
        name = series_for_op(op)
        idx.append(names.setdefault(name, len(names)))
        val.append(ms)
        ts.append(t)
    return SampleBatch(series=tuple(names), series_idx=np.asarray(idx, dtype=np.int64),
                       value=np.asarray(val, dtype=np.float64), ts_ns=np.asarray(ts, dtype=np.int64))


def parse_comm_log(path: str | Path, *, ops: Collection[str] | None = None, base_ns: int = 0,
                   assumed_interval_ns: int = DEFAULT_INTERVAL_NS) -> SampleBatch:
    """Parse a DeepSpeed log file (any size: read line by line)."""
    p = str(path)
    try:
        with open(p, encoding="utf-8", errors="replace") as fh:
            return parse_comm_lines(fh, path=p, ops=ops, base_ns=base_ns, assumed_interval_ns=assumed_interval_ns)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=p, fix="check the path") from exc
