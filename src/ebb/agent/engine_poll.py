"""Engine endpoints of the agent: an inference server's own Prometheus page → one worker per bucket.

:class:`EnginePoller` turns each scrape of an engine endpoint (``http://POD:8000/metrics`` for vLLM;
the names come from an :class:`~ebb.sources.engines.profiles.EngineProfile`) into an
:class:`~ebb.agent.buckets.EnginePoll` for :meth:`~ebb.agent.buckets.BucketAggregator.engine_ok`.
Pure apart from :meth:`EnginePoller.fetch` (one bounded GET); times are the agent's receive times.

Guarantees, per endpoint and scrape:

* **Gauges.** ``running`` / ``waiting`` as the engine reports them (summed over its series);
  ``max_batch`` = the engine's max-concurrency metric, else ``--max-concurrency``, else 1 when
  neither is known and the slot share comes from KV usage alone (the wire needs an integer; no
  Ebb reader uses ``max_batch`` for a decision); ``ready`` = True (it answered) unless the engine
  says it sleeps; ``asleep`` = the engine's sleep-state gauge says it sleeps or wakes only in part
  (:attr:`~ebb.sources.engines.reading.EngineReading.asleep`; vLLM ``vllm:engine_sleep_state``):
  such a pod is never ready, and the controller's reader counts it as a sleeper, never as capacity;
  ``slot_ratio`` = max(running / max concurrency, KV usage) over the terms that are known,
  clamped to [0, 1]; ``prefill_busy_ratio`` = the busy counter's Δ over the Δ of the agent's
  receive times since the previous good scrape of the same endpoint (clamped to [0, 1]), None on
  the first scrape and after a counter reset — so the bucket time is not *complete*
  (:mod:`ebb.sources.agents`) rather than summed as 0. A profile without a busy counter is
  refused at startup (:func:`check_engine`), as the Prometheus source's engine mode refuses it.
* **Latency rows, never understated.** The TTFT and end-to-end histograms' per-bucket increments
  since the previous scrape become weighted rows at each bucket's **upper** bound in ms, so any
  quantile read from them is at least the true one (within the sketch's 1 %). Observations in the
  ``+Inf`` bucket are placed at :func:`overflow_ms` — ten times the largest finite bound and at
  least :data:`OVERFLOW_MIN_MS` (600,000 ms = 10 min), far above any SLO, so they count as
  violations and never as fast requests. Counts are rounded to whole observations (engines count
  integers; the rounding absorbs the 6-digit printing of llama.cpp-style exporters). A histogram
  whose counters went backwards is left out for that interval (no rows, never negative ones).
  A missed scrape delays rows to the next good one, it never loses them (the Δ spans both).
* **Unusable answers are errors, never filled in.** A page over :data:`MAX_ENGINE_BYTES`, not an
  exposition, lacking the running/waiting gauges (the message names the metric, the engine and
  how to enable it), or giving neither a max concurrency nor KV usage raises
  :class:`~ebb.errors.InputError`; the agent counts it and lists the endpoint as missing.
* **One model per pod page.** A pod serving several models (its running series carry several
  ``model_name`` values, the profile's ``model_labels``) is several workloads: with ``--model NAME``
  (``model``) the poller reads that model's series alone (and the pod-wide ones without a model
  label); without it such a page is an :class:`~ebb.errors.InputError` naming the models and the fix,
  so the endpoint is listed missing and its failure logged once (the agent's per-endpoint log rule),
  never summed into one pod. A page with one model, or an engine that labels none, reads as before.
* :func:`check_engine` refuses at startup (ConfigError) an engine whose profile has no
  max-concurrency metric and no KV-usage metric when no ``--max-concurrency`` is given, one
  that names no busy-seconds counter, and a ``--model`` for an engine that labels no model.
* Worker names: the endpoint's ``host:port`` (``[v6]:port``; the scheme's port when none is
  written), at most 253 characters (a longer one keeps its last 253), never ``@``.
"""

from __future__ import annotations

import logging
import math
import time
import urllib.parse
from collections.abc import Iterable
from typing import Final

import aiohttp

from ebb.agent.buckets import MAX_NAME_CHARS, EnginePoll
from ebb.log_limit import LogLimiter, held_note
from ebb.errors import ConfigError, InputError, SourceUnavailable
from ebb.sources.agent_wire import WorkerGauges
from ebb.sources.engines.models import check_model
from ebb.sources.engines.profiles import EngineProfile
from ebb.sources.engines.reading import EngineReading, LatencyDelta, interval, read_engine_text

