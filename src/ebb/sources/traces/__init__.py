"""Trace loading for ``ebb simulate``: request logs and count series from files or the bundled slices.

Public API::

    load_trace(path, fmt="auto", *, time_col=None, count_col=None, tokens_in_col=None,
               tokens_out_col=None, bin_s=None, service_col=None, no_header=False,
               clients=None, seed=0) -> RequestTrace | CountSeries
    detect_format(path) -> "azure" | "mooncake" | "servegen" | "counts"
    bundled_trace(name="azure-code") -> RequestTrace
    BUNDLED_TRACES  # names accepted by bundled_trace
    FORMATS         # names accepted by load_trace(fmt=...)

Formats: ``azure`` (Azure LLM inference 2023 CSV), ``mooncake`` (Mooncake FAST'25 JSONL),
``counts`` (integers per bin, optional ``# start=`` / ``# bin_s=`` header), ``csv`` (any CSV with
the column flags: names or 0-based indexes, ``no_header`` for header-less files, an optional
service-time column), ``servegen`` (a ServeGen model folder of per-client rate windows, or one
``chunk-*-trace.csv`` file, turned into arrivals per second as ServeGen's generator does, with
``seed``; detected for a folder and for a file whose first row is a window row), ``history`` (a
request log rebuilt from Prometheus and saved by ``ebb simulate --from-prometheus --save-trace``,
with its provenance and as-run record: :mod:`~ebb.sources.traces.history_file`).
See each reader module for the exact rules.

Guarantees:

* Gzip files are read transparently (detected by content, so the ``.gz`` suffix is optional).
* Results satisfy :mod:`ebb.model.trace`'s invariants: read-only numpy columns, ``arrival_s``
  sorted and >= 0, non-negative integer tokens/counts.
* Errors never echo a file that was not recognised as a trace: format detection that fails says
  the file's name, the formats expected and the first line's shape (length, fields, control
  characters), not its text, since a path may name any file. A reader for a recognised or asked-for
  format may quote one offending cell or header name, ``repr``-escaped and cut to 40 characters
  (``_common._show``), which is the convention for trace files. Only regular files (and ServeGen
  folders) are read: a device (``/dev/zero``), FIFO or socket is an :class:`~ebb.errors.InputError`
  before it is opened, so no read is unbounded.
* Malformed input raises :class:`~ebb.errors.TraceFormatError` whose message names the file,
  the 1-based line (when one is to blame) and the fix — hostile input included: JSON nested past
  64 levels, integers past int64 (tokens past 10**7, the plausible bound), NUL bytes and random bytes end in that
  one error, never a ``RecursionError`` or ``OverflowError``. Unreadable/missing files raise
  :class:`~ebb.errors.InputError`; unknown formats or bundled names raise
  :class:`~ebb.errors.ConfigError`.
* Unsorted input is stable-sorted; the result's ``notes`` say so and the ``ebb.sources.traces``
  logger warns (``warnings`` is not used, because callers run with warnings as errors).
* Loading has no randomness: the same file always yields the same arrays (ServeGen: a generator
  seeded with ``seed``, default 0, so the same files and seed always yield the same counts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from ebb.errors import ConfigError, TraceFormatError
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sources.traces import azure, counts, generic_csv, history_file, mooncake, servegen
from ebb.sources.traces._common import open_binary
from ebb.sources.traces.generic_csv import check_columns
from ebb.untrusted import UntrustedInput

__all__ = ["BUNDLED_TRACES", "FORMATS", "bundled_trace", "check_columns", "detect_format", "load_trace", "open_trace"]

FORMATS: tuple[str, ...] = ("auto", "azure", "mooncake", "counts", "csv", "servegen", "history")

_BUNDLED_FILES: dict[str, str] = {
    "azure-code": "azure_code_2023_slice.csv.gz",
    "azure-conv": "azure_conv_2023_slice.csv.gz",
}
BUNDLED_TRACES: tuple[str, ...] = tuple(_BUNDLED_FILES)
"""Bundled slices (first 30 minutes) of the Azure LLM inference 2023 traces; see ``ebb/data/ATTRIBUTION.md``."""

_SNIFF_BYTES = 64 * 1024
_AUTO_FIX = ("name the format and columns, e.g. --format csv --time-col TIME "
             "--tokens-in-col IN --tokens-out-col OUT (or --count-col COUNT)")


def detect_format(path: str | Path) -> str:
    """Guess the format of ``path`` from its first 64 KiB: ``azure``, ``mooncake``, ``servegen`` (the
    first row is a ServeGen window row), ``history`` (a trace saved by ``--save-trace``) or ``counts``.

    Raises :class:`TraceFormatError` when the file is empty or matches none of them (generic
    CSVs cannot be detected because their column meanings are unknown).
    """
    p = Path(path)
    with open_binary(p) as fh:
        sample = fh.read(_SNIFF_BYTES)
        truncated = bool(fh.read(1))
    text = sample.decode("utf-8", "replace").removeprefix("\ufeff")
    lines = text.splitlines()
    if truncated and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut mid-value
    first_idx = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first_idx is None:
        raise TraceFormatError("file is empty (no data rows)", path=str(p), line=1,
                               fix="point at a non-empty trace file")
    first = lines[first_idx].strip()
    if history_file.is_history_first_line(first):
        return "history"
    if tuple(cell.strip() for cell in first.split(",")) == azure.HEADER:
        return "azure"
    if first.startswith("{"):
        try:
            obj = mooncake.parse_line(first)  # depth-capped: a line of 100,000 '[' is refused, not recursed
        except UntrustedInput as exc:
            raise TraceFormatError(f"the first line looks like JSON but is refused: {exc}", path=str(p),
                                   line=first_idx + 1, fix=_AUTO_FIX) from exc
        except (ValueError, RecursionError):  # not JSON (or an integer over 4,300 digits): not Mooncake
            obj = None
        if isinstance(obj, dict) and all(k in obj for k in mooncake.KEYS):
            return "mooncake"
    if servegen.looks_like_servegen(first):
        return "servegen"
    if all(_is_counts_line(line) for line in lines):
        return "counts"
    # Describe the line's shape, never its text: the path may name any file (a key, /etc/shadow) and
    # this message reaches terminals, logs and reports.
    found = (f"; its first line ({len(first):,} characters, {first.count(',') + 1} comma-separated field(s)"
             f"{', with control characters' if any(ord(c) < 32 and c != chr(9) for c in first) else ''}) matches none")
    raise TraceFormatError(
        f"cannot detect the trace format (not Azure LLM CSV, Mooncake JSONL, ServeGen windows or a count "
        f"series){found}",
        path=str(p), line=first_idx + 1, fix=_AUTO_FIX)


def _is_counts_line(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#") or all(c.isdigit() or c.isspace() for c in stripped)


def load_trace(
    path: str | Path,
    fmt: str = "auto",
    *,
    time_col: str | None = None,
    count_col: str | None = None,
    tokens_in_col: str | None = None,
    tokens_out_col: str | None = None,
    bin_s: float | None = None,
    service_col: str | None = None,
    no_header: bool = False,
    clients: Sequence[int] | None = None,
    seed: int = 0,
) -> RequestTrace | CountSeries:
    """Load a trace file as a :class:`RequestTrace` or :class:`CountSeries`.

    ``fmt="auto"`` detects azure/mooncake/servegen/counts; if any column option (``service_col``
    included) is given it means ``csv``. ``bin_s`` is the bin width for ``csv`` count series
    (default 1 s) and for ``counts`` files without a ``# bin_s=`` header (a header wins, with a
    note, if they disagree). ``no_header`` applies to ``csv`` only; ``clients`` (ServeGen client
    ids) and ``seed`` to ``servegen`` only.
    """
    p = Path(path)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if bin_s is not None and not bin_s > 0:
        raise ConfigError(f"bin_s must be > 0 seconds, got {bin_s!r}")
    column_opts = any(c is not None for c in (time_col, count_col, tokens_in_col, tokens_out_col, service_col))
    if fmt == "auto":
        fmt = "csv" if column_opts else ("servegen" if servegen.is_servegen_folder(p) else detect_format(p))
    elif column_opts and fmt != "csv":
        raise ConfigError(f"column options (--time-col, --count-col, ...) only apply to --format csv, not {fmt!r}")
    if no_header and fmt != "csv":
        raise ConfigError(f"--no-header applies to --format csv with column indexes, not {fmt!r} (fix: name the "
                          "columns by 0-based index, e.g. --time-column 0 --count-column 1)")
    if clients is not None and fmt != "servegen":
        raise ConfigError(f"--servegen-client applies to ServeGen traces, not {fmt!r} (fix: drop it, or point "
                          "--trace at a ServeGen folder)")
    if fmt == "azure":
        return azure.read_azure(p)
    if fmt == "mooncake":
        return mooncake.read_mooncake(p)
    if fmt == "counts":
        return counts.read_counts(p, bin_s=bin_s)
    if fmt == "servegen":
        return servegen.load_servegen(p, clients=clients, seed=seed)
    if fmt == "history":
        return history_file.read_history_trace(p)
    return generic_csv.read_csv(p, time_col=time_col, count_col=count_col, tokens_in_col=tokens_in_col,
                                tokens_out_col=tokens_out_col, bin_s=1.0 if bin_s is None else bin_s,
                                service_col=service_col, no_header=no_header)


def open_trace(name: str, fmt: str = "auto", *, time_col: str | None = None, count_col: str | None = None,
               tokens_in_col: str | None = None, tokens_out_col: str | None = None, service_col: str | None = None,
               no_header: bool = False, clients: Sequence[int] | None = None,
               seed: int = 0) -> RequestTrace | CountSeries:
    """A bundled slice by name (``azure-code``, ``bundled:azure-conv``) unless a file of that name
    exists, else the file, read by :func:`load_trace` with these options."""
    if name.startswith("bundled:") or (name in BUNDLED_TRACES and not Path(name).exists()):
        return bundled_trace(name.removeprefix("bundled:"))
    return load_trace(name, fmt, time_col=time_col, count_col=count_col, tokens_in_col=tokens_in_col,
                      tokens_out_col=tokens_out_col, service_col=service_col, no_header=no_header,
                      clients=clients, seed=seed)


def bundled_trace(name: str = "azure-code") -> RequestTrace:
    """Load a bundled Azure LLM 2023 slice (``azure-code`` or ``azure-conv``); needs no external files."""
    try:
        filename = _BUNDLED_FILES[name]
    except KeyError:
        raise ConfigError(f"unknown bundled trace {name!r}; choose one of {', '.join(BUNDLED_TRACES)}") from None
    resource = resources.files("ebb") / "data" / filename
    # as_file gives a real path even when the package is imported from a zip archive.
    with resources.as_file(resource) as real_path:
        trace = azure.read_azure(real_path)
    return dataclasses.replace(
        trace, name=TraceName(name), source=f"bundled:{name}",
        notes=trace.notes + (f"bundled slice: first 30 minutes of AzureLLMInferenceTrace_{name.split('-')[1]}.csv",))
