"""Prometheus text exposition, parsed tolerantly where real engines are untidy and strictly where a value would mislead.

:func:`parse_exposition` reads a scrape with ``prometheus_client``'s own text parser
(:func:`prometheus_client.parser.text_string_to_metric_families`, a maintained parser) and returns
an :class:`Exposition`: every sample under its name as written in the text, in file order, with its
labels sorted. By default a fast path reads the plain lines itself — ``name{k="v",...} value
[timestamp]`` with no escapes, tabs or reserved labels, and ``# HELP name ...`` / ``# TYPE name
type`` — with one regular expression each, and hands every other line to prometheus_client alone,
so the two cannot disagree on any line (the tests compare both on every saved capture and on
fuzzed pages); it costs about a third of prometheus_client's parse (``bench/engine_scrape.py``).

Tolerated (all seen in the real captures of ``../shared/data/engine-metrics/``, see its README §3):
HELP/TYPE lines missing, or all of them first and the samples later; ``_sum`` before ``_bucket``;
``le`` anywhere among the labels; a space after the comma in a label set; scientific notation;
``_created`` series; extra labels (``engine="0"``); timestamps after the value (ignored). When the
whole text does not parse, it is parsed again line by line and each line the parser rejects (a
Markdown ``...``, curl's ``* Connection #0 …``, a label set with ``...`` inside) is dropped with
a reason ``line N: ...`` in :attr:`Exposition.dropped`, never a crash.

Strict (the sample is dropped with its reason in ``dropped`` and logged on this module's logger,
WARNING, never repaired or guessed): a NaN or ±inf value, a value past float range, and a negative
count (a counter, or a ``_bucket``/``_count``/``_total`` sample that is not a declared gauge).
Buckets that are not cumulative are refused where histograms are assembled
(:mod:`ebb.sources.engines.reading`), since that needs the whole label set.

Bounds: at most ``max_bytes`` (default :data:`MAX_EXPOSITION_BYTES`, 16 MiB, the HTTP reader's
cap) of UTF-8; a line longer than :data:`MAX_LINE_CHARS` (16 Ki characters; the longest exposition
line of any saved capture is 730) is dropped unread. The cap bounds the parser's worst case:
prometheus_client's label scan is quadratic in the escaped quotes of one label value (a 64 KiB line
of ``\"`` took 0.12 s here), so 16 KiB lines keep a hostile 16 MiB scrape to seconds, the same
order as parsing a legitimate one of that size.
:class:`~ebb.errors.InputError` naming ``source`` for bytes that are not UTF-8, an input over
the cap, or a text with no sample at all; nothing else escapes.

Counter names: ``prometheus_client`` renames the samples of a ``# TYPE x counter`` family to
``x_total``; this module undoes that, so a name looked up is always the name on the wire.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

from ebb.errors import InputError

__all__ = ["MAX_EXPOSITION_BYTES", "MAX_LINE_CHARS", "PARSERS", "Exposition", "Sample", "parse_exposition"]

MAX_EXPOSITION_BYTES: Final = 16 * 1024 * 1024
MAX_LINE_CHARS: Final = 16 * 1024

log = logging.getLogger(__name__)

_TYPE_LINE = re.compile(r"^[ \t]*#[ \t]+TYPE[ \t]+(\S+)[ \t]+(\S+)", re.MULTILINE)
_COUNT_SUFFIXES: Final = ("_bucket", "_count", "_total")


@dataclass(frozen=True)
class Sample:
    """One sample: the name as written (``vllm:time_to_first_token_seconds_bucket``), its labels as
    sorted ``(name, value)`` pairs, and a finite value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        """The value of label ``key``; None when the sample has no such label."""
        for k, v in self.labels:
            if k == key:
                return v
        return None

    def render(self) -> str:
        """``name{k="v",...}`` (for messages; values are not escaped)."""
        if not self.labels:
            return self.name
        return self.name + "{" + ",".join(f'{k}="{v}"' for k, v in self.labels) + "}"