__all__ = ["MAX_ENGINE_BYTES", "OVERFLOW_MIN_MS", "EnginePoller", "check_engine", "engine_name", "latency_rows",
           "overflow_ms", "read_capped", "slot_share"]

log = logging.getLogger(__name__)

MAX_ENGINE_BYTES: Final = 4 * 1024 * 1024
"""Largest engine page read (4 MiB): a full vLLM V1 page with every histogram is about 60 KB."""
OVERFLOW_MIN_MS: Final = 600_000.0
"""Least value given to an observation in a histogram's ``+Inf`` bucket (10 minutes)."""
_CHUNK: Final = 64 * 1024
_HEADERS: Final = {"Accept": "text/plain;version=0.0.4, */*;q=0.1", "Accept-Encoding": "identity"}
_WIRE_SIGNALS: Final = ("ttft", "e2e")


def overflow_ms(upper_ms: Iterable[float]) -> float:
    """Where ``+Inf`` observations go: max(:data:`OVERFLOW_MIN_MS`, 10 × the largest finite bound)."""
    finite = [float(u) for u in upper_ms if math.isfinite(float(u))]
    return max(OVERFLOW_MIN_MS, 10.0 * max(finite)) if finite else OVERFLOW_MIN_MS


def latency_rows(delta: LatencyDelta) -> tuple[tuple[float, int], ...]:
    """(upper bound ms, observations) per non-empty bucket of ``delta``; +Inf at :func:`overflow_ms`."""
    uppers = [float(u) for u in delta.upper_ms.tolist()]
    over = overflow_ms(uppers)
    out: list[tuple[float, int]] = []
    for u, c in zip(uppers, delta.counts.tolist(), strict=True):
        n = round(float(c)) if math.isfinite(float(c)) else 0
        if n > 0:
            out.append((u if math.isfinite(u) else over, int(n)))
    return tuple(out)


def slot_share(running: float, max_concurrency: int | None, kv_usage_ratio: float | None) -> float | None:
    """max(running / max_concurrency, KV usage) over the known terms, clamped to [0, 1]; None if neither."""
    terms = ([running / max_concurrency] if max_concurrency else []) + (
        [kv_usage_ratio] if kv_usage_ratio is not None else [])
    return min(1.0, max(0.0, max(terms))) if terms else None


def check_engine(profile: EngineProfile, max_concurrency: int | None, model: str | None = None) -> None:
    """ConfigError when ``profile`` can never give a slot share without ``--max-concurrency``, names no
    busy counter, or cannot select ``model`` (it labels none)."""
    check_model(profile, model)
    if max_concurrency is not None and max_concurrency < 1:
        raise ConfigError(f"--max-concurrency must be >= 1, got {max_concurrency}")
    if max_concurrency is None and not profile.max_concurrency and not profile.kv_usage:
        raise ConfigError(f"engine {profile.name!r} reports neither its max concurrency nor its KV-cache usage "
                          f"(fix: give --max-concurrency N, the server's parallel slots / max batch, e.g. "
                          f"llama-server -np N or vLLM --max-num-seqs N)")
    if not profile.busy_seconds:
        raise ConfigError(f"engine {profile.name!r} names no busy-seconds counter, so no bucket of its pods would "
                          "ever be complete and the controller would never scale on it (fix: add busy_seconds to "
                          "its entry in the engines file, e.g. the TTFT histogram's _sum, which overstates busy "
                          "time: the safe direction)")


