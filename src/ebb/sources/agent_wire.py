"""The agent's ``/v1/buckets`` wire format (:data:`~ebb.model.live.BUCKETS_VERSION`): records, codec.

A page is ``{"version": 1, "agent": NAME, "bucket_ms": 100, "newest_ns": N|null, "now_ns": T, "buckets": [...]}``
(``now_ns``, the agent's wall clock as it wrote the page, is optional: the controller measures the
agent's clock offset with it, and a page without it is read as before);
each bucket is ``{"ts_ns", "workers": {name: {...}}, "routers": {name: {...}}, "latency_from",
"latency_names", "ttft_ms": SKETCH, "e2e_ms": SKETCH, "missing": [url, ...], "gpu": {series: v},
"host": {series: v}}`` (see :class:`Bucket` for every field). A latency sketch travels as
``{"alpha": 0.01, "zero": n, "bins": {"<key>": count}}`` where key ``k`` holds the samples
``γ^(k-1) < x ≤ γ^k``, ``γ = (1 + α) / (1 − α)`` — the L1 :class:`~ebb.window.mapping.LogMapping`
keys, so the value ``2γ^k / (γ + 1)`` is within ``α`` = 1 % of every sample in the bin.

Guarantees:

* ``decode_page_json(page_json(p.agent, p.bucket_ms, p.newest_ns, [encode_bucket_json(b) for b in
  p.buckets], p.now_ns), url) == p`` for every valid page (floats travel as their ``repr``, which JSON reads
  back exactly; property-tested against the reference encoder :func:`ebb.testing.wire.encode_page`).
* Decoding is strict: a version other than :data:`BUCKETS_VERSION`, an unknown or missing field, a
  non-finite or negative number, a ratio outside [0, 1], an integer outside the int64 range, a
  sketch with another ``α``, a key outside the L1 mapping's range or not written canonically
  (``"07"``, ``" 7"``), or bucket times out of order raise :class:`~ebb.errors.InputError` whose
  message names the URL and the field path (``buckets[3].workers.w0.slot_ratio``). Nothing else
  escapes :func:`decode_page` or :func:`decode_page_json`, whatever the value (fuzz-tested: deep
  nesting, huge integers, NaN, wrong types); quoted values are cut to 80 characters.
* **One bad worker or router is dropped alone** (the page, its buckets and every other entry are
  kept): an entry whose fields are present but whose values are out of range (a negative gauge from
  an engine, a ratio past 1) leaves its bucket, its name joins that bucket's ``missing`` (its gauges
  are absent, not zero: the completeness check then blocks a scale-down while scale-ups go on) and
  :attr:`BucketPage.dropped` names the field, the value and the cause. A page whose *shape* is
  wrong (a field missing or unknown, a wrong type, a bad version) is still refused whole: that is a
  release mismatch, and the fix says so.
* :func:`decode_page_json` parses the text with :func:`ebb.untrusted.loads_json` first (at most 64
  levels of nesting and :data:`MAX_PAGE_BYTES` of text).
* :func:`encode_bucket_json` + :func:`page_json` build a page from buckets encoded once each (a
  closed bucket never changes), so serving a page costs a join.
* Sketches merge exactly (counts add), so a merged sketch answers quantiles within ``α`` of the
  rank-selected sample of the union, like :class:`~ebb.window.sketch.ColumnarSketch`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ebb.errors import InputError
from ebb.model.live import BUCKETS_VERSION
from ebb.untrusted import INT64_MAX, loads_json_input
from ebb.window.mapping import LogMapping

__all__ = ["MAX_PAGE_BYTES", "SKETCH_ALPHA", "Bucket", "BucketPage", "RouterGauges", "Sketch", "WorkerGauges",
           "brief", "decode_page", "decode_page_json", "encode_bucket_json", "page_json"]

MAX_PAGE_BYTES: Final = 16 * 1024 * 1024
"""Largest page text :func:`decode_page_json` parses (16 MiB, the controller's read cap). An agent
serves at most half of it in one page (``ebb.agent.server.ServerLimits.max_page_bytes``)."""

SKETCH_ALPHA: Final = 0.01
"""Relative accuracy of every latency sketch on the wire; agents and sources must agree on it."""

FloatArray = npt.NDArray[np.float64]
_FIX = "run agents and controller from the same Ebb release"
_VALUE_FIX = ("the agent passed on a value out of range: check that worker's engine endpoint with `ebb probe`, "
              "and run agents and controller from the same Ebb release")
_QUOTE = 80
_KEY = re.compile(r"-?[0-9]{1,12}")


def _key(k: str) -> str:
    """A mapping key as it appears in a field path, cut to 40 characters."""
    return k if len(k) <= 40 else k[:37] + "..."


def brief(v: object, limit: int = _QUOTE) -> str:
    """A short, always-computable description of an untrusted value for an error message.

    Containers are described by type and size (their ``repr`` can recurse without bound), huge
    integers by bit length (``repr`` refuses past 4,300 digits), everything else is the ``repr`` cut
    to ``limit`` characters."""
    if isinstance(v, dict | list | tuple):
        return f"a {type(v).__name__} of {len(v)}"
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"a {v.bit_length()}-bit integer"
    text = repr(v) if isinstance(v, str | int | float | bool | None) else f"a {type(v).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@lru_cache(maxsize=4)
def _mapping(alpha: float) -> LogMapping:
    return LogMapping(alpha=alpha)


@dataclass(frozen=True)
class Sketch:
    """A sparse relative-error sketch of non-negative values (latencies in ms)."""

    alpha: float = SKETCH_ALPHA
    zero: int = 0
    """Samples that were exactly 0."""
    bins: tuple[tuple[int, int], ...] = ()
    """(key, count) with keys strictly ascending and counts > 0."""

    def __post_init__(self) -> None:
        m = _mapping(self.alpha)
        if self.zero < 0:
            raise ValueError(f"zero count must be >= 0, got {self.zero!r}")
        prev = None
        for key, count in self.bins:
            if not m.key_min <= key <= m.key_max or count <= 0 or (prev is not None and key <= prev):
                raise ValueError(f"bins must have ascending keys in [{m.key_min}, {m.key_max}] and "
                                 f"counts > 0, got ({key!r}, {count!r})")
            prev = key

    @classmethod
    def of(cls, values: Iterable[float], alpha: float = SKETCH_ALPHA) -> Sketch:
        """The sketch of ``values`` (finite, >= 0; ValueError quotes the first bad one)."""
        v = np.asarray(list(values), dtype=np.float64)
        if v.size and (not np.isfinite(v).all() or float(v.min()) < 0.0):
            bad = v[~np.isfinite(v) | (v < 0)][0]
            raise ValueError(f"sketch values must be finite and >= 0, got {float(bad)!r}")
        m = _mapping(alpha)
        idx, _ = m.bin_index(v)
        keys, counts = np.unique(idx[idx != m.zero_index], return_counts=True)
        offset = m.key_min - m.zero_index - 1  # bin index -> L1 key of a positive value
        return cls(alpha, int(np.count_nonzero(idx == m.zero_index)),
                   tuple((int(k) + offset, int(c)) for k, c in zip(keys, counts, strict=True)))

    @classmethod
    def of_counts(cls, values: Iterable[float], counts: Iterable[int], alpha: float = SKETCH_ALPHA) -> Sketch:
        """The sketch of ``counts[i]`` samples equal to ``values[i]`` (weighted rows, e.g. histogram
        buckets): ``of_counts(v, [1] * len(v)) == of(v)``, and ``of_counts(v, c).count == sum(c)``.
        Values must be finite and >= 0, counts integers >= 0 (a zero count adds nothing), one per
        value; ValueError quotes the first bad one."""
        v = np.asarray(list(values), dtype=np.float64)
        raw = list(counts)
        if len(raw) != v.size:
            raise ValueError(f"of_counts needs one count per value, got {len(raw)} counts for {v.size} values")
        for c in raw:
            if isinstance(c, bool) or not isinstance(c, int | np.integer) or c < 0:
                raise ValueError(f"sketch counts must be integers >= 0, got {c!r}")
        n = np.asarray(raw, dtype=np.int64)
        if v.size and (not np.isfinite(v).all() or float(v.min()) < 0.0):
            bad = v[~np.isfinite(v) | (v < 0)][0]
            raise ValueError(f"sketch values must be finite and >= 0, got {float(bad)!r}")
        keep = n > 0
        v, n = v[keep], n[keep]
        m = _mapping(alpha)
        idx, _ = m.bin_index(v)
        zero = int(n[idx == m.zero_index].sum())
        pos = idx != m.zero_index
        keys, inverse = np.unique(idx[pos], return_inverse=True)
        sums = np.zeros(keys.size, dtype=np.int64)
        np.add.at(sums, inverse.reshape(-1), n[pos])
        offset = m.key_min - m.zero_index - 1  # bin index -> L1 key of a positive value
        return cls(alpha, zero, tuple((int(k) + offset, int(c)) for k, c in zip(keys, sums, strict=True)))

    @property
    def count(self) -> int:
        return self.zero + sum(c for _, c in self.bins)

    def merge(self, other: Sketch) -> Sketch:
        """The sketch of both inputs (exact: counts add)."""
        if other.alpha != self.alpha:
            raise ValueError(f"cannot merge sketches with alpha {self.alpha!r} and {other.alpha!r}")
        acc = dict(self.bins)
        for k, c in other.bins:
            acc[k] = acc.get(k, 0) + c
        return Sketch(self.alpha, self.zero + other.zero, tuple(sorted(acc.items())))

    def rows(self) -> tuple[FloatArray, FloatArray]:
        """(value, weight) per non-empty bin, ascending: the weighted rows a policy consumes."""
        g = _mapping(self.alpha).gamma
        vals = [0.0] * (self.zero > 0) + [2.0 * g**k / (g + 1.0) for k, _ in self.bins]
        wts = [float(self.zero)] * (self.zero > 0) + [float(c) for _, c in self.bins]
        return np.asarray(vals, dtype=np.float64), np.asarray(wts, dtype=np.float64)

    def quantile(self, q: float) -> float:
        """Estimate of ``sorted(x)[floor(q * (n - 1))]``; NaN when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile q must be in [0, 1], got {q!r}")
        vals, wts = self.rows()
        if not len(vals):
            return math.nan
        rank = math.floor(q * (self.count - 1))
        return float(vals[int(np.searchsorted(np.cumsum(wts), rank, side="right"))])


@dataclass(frozen=True)
class WorkerGauges:
    """One worker as polled in one bucket."""

    running: float
    waiting: float
    max_batch: int
    ready: bool
    slot_ratio: float
    """running / max_batch, clamped to [0, 1] (replica units)."""
    prefill_busy_ratio: float | None
    """Δprefill_busy_s_total / Δnow_s since its previous answer, clamped to [0, 1]; None when
    there is no previous answer to difference against (first poll, counter reset)."""
    asleep: bool = False
    """The engine says it sleeps or wakes only in part (vLLM's ``vllm:engine_sleep_state``): it serves
    nothing, so it is not ready and its zero load is no idle capacity. On the wire only when true."""


@dataclass(frozen=True)
class RouterGauges:
    """One router as polled in one bucket."""

    queued: float
    inflight: float


@dataclass(frozen=True)
class Bucket:
    """What an agent knows about the 100 ms ending at ``ts_ns`` (Unix ns)."""

    ts_ns: int
    workers: Mapping[str, WorkerGauges] = field(default_factory=dict)
    """Workers that answered in this bucket, by worker name."""
    routers: Mapping[str, RouterGauges] = field(default_factory=dict)
    latency_from: str = ""
    """"router" (client view), "workers", or "" when no endpoint is known yet."""
    latency_names: tuple[str, ...] = ()
    """Names of the endpoints whose completions fill the sketches (to drop duplicates on merge)."""
    ttft_ms: Sketch = Sketch()
    e2e_ms: Sketch = Sketch()
    missing: tuple[str, ...] = ()
    """Endpoint URLs that did not answer in this bucket: their gauges are absent, not zero."""
    gpu: Mapping[str, float] = field(default_factory=dict)
    host: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class BucketPage:
    """One ``/v1/buckets`` answer."""

    agent: str
    bucket_ms: int
    newest_ns: int | None
    """The agent's newest bucket, whatever ``since_ns`` asked (None: none closed yet)."""
    buckets: tuple[Bucket, ...] = ()
    dropped: tuple[str, ...] = field(default=(), compare=False)
    """Why entries were left out while decoding (one line per dropped worker, router or series; never
    on the wire, so not part of a page's equality: what an agent serves has none)."""
    now_ns: int | None = None
    """The agent's wall clock as it wrote the page (Unix ns); None from an agent that does not say."""


# -- encode ------------------------------------------------------------------------------------
def _enc_sketch(s: Sketch) -> dict[str, Any]:
    return {"alpha": s.alpha, "zero": s.zero, "bins": {str(k): c for k, c in s.bins}}


def _enc_bucket(b: Bucket) -> dict[str, Any]:
    return {
        "ts_ns": b.ts_ns,
        "workers": {n: {"running": w.running, "waiting": w.waiting, "max_batch": w.max_batch,
                        "ready": w.ready, "slot_ratio": w.slot_ratio,
                        "prefill_busy_ratio": w.prefill_busy_ratio, **({"asleep": True} if w.asleep else {})}
                    for n, w in b.workers.items()},
        "routers": {n: {"queued": r.queued, "inflight": r.inflight} for n, r in b.routers.items()},
        "latency_from": b.latency_from, "latency_names": list(b.latency_names),
        "ttft_ms": _enc_sketch(b.ttft_ms), "e2e_ms": _enc_sketch(b.e2e_ms),
        "missing": list(b.missing), "gpu": dict(b.gpu), "host": dict(b.host),
    }


# -- decode ------------------------------------------------------------------------------------
class _BadValue(InputError):
    """A value out of its range in an entry of the right shape: that entry is dropped alone."""


class _Reader:
    """Typed field access that raises InputError naming the URL and the field path; :meth:`kept`
    drops an entry whose value is out of range and keeps why in :attr:`dropped`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.dropped: list[str] = []

    def bad_value(self, where: str, problem: str) -> _BadValue:
        return _BadValue(f"field {where}: {problem}", path=self.url, fix=_VALUE_FIX)

    def kept(self, entries: dict[str, Any], decode: Any, where: str) -> tuple[dict[str, Any], list[str]]:
        """``decode(value, path)`` of each entry; those with a value out of range are left out and
        their names returned (a wrong shape still raises)."""
        out: dict[str, Any] = {}
        gone: list[str] = []
        for n, v in entries.items():
            try:
                out[n] = decode(v, f"{where}.{_key(n)}")
            except _BadValue as exc:
                self.dropped.append(str(exc))
                gone.append(n)
        return out, gone

    def fail(self, where: str, problem: str) -> InputError:
        return InputError(f"field {where}: {problem}", path=self.url, fix=_FIX)

    def obj(self, v: object, where: str, fields: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, got {type(v).__name__}")
        unknown = sorted(set(v) - set(fields) - set(optional))
        if unknown:
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            raise self.fail(where, f"unknown field(s) {', '.join(brief(k, 40) for k in unknown[:5])}{more}")
        absent = [f for f in fields if f not in v]
        if absent:
            raise self.fail(where, f"missing field(s) {', '.join(map(repr, absent))}")
        return v

    def mapping(self, v: object, where: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, got {type(v).__name__}")
        return v

    def num(self, v: object, where: str, hi: float = math.inf) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(where, f"expected a number, got {brief(v)}")
        try:
            x = float(v)
        except OverflowError:  # an integer past 1.8e308
            raise self.bad_value(where, f"{brief(v)} is not a finite number in [0, {hi:g}]") from None
        if not math.isfinite(x) or x < 0.0 or x > hi:
            raise self.bad_value(where, f"{brief(v)} is not a finite number in [0, {hi:g}]")
        return x

    def int_(self, v: object, where: str, lo: int = 0) -> int:
        # int64 at most: bucket times and counts become floats and numpy int64 downstream
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= INT64_MAX:
            raise self.fail(where, f"expected an integer in [{lo}, 2^63-1], got {brief(v)}")
        return v

    def str_(self, v: object, where: str) -> str:
        if not isinstance(v, str):
            raise self.fail(where, f"expected a string, got {brief(v)}")
        return v

    def strs(self, v: object, where: str) -> tuple[str, ...]:
        if not isinstance(v, list):
            raise self.fail(where, f"expected a list of strings, got {brief(v)}")
        return tuple(self.str_(s, f"{where}[{i}]") for i, s in enumerate(v))

    def values(self, v: object, where: str) -> dict[str, float]:
        """Series values; one out of range is dropped alone (the series is absent, not zero)."""
        return self.kept(self.mapping(v, where), self.num, where)[0]

    def sketch(self, v: object, where: str) -> Sketch:
        d = self.obj(v, where, ("alpha", "zero", "bins"))
        alpha = d["alpha"]
        if isinstance(alpha, bool) or not isinstance(alpha, float | int) or alpha != SKETCH_ALPHA:
            raise self.fail(f"{where}.alpha", f"{brief(alpha)} differs from this reader's {SKETCH_ALPHA}")
        m = _mapping(SKETCH_ALPHA)
        bins: dict[int, int] = {}
        for k, c in self.mapping(d["bins"], f"{where}.bins").items():
            # canonical decimal only: int() also reads " 7", "+7", "0_7" and "07", which would let
            # two keys name one bin
            key = int(k) if _KEY.fullmatch(k) else None
            if key is None or str(key) != k:
                raise self.fail(f"{where}.bins", f"key {brief(k, 40)} is not a canonical integer")
            if not m.key_min <= key <= m.key_max:
                raise self.fail(f"{where}.bins", f"key {key} outside [{m.key_min}, {m.key_max}]")
            bins[key] = self.int_(c, f"{where}.bins.{key}", lo=1)
        return Sketch(SKETCH_ALPHA, self.int_(d["zero"], f"{where}.zero"), tuple(sorted(bins.items())))

    def worker(self, v: object, where: str) -> WorkerGauges:
        d = self.obj(v, where, ("running", "waiting", "max_batch", "ready", "slot_ratio",
                                "prefill_busy_ratio"), optional=("asleep",))
        if not isinstance(d["ready"], bool):
            raise self.fail(f"{where}.ready", f"expected true/false, got {brief(d['ready'])}")
        asleep = d.get("asleep", False)
        if not isinstance(asleep, bool):
            raise self.fail(f"{where}.asleep", f"expected true/false, got {brief(asleep)}")
        pb = d["prefill_busy_ratio"]
        mb = d["max_batch"]
        if isinstance(mb, int) and not isinstance(mb, bool) and mb < 1:
            raise self.bad_value(f"{where}.max_batch", f"{brief(mb)} is not an integer >= 1")
        return WorkerGauges(
            self.num(d["running"], f"{where}.running"), self.num(d["waiting"], f"{where}.waiting"),
            self.int_(d["max_batch"], f"{where}.max_batch", lo=1), d["ready"],
            self.num(d["slot_ratio"], f"{where}.slot_ratio", hi=1.0),
            None if pb is None else self.num(pb, f"{where}.prefill_busy_ratio", hi=1.0), asleep)

    def bucket(self, v: object, where: str) -> Bucket:
        d = self.obj(v, where, ("ts_ns", "workers", "routers", "latency_from", "latency_names",
                                "ttft_ms", "e2e_ms", "missing", "gpu", "host"))
        src = self.str_(d["latency_from"], f"{where}.latency_from")
        if src not in ("", "router", "workers"):
            raise self.fail(f"{where}.latency_from", f"{brief(src)} is not one of '', 'router', 'workers'")
        routers, no_router = self.kept(self.mapping(d["routers"], f"{where}.routers"), self.router, f"{where}.routers")
        workers, no_worker = self.kept(self.mapping(d["workers"], f"{where}.workers"), self.worker, f"{where}.workers")
        missing = self.strs(d["missing"], f"{where}.missing")
        return Bucket(
            ts_ns=self.int_(d["ts_ns"], f"{where}.ts_ns"),
            workers=workers, routers=routers, latency_from=src,
            latency_names=self.strs(d["latency_names"], f"{where}.latency_names"),
            ttft_ms=self.sketch(d["ttft_ms"], f"{where}.ttft_ms"),
            e2e_ms=self.sketch(d["e2e_ms"], f"{where}.e2e_ms"),
            missing=missing + tuple(n for n in (*no_worker, *no_router) if n not in missing),
            gpu=self.values(d["gpu"], f"{where}.gpu"), host=self.values(d["host"], f"{where}.host"))

    def router(self, v: object, where: str) -> RouterGauges:
        rd = self.obj(v, where, ("queued", "inflight"))
        return RouterGauges(self.num(rd["queued"], f"{where}.queued"), self.num(rd["inflight"], f"{where}.inflight"))


def decode_page(obj: object, url: str) -> BucketPage:
    """Validate a parsed ``/v1/buckets`` JSON value from ``url``; InputError names URL and field."""
    r = _Reader(url)
    if isinstance(obj, dict):
        version = obj.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version != BUCKETS_VERSION:
            raise r.fail("version", f"{brief(version)} is not the supported {BUCKETS_VERSION}")
    d = r.obj(obj, "(page)", ("version", "agent", "bucket_ms", "newest_ns", "buckets"), optional=("now_ns",))
    if not isinstance(d["buckets"], list):
        raise r.fail("buckets", f"expected a list, got {type(d['buckets']).__name__}")
    buckets = tuple(r.bucket(b, f"buckets[{i}]") for i, b in enumerate(d["buckets"]))
    for i in range(1, len(buckets)):
        if buckets[i].ts_ns <= buckets[i - 1].ts_ns:
            raise r.fail(f"buckets[{i}].ts_ns", "bucket times must increase strictly")
    newest, now = d["newest_ns"], d.get("now_ns")
    return BucketPage(r.str_(d["agent"], "agent"), r.int_(d["bucket_ms"], "bucket_ms", lo=1),
                      None if newest is None else r.int_(newest, "newest_ns"), buckets, tuple(r.dropped),
                      None if now is None else r.int_(now, "now_ns"))


def decode_page_json(raw: bytes | str, url: str) -> BucketPage:
    """:func:`decode_page` of JSON text, parsed with the depth (64) and size (:data:`MAX_PAGE_BYTES`)
    caps of :func:`ebb.untrusted.loads_json`; InputError naming ``url`` for every bad text."""
    return decode_page(loads_json_input(raw, what="answer", path=url, fix=_FIX, max_bytes=MAX_PAGE_BYTES), url)


def encode_bucket_json(bucket: Bucket) -> bytes:
    """One bucket as compact JSON bytes (the element :func:`page_json` joins)."""
    return json.dumps(_enc_bucket(bucket), separators=(",", ":"), allow_nan=False).encode()


def page_json(agent: str, bucket_ms: int, newest_ns: int | None, buckets: Sequence[bytes],
              now_ns: int | None = None) -> bytes:
    """The page JSON (format in the module docstring) around buckets from :func:`encode_bucket_json`;
    ``now_ns`` is written when given."""
    fields: dict[str, object] = {"version": BUCKETS_VERSION, "agent": agent, "bucket_ms": bucket_ms,
                                 "newest_ns": newest_ns}
    if now_ns is not None:
        fields["now_ns"] = now_ns
    head = json.dumps(fields, separators=(",", ":"))
    return b"".join((head[:-1].encode(), b',"buckets":[', b",".join(buckets), b"]}"))