@dataclass(frozen=True)
class Exposition:
    """What one scrape holds: samples by name (file order), declared types, and why anything was dropped."""

    samples: Mapping[str, tuple[Sample, ...]]
    """Sample name -> its samples, in file order (finite values only)."""
    types: Mapping[str, str]
    """Family name as written in ``# TYPE`` -> ``counter``, ``gauge``, ``histogram``, ``summary``, ``untyped``..."""
    dropped: tuple[str, ...] = ()
    """One reason per dropped line or sample (``line 12: ...`` / ``NAME{..}: ...``); never silent."""
    source: str = field(default="", compare=False)
    """Where the text came from (a URL or a file), for messages."""

    def series(self, name: str) -> tuple[Sample, ...]:
        """The samples named ``name``; ``()`` when there are none."""
        return self.samples.get(name, ())

    @property
    def n_samples(self) -> int:
        """How many samples were kept."""
        return sum(len(v) for v in self.samples.values())


def _decode(text: str | bytes, source: str, max_bytes: int) -> str:
    if isinstance(text, (bytes, bytearray, memoryview)):
        raw = bytes(text)
        if len(raw) > max_bytes:
            raise InputError(f"exposition of {len(raw):,} bytes is over the {max_bytes:,}-byte limit", path=source,
                             fix="point Ebb at one engine's /metrics, not a federation or an aggregate")
        try:
            out = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"exposition is not UTF-8 text (byte {exc.start}: {exc.reason})", path=source,
                             fix="check that the URL serves Prometheus text format") from None
    elif isinstance(text, str):
        out = text
        if len(out) > max_bytes or (len(out) * 4 > max_bytes
                                     and len(out.encode("utf-8", "surrogatepass")) > max_bytes):
            raise InputError(f"exposition is over the {max_bytes:,}-byte limit", path=source,
                             fix="point Ebb at one engine's /metrics, not a federation or an aggregate")
    else:
        raise TypeError(f"exposition must be str or bytes, got {type(text).__name__}")
    return out[1:] if out.startswith("\ufeff") else out