def engine_name(url: str) -> str:
    """The worker name of engine endpoint ``url``: ``host:port`` (see the module docstring)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    name = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return name[-MAX_NAME_CHARS:].replace("@", "_")


async def read_capped(resp: aiohttp.ClientResponse, cap: int, what: str, fix: str) -> bytes:
    """The body of a 200 answer, at most ``cap`` bytes; SourceUnavailable / InputError otherwise."""
    if resp.status != 200:
        raise SourceUnavailable(f"{what} answered HTTP {resp.status}")
    if resp.content_length is not None and resp.content_length > cap:
        raise InputError(f"answer of {resp.content_length:,} bytes is over the {cap:,}-byte limit", path=what, fix=fix)
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(_CHUNK):
        buf += chunk
        if len(buf) > cap:
            raise InputError(f"answer is over the {cap:,}-byte limit; the rest was not read", path=what, fix=fix)
    return bytes(buf)


class EnginePoller:
    """Per-endpoint state of the engine endpoints one agent polls; see the module guarantees."""

    def __init__(self, profile: EngineProfile, max_concurrency: int | None = None, model: str | None = None) -> None:
        check_engine(profile, max_concurrency, model)
        self.profile = profile
        self.max_concurrency = max_concurrency
        self.model = model
        """The model read from each page (``--model``); None: the page's one model, refused when it has several."""
        self._prev: dict[str, tuple[EngineReading, float]] = {}
        self.dropped = 0
        """Samples the parser or the validation dropped, all endpoints together (each with a reason)."""
        self.resets = 0
        """Intervals with a counter going backwards (a restarted engine)."""
        self._log = LogLimiter()

    def metrics_url(self, worker_url: str) -> str:
        """The engine page of a worker listed by a router: ``{url}{profile.metrics_path}``."""
        return worker_url.rstrip("/") + self.profile.metrics_path

    def forget(self, url: str) -> None:
        self._prev.pop(url, None)

    async def fetch(self, session: aiohttp.ClientSession, url: str) -> bytes:
        """One GET of ``url`` (no redirects, no compression, :data:`MAX_ENGINE_BYTES` at most)."""
        async with session.get(url, headers=_HEADERS, allow_redirects=False) as resp:
            if resp.status in (404, 501) and self.profile.enable_hint:
                raise InputError(f"answered HTTP {resp.status}: no metrics page there", path=url,
                                 fix=self.profile.enable_hint)
            return await read_capped(resp, MAX_ENGINE_BYTES, url,
                                     f"check that the URL is the {self.profile.title} metrics page")

    def observe(self, url: str, raw: bytes, t_s: float | None = None) -> EnginePoll:
        """The bucket entry for one answer of ``url`` received at ``t_s`` (monotonic s; now when None):
        :meth:`parse` then :meth:`advance`."""
        t = time.monotonic() if t_s is None else t_s
        return self.advance(url, self.parse(url, raw), t)

    def parse(self, url: str, raw: bytes) -> EngineReading:
        """One answer of ``url`` read with the profile (pure, thread-safe: the agent runs it in a
        worker thread, :mod:`ebb.agent.parse_pool`); InputError for an unusable page."""
        return read_engine_text(raw, self.profile, source=url, model=self.model)

    def advance(self, url: str, reading: EngineReading, t: float) -> EnginePoll:
        """The bucket entry of ``reading`` (``url``'s answer received at ``t``, monotonic s), against
        the previous good one; moves the endpoint's state (on the agent's loop, never in a thread)."""
        if reading.dropped:
            self.dropped += len(reading.dropped)
            if (held := self._log.allow("dropped")) is not None:
                log.warning("%s: %d sample(s) dropped, e.g. %s%s", url, len(reading.dropped),
                            reading.dropped[0][:200], held_note(held))
        mc = reading.max_concurrency or self.max_concurrency
        slots = slot_share(reading.running, mc, reading.kv_usage_ratio)
        if slots is None:
            raise InputError(f"{self.profile.name} page gives neither a max concurrency nor a KV-cache usage "
                             f"(looked for {', '.join(self.profile.max_concurrency + self.profile.kv_usage) or '-'})",
                             path=url, fix="give --max-concurrency N")
        busy: float | None = None
        rows: dict[str, tuple[tuple[float, int], ...]] = {}
        prev = self._prev.get(url)
        self._prev[url] = (reading, t)
        if prev is not None and t > prev[1]:
            iv = interval(prev[0], reading, t - prev[1])
            self.resets += bool(iv.resets)
            busy = iv.busy_ratio
            rows = {s: latency_rows(d) for s, d in iv.latency.items() if s in _WIRE_SIGNALS}
        asleep = bool(reading.asleep)
        gauges = WorkerGauges(reading.running, reading.waiting, mc or 1, not asleep, slots,
                              None if busy is None else min(1.0, max(0.0, busy)), asleep)
        return EnginePoll(engine_name(url), gauges, rows.get("ttft", ()), rows.get("e2e", ()))