def _short(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _flatten(families: Iterable[object], types: Mapping[str, str]) -> list[tuple[str, dict[str, str], object]]:
    """(name as on the wire, labels, raw value) of every sample of prometheus_client's families."""
    out: list[tuple[str, dict[str, str], object]] = []
    for fam in families:
        fname: str = fam.name  # type: ignore[attr-defined]
        renamed = fam.type == "counter" and types.get(fname) == "counter"  # type: ignore[attr-defined]
        for s in fam.samples:  # type: ignore[attr-defined]
            name = s.name
            if renamed and name == fname + "_total":
                name = fname  # prometheus_client appended _total to `# TYPE x counter` samples
            out.append((name, s.labels, s.value))
    return out


def _is_count(name: str, types: Mapping[str, str]) -> bool:
    declared = types.get(name)
    if declared == "counter":
        return True
    if declared == "gauge":
        return False
    return name.endswith(_COUNT_SUFFIXES)


_NAME_RE = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_PAIR_RE = r'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
# The lines the fast path reads itself; every other line goes to prometheus_client alone (see parse_exposition).
_FAST_SAMPLE = re.compile(rf'({_NAME_RE})(?:\{{((?:{_PAIR_RE}(?:,[ ]*{_PAIR_RE})*,?)?)\}}| (?=[^{{"]*$)) *([^\s_]+)(?: +([^\s_]+))?')
_FAST_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
_FAST_COMMENT = re.compile(rf"# (?:HELP {_NAME_RE}(?: .*)?|TYPE (?!_total counter$){_NAME_RE} "
                           r"(?:counter|gauge|summary|histogram|gaugehistogram|unknown|info|stateset|untyped))")
PARSERS: Final = ("fast", "prometheus_client")


_ASCII_INT = re.compile(r"[+-]?[0-9]+")


def _number(token: str) -> int | float:
    """prometheus_client's ``_parse_value`` for a token without ``_`` or spaces: int, else float (may raise).

    Same result, without the cost of a failed ``int()`` on every ``0.0``: an ASCII integer goes to
    ``int`` (past 4,300 digits ``int`` refuses and ``float`` reads it as inf, as there), every other
    token to ``float``, which reads whatever ``int`` would have (non-ASCII digits) as the same number.
    """
    if _ASCII_INT.fullmatch(token):
        try:
            return int(token)
        except ValueError:
            return float(token)
    return float(token)


def _fast_line(line: str) -> tuple[str, dict[str, str], object] | None:
    """(name, labels, value) of a sample line in the plain form, exactly as prometheus_client reads it; None
    for any other line (prometheus_client then reads it alone, so the two paths cannot disagree on it)."""
    m = _FAST_SAMPLE.fullmatch(line)
    if m is None:
        return None
    name, inner, token, stamp = m.groups()
    labels: dict[str, str] = {}
    if inner:
        for k, v in _FAST_PAIR.findall(inner):
            if k in labels:
                return None  # a duplicate label: prometheus_client's error message is the reason
            labels[k] = v
    try:
        value = _number(token)
        if stamp is not None:
            _number(stamp) / 1000
    except (ValueError, OverflowError):
        return None
    return name, labels, value


def parse_exposition(text: str | bytes, *, source: str, max_bytes: int = MAX_EXPOSITION_BYTES,
                     parser: str = "fast") -> Exposition:
    """Parse one scrape (see the module docstring for what is tolerated, refused and bounded).

    ``parser="fast"`` (the default) reads the plain sample and HELP/TYPE lines with one regular
    expression each and hands every other line to prometheus_client alone; ``"prometheus_client"``
    parses the whole text with it (line by line when the whole text fails). Both give the same
    samples, types and dropped lines (tested on every saved capture and fuzzed); the fast path
    costs about a third (bench/engine_scrape.py).
    """
    if parser not in PARSERS:
        raise ValueError(f"parser must be one of {PARSERS}, got {parser!r}")
    body = _decode(text, source, max_bytes)
    types: dict[str, str] = {m.group(1): m.group(2) for m in _TYPE_LINE.finditer(body)}
    lines = body.split("\n")
    dropped: list[str] = []
    strict: list[str] = []
    raw: list[tuple[str, dict[str, str], object]] | None = None
    if parser == "prometheus_client" and max(map(len, lines), default=0) <= MAX_LINE_CHARS:
        try:
            raw = _flatten(text_string_to_metric_families(body), types)
        except Exception:  # noqa: BLE001 - the third-party parser's failures are all "this text is not clean"
            raw = None
    if raw is None:
        fast = parser == "fast"
        raw = []
        for i, line in enumerate(lines, 1):
            stripped = line.strip()
            if not stripped:
                continue
            if len(line) > MAX_LINE_CHARS:
                dropped.append(f"line {i}: longer than {MAX_LINE_CHARS:,} characters, not read")
                continue
            if fast:
                if stripped[0] == "#":
                    if _FAST_COMMENT.fullmatch(stripped):
                        continue
                else:
                    got = _fast_line(stripped)
                    if got is not None:
                        raw.append(got)
                        continue
            try:
                fams = list(text_string_to_metric_families(stripped))
            except Exception as exc:  # noqa: BLE001 - see above: the line is rejected, with the reason
                why = f"{type(exc).__name__}: {_short(str(exc), 60)}" if str(exc) else type(exc).__name__
                dropped.append(f"line {i}: not exposition ({why}): {_short(stripped)!r}")
                continue
            # One line alone has no TYPE context, so no counter renaming happened.
            raw.extend((s.name, s.labels, s.value) for f in fams for s in f.samples)
    samples: dict[str, list[Sample]] = {}
    for name, labels, value in raw:
        pairs = tuple(sorted(labels.items()))
        try:
            v = float(value)  # type: ignore[arg-type]
            shown = "NaN" if v != v else repr(v)
        except (OverflowError, TypeError, ValueError):
            v, shown = math.nan, "past float range"
        if not math.isfinite(v):
            strict.append(f"{Sample(name, pairs, 0.0).render()}: value {shown} dropped (not a finite number)")
            continue
        if v < 0 and _is_count(name, types):
            strict.append(f"{Sample(name, pairs, v).render()}: negative count {v:g} dropped")
            continue
        samples.setdefault(name, []).append(Sample(name, pairs, v))
    if dropped:
        log.debug("%s: %d non-exposition line(s) dropped, first: %s", source, len(dropped), dropped[0])
    if strict:
        log.warning("%s: %d sample(s) dropped as misleading, first: %s", source, len(strict), strict[0])
    if not samples:
        first = (dropped + strict)[:1]
        raise InputError("no Prometheus exposition sample in the text" + (f" (first problem: {first[0]})" if first else ""),
                         path=source, fix="check that the URL is the engine's metrics endpoint and metrics are on")
    return Exposition(samples={k: tuple(v) for k, v in samples.items()}, types=types,
                      dropped=tuple(dropped + strict), source=source)
