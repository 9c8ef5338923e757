"""Prometheus as a live :class:`~ebb.sources.live.SignalSource`: HTTP API client and PromQL.

:class:`PrometheusClient` is a blocking client over ``/api/v1/query`` and ``/api/v1/query_range``.
Every request goes through :func:`ebb.sources.http_get.get`: one connection per call, no thread or
event loop of its own beyond that module's watchdog, and whatever the server does, a call ends
within ``timeout_s`` (default 2 s, connect to last byte — a server trickling a byte every 0.3 s is
cut there) and reads at most ``max_bytes`` (default 16 MiB; a 30 s read of a 1,000-worker fleet is
about 3 MiB). Answers are parsed with :func:`ebb.untrusted.loads_json` (at most 64 levels of
nesting) and hold at most :data:`MAX_SERIES` (50,000) series. Optional: a bearer token (``token``,
or ``token_file`` re-read whenever its modification time changes, so a rotated Kubernetes token is
picked up) and TLS (``tls``: a CA bundle, a client certificate and key), loaded once at
construction so an unusable file fails at start. Errors: connection refused, timeout, reset,
truncated body, the total deadline or HTTP 5xx (503 included) → :class:`~ebb.errors.SourceUnavailable`
naming the URL; HTTP 4xx (bad PromQL: 400 ``bad_data``, 422 ``execution``; 401/403: a missing or
wrong token), a redirect (never followed), a body over the size cap, too deep, not JSON or not
Prometheus' answer, or a rejected TLS certificate → :class:`~ebb.errors.InputError` quoting
Prometheus' ``error``. Nothing else escapes. Values are parsed with ``float`` ("NaN", "+Inf",
"-Inf" included) and handed over unfiltered; the source filters.

:class:`PrometheusSource` answers ``read(since_s)`` with one range query per signal over the last
``lookback_s`` (default 30 s) ending at now rounded down to ``step_s`` (default 1 s), so the grid
of ``t_s`` is the same from read to read; it returns the steps ``> since_s`` (pass the last
``fine.t_s`` back as the cursor). "Now" lags the clock by ``settle_s`` (default 1.25 × the scrape
interval): Prometheus stamps a scrape with its start and commits it up to ``scrape_timeout`` (≤ the
interval) later, so a step closer to now could still change after it was read and past the cursor
— histogram counts would be lost. All queries of one read together end within ``read_timeout_s``
(default 4 s; each one also within the client's ``timeout_s``), else SourceUnavailable.

Scope (``selector``). Every series selector of every query carries the label matchers of
``selector`` (default :data:`DEFAULT_SELECTOR`, ``job=~"ebb|ebb-.+"``: the jobs of
:func:`ebb.testing.prometheus.write_file_sd_config` and of ``ebb demo --live``), so a target
outside it — any other pod Prometheus scrapes — cannot add a worker, a queue or latency rows.
``selector`` is a comma-separated list of matchers ``name="v"``, ``name!="v"``, ``name=~"re"``,
``name!~"re"`` (optionally in ``{}``; values in double or single quotes, escapes ``\\\\``, ``\\"``,
``\\'`` only; no ``__name__`` or other ``__`` label; at most 4,096 characters). It is parsed
(:meth:`Selector.parse`, :class:`~ebb.errors.ConfigError` with the fix otherwise) and re-rendered,
never pasted, so nothing but label matchers can reach the PromQL. An empty selector means
unscoped: allowed only when asked for explicitly, and logged as a WARNING. Regular expressions are
RE2 and checked by Prometheus: a bad one is an InputError at the first read (the controller fails
static). Queries per read (``W`` = ``rate_window_s``, ``S`` = the selector's matchers)::

    {__name__=~"ebb_worker_running|ebb_worker_waiting|ebb_worker_max_batch",S}   per-worker gauges
    timestamp(ebb_worker_running{S})            when each worker's value was really scraped
    rate(ebb_worker_prefill_busy_seconds_total{S}[W])   per-worker prefill busy share
    ebb_router_queued{S}   and   timestamp(ebb_router_queued{S})
    {__name__=~"ebb_router_ttft_seconds_bucket|ebb_router_e2e_seconds_bucket",S} raw cumulative
    sum(rate(ebb_router_requests_total{S}[W]))  instant, newest good step: ``total_qps``
                                                (answered requests/s, the arrival rate when steady)

Sums are taken here, not in PromQL, so every worker's value can be checked before it counts.

Replica identity (``replica_label``, default ``worker``): the label that names a replica in
``inflight_by_replica`` and in ``replicas_seen``. Ebb's workers export ``worker`` themselves, so
within the selector a target can still claim any name and report any value for it; in Kubernetes
point it at a label the scrape config writes from the pod's metadata (``pod``, relabelled from
``__meta_kubernetes_pod_name``), which a pod cannot set (Prometheus renames a clashing exported
label to ``exported_pod`` unless ``honor_labels`` is on). Two series with the same name at one step
(two targets claiming one replica, or one target scraped by two jobs) drop the step: summing both
would double a replica's demand.

Why ``W`` = 4 × ``scrape_interval_s`` by default: ``rate`` needs two samples inside its window;
four intervals survive one missed or late scrape without the series vanishing. A worker with no
rate yet (its first scrapes) contributes 0 prefill; its slot share still counts.

Staleness, measured: range queries fill a gap with the last value for up to 5 minutes (the
lookback delta), so a target that died without staleness markers (Prometheus crashed or was
restarted meanwhile) looks fresh. ``timestamp(x)`` returns the time the value used at each step
was scraped; a step is kept only when every worker's and the router's value at it was scraped at
most ``max_sample_age_s`` (default 3 × the scrape interval) before the step. ``newest_sample_s``
is the oldest scrape time behind the newest step that passed every check (None when none did):
once any input stops being scraped it freezes, at most ``max_sample_age_s`` later, whatever
Prometheus fills in. (A target that goes down while Prometheus runs gets staleness markers and
simply vanishes from the queries; the timestamp check is for the cases without markers.)

Fleet completeness (``replicas_seen``). A worker target that vanishes (removed from discovery,
or down: Prometheus writes staleness markers either way) leaves steps that look complete with one
worker fewer — indistinguishable, in Prometheus, from a replica Ebb itself removed. So the source
does not drop a step because the number of workers changed within the window (that would blind
the controller for ``lookback_s`` after every scale-down, when a burst must still be seen);
instead it counts, per kept step, the distinct replicas whose values were fresh and sane at it,
and returns ``replicas_seen`` = the minimum over the returned steps (None when none is returned).
The controller compares it with the actuator's ready count, the only party that knows which
replicas should exist: fewer seen than ready is no data, so no scale-down.

Fail static, never a guess — a step is dropped (reasons counted over the steps asked for and
logged once per read on this module's logger: WARNING, or DEBUG for plain absence) when: no fresh
router ``queued``; no worker at all (every worker gone reads as "no data", not as "no demand");
any worker stale; a scrape time after its step (more than 1 ms: real Prometheus never uses a later
sample, and a future time would keep ``newest_sample_s`` fresh forever) or NaN; a worker series
without ``replica_label``; two series naming one replica; a NaN, infinite or negative value;
``max_batch`` ≤ 0; ``running`` > 10 × ``max_batch``; a prefill share > 2 per worker. A point at a
NaN or infinite time is ignored.

Latency completions come from the histograms' raw cumulative buckets: the increase of each bucket
counter between two consecutive steps (a drop is a counter reset: the new value is the increase)
is summed over routers per ``le``; differences of neighbouring ``le`` give each bucket's count.
One row per non-empty bucket and step: ``done_t_s`` = the step, the latency = the bucket's upper
bound in ms (never understates a P99), weight = count; TTFT rows carry NaN end-to-end latency and
vice versa. The ``+Inf`` bucket (any spelling ``float`` reads as +inf) always reads as ``inf`` ms,
never NaN: a window whose observations all exceed the largest finite bound has P99 = inf, i.e.
past any SLO. A series whose ``le`` is not a number ≥ 0 or +Inf (``NaN``, ``-1``, ``x``) is
dropped with a logged reason, so the latency column of a row is NaN only where the row describes
the other latency. Counts are exact: no ``increase()`` extrapolation, and a stale counter adds
nothing.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from ebb.errors import ConfigError, InputError, SourceUnavailable
from ebb.model import live as names
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals
from ebb.sources.http_get import HttpLimits, TlsOptions, check_url, get
from ebb.untrusted import UntrustedInput, loads_json

__all__ = ["DEFAULT_SELECTOR", "LabelMatcher", "PrometheusClient", "PrometheusSource", "PromQueries",
           "PromSeries", "Selector"]

log = logging.getLogger(__name__)
T = TypeVar("T")
FloatArray = npt.NDArray[np.float64]

MAX_RUNNING_PER_SLOT = 10.0
"""``running`` above this many times ``max_batch`` is absurd (a unit or label mix-up)."""
MAX_PREFILL_SHARE = 2.0
"""A worker's prefill busy seconds per second above this is absurd (1.0 = always prefilling;
``rate`` extrapolation may overshoot 1 slightly)."""
MAX_POINTS = 11_000
"""Prometheus refuses range queries of more points than this per series."""
MAX_SERIES: Final = 50_000
"""Series accepted in one answer: a 1,000-worker fleet's gauges are 3,000; more is a selector that
matches far too much (or a hostile server), refused as an InputError before any is laid out."""
MAX_BYTES: Final = 16 * 1024 * 1024
"""Default body cap of one answer (bytes)."""
MAX_WARNINGS_LOGGED: Final = 3
"""Prometheus ``warnings`` logged per answer (each cut to 200 characters); the rest are counted."""
DEFAULT_SELECTOR: Final = 'job=~"ebb|ebb-.+"'
"""The jobs Ebb's own Prometheus configs use: ``ebb`` (tests, file-SD) and ``ebb-router`` /
``ebb-worker`` / ``ebb-agent`` (``ebb demo --live``). Anchored, as every PromQL regex is."""
MAX_SELECTOR_CHARS: Final = 4096

_FIX = "check that Prometheus runs and that the URL given to ebb (--prometheus-url) points at it"
_SELECTOR_FIX = ('write label matchers separated by commas, e.g. job="ebb",namespace="serving" '
                 '(operators = != =~ !~, values in double quotes, \\\\ and \\" the only escapes)')


# -- the selector ------------------------------------------------------------------------------
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MatchOp = Literal["=", "!=", "=~", "!~"]
_OPS: tuple[MatchOp, ...] = ("=~", "!~", "!=", "=")  # two-character operators first


@dataclass(frozen=True)
class LabelMatcher:
    """One PromQL label matcher: ``name op "value"`` (the value unescaped, as Prometheus compares it)."""

    name: str
    op: MatchOp
    value: str

    def render(self) -> str:
        """The matcher as PromQL: the value double-quoted with ``\\`` and ``"`` escaped."""
        return f'{self.name}{self.op}"{_quote(self.value)}"'


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class Selector:
    """Label matchers added to every series selector of the source's queries (empty: unscoped)."""

    matchers: tuple[LabelMatcher, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Selector:
        """Matchers from ``job="ebb",namespace=~"serving|canary"`` (optionally in ``{}``).

        :class:`~ebb.errors.ConfigError` naming the character and the fix for anything else:
        a bare value, an unknown operator, an unterminated or unknown escape, a control
        character, ``__name__`` or another ``__`` label, PromQL outside the matchers.
        """
        if not isinstance(text, str):
            raise ConfigError(f"Prometheus selector must be text, got {type(text).__name__} (fix: {_SELECTOR_FIX})")
        if len(text) > MAX_SELECTOR_CHARS:
            raise ConfigError(f"Prometheus selector of {len(text):,} characters is longer than "
                              f"{MAX_SELECTOR_CHARS:,} (fix: {_SELECTOR_FIX})")
        s = text.strip()
        if s.startswith("{") and s.endswith("}"):
            s = s[1:-1]
        out: list[LabelMatcher] = []
        i, n = 0, len(s)

        def bad(why: str, at: int) -> ConfigError:
            return ConfigError(f"Prometheus selector {text[:120]!r}: {why} at character {at + 1} "
                               f"(fix: {_SELECTOR_FIX})")

        def skip(j: int) -> int:
            while j < n and s[j] in " \t":
                j += 1
            return j

        while True:
            i = skip(i)
            if i == n:
                break
            m = _LABEL_NAME.match(s, i)
            if m is None:
                raise bad("expected a label name", i)
            name = m.group(0)
            if name.startswith("__"):
                raise bad(f"label {name!r} is reserved (the queries choose the metric names)", i)
            i = skip(m.end())
            op = next((o for o in _OPS if s.startswith(o, i)), None)
            if op is None:
                raise bad(f"expected one of = != =~ !~ after {name!r}", i)
            i = skip(i + len(op))
            if i == n or s[i] not in "\"'":
                raise bad(f"expected a quoted value after {name}{op}", i)
            quote, start, chars = s[i], i, []
            i += 1
            while True:
                if i == n:
                    raise bad("unterminated quoted value", start)
                ch = s[i]
                if ch == quote:
                    i += 1
                    break
                if ch == "\\":
                    if i + 1 == n or s[i + 1] not in "\\\"'":
                        raise bad("unsupported escape (only \\\\, \\\" and \\' are)", i)
                    ch = s[i + 1]
                    i += 1
                elif not ch.isprintable():
                    raise bad(f"control character {ch!r} in a value", i)
                chars.append(ch)
                i += 1
            out.append(LabelMatcher(name, op, "".join(chars)))
            i = skip(i)
            if i == n:
                break
            if s[i] != ",":
                raise bad(f"expected ',' between matchers, found {s[i]!r}", i)
            i += 1
        return cls(tuple(out))

    def render(self) -> str:
        """The matchers as PromQL, comma-separated, without braces ('' when unscoped)."""
        return ",".join(m.render() for m in self.matchers)

    def select(self, metric: str) -> str:
        """``metric{matchers}`` (``metric`` alone when unscoped)."""
        sel = self.render()
        return f"{metric}{{{sel}}}" if sel else metric

    def select_names(self, metrics: tuple[str, ...]) -> str:
        """``{__name__=~"a|b",matchers}``: several metric names in one selector."""
        sel = self.render()
        return "{" + f'__name__=~"{"|".join(metrics)}"' + (f",{sel}" if sel else "") + "}"

    def __str__(self) -> str:
        return self.render()


def _as_selector(selector: str | Selector) -> Selector:
    return selector if isinstance(selector, Selector) else Selector.parse(selector)


@dataclass(frozen=True)
class PromQueries:
    """The PromQL of one source: its selector's matchers in every series selector."""

    worker_gauges: str
    worker_scraped: str
    prefill: str
    router_queued: str
    router_scraped: str
    latency: str
    qps: str

    @classmethod
    def build(cls, selector: Selector, window: str) -> PromQueries:
        """The seven queries for ``selector`` and the ``rate`` window ``window`` (``4s``)."""
        sel = selector
        return cls(
            worker_gauges=sel.select_names((names.WORKER_RUNNING, names.WORKER_WAITING, names.WORKER_MAX_BATCH)),
            worker_scraped=f"timestamp({sel.select(names.WORKER_RUNNING)})",
            prefill=f"rate({sel.select(names.WORKER_PREFILL_BUSY)}[{window}])",
            router_queued=sel.select(names.ROUTER_QUEUED),
            router_scraped=f"timestamp({sel.select(names.ROUTER_QUEUED)})",
            latency=sel.select_names((names.ROUTER_TTFT + "_bucket", names.ROUTER_E2E + "_bucket")),
            qps=f"sum(rate({sel.select(names.ROUTER_REQUESTS)}[{window}]))")


# -- the client --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PromSeries:
    """One series of a query result: its labels (``__name__`` included when Prometheus keeps it)
    and its points, Unix seconds and values (NaN/±inf as Prometheus sent them)."""

    labels: Mapping[str, str]
    ts_s: FloatArray
    value: FloatArray

    @property
    def key(self) -> frozenset[tuple[str, str]]:
        """The series' identity without its metric name (what ``timestamp``/``rate`` keep)."""
        return frozenset((k, v) for k, v in self.labels.items() if k != "__name__")


def _check_token(token: str, where: str) -> str:
    """``token`` when it is a usable bearer token (visible ASCII, no spaces); ConfigError otherwise."""
    if not token or any(not 33 <= ord(ch) <= 126 for ch in token) or len(token) > 16_384:
        raise ConfigError(f"{where}: the bearer token must be 1-16384 visible ASCII characters without "
                          "spaces or line breaks (fix: put only the token in the file)")
    return token


class _TokenFile:
    """A bearer token read from a file, re-read when the file's modification time changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._token = ""
        self.get()

    def get(self) -> str:
        with self._lock:
            try:
                st = os.stat(self.path)
                stamp = (st.st_mtime_ns, st.st_size)
                if stamp != self._stamp:
                    if st.st_size > 16_384 + 2:
                        raise ConfigError(f"{self.path}: token file of {st.st_size} bytes is too large "
                                          "(fix: put only the token in the file)")
                    with open(self.path, encoding="ascii", errors="strict") as fh:
                        token = fh.read(16_384 + 3).strip()
                    self._token, self._stamp = _check_token(token, self.path), stamp
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{self.path}: cannot read the Prometheus token file: {exc} "
                                  "(fix: pass a readable file holding only the token)") from exc
            return self._token


class PrometheusClient:
    """Blocking client of Prometheus' HTTP query API at ``base_url`` (``http://host:9090``)."""

    def __init__(self, base_url: str, timeout_s: float = 2.0, *, token: str | None = None,
                 token_file: str | os.PathLike[str] | None = None, tls: TlsOptions | None = None,
                 max_bytes: int = MAX_BYTES) -> None:
        check_url(base_url)  # InputError: not http(s), user info, bad port
        if timeout_s <= 0 or max_bytes <= 0:
            raise ValueError(f"timeout_s and max_bytes must be > 0, got {timeout_s!r}, {max_bytes!r}")
        if token is not None and token_file is not None:
            raise ConfigError("give the Prometheus bearer token once: as a token or as a token file, not both")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._token = _check_token(token, "Prometheus token") if token is not None else None
        self._token_file = _TokenFile(os.fspath(token_file)) if token_file is not None else None
        if tls is not None:
            if not self.base_url.startswith("https://"):
                raise ConfigError(f"TLS options (CA, client certificate) need an https:// Prometheus URL, "
                                  f"got {self.base_url!r} (fix: use https://, or drop the TLS flags)")
            tls.context()  # InputError naming a file that cannot be used: fail at start, not every cycle
        self.tls = tls
        if (token is not None or token_file is not None) and self.base_url.startswith("http://"):
            log.warning("Prometheus at %s: the bearer token is sent over plain http", self.base_url)

    def instant(self, query: str, at_s: float | None = None, *, timeout_s: float | None = None
                ) -> tuple[PromSeries, ...]:
        """Evaluate ``query`` at ``at_s`` (Unix s; Prometheus' now when None)."""
        params = {"query": query}
        if at_s is not None:
            params["time"] = _fmt_time(at_s)
        return self._query("/api/v1/query", params, timeout_s)

    def range(self, query: str, start_s: float, end_s: float, step_s: float, *,
              timeout_s: float | None = None) -> tuple[PromSeries, ...]:
        """Evaluate ``query`` at ``start_s, start_s + step_s, ... <= end_s`` (Unix s)."""
        if step_s <= 0 or end_s < start_s:
            raise ValueError(f"range needs step_s > 0 and end_s >= start_s, got {start_s}, {end_s}, {step_s}")
        return self._query("/api/v1/query_range", {"query": query, "start": _fmt_time(start_s),
                                                   "end": _fmt_time(end_s), "step": f"{step_s:g}"}, timeout_s)

    def _limits(self, timeout_s: float | None) -> HttpLimits:
        deadline = self.timeout_s if timeout_s is None else min(self.timeout_s, timeout_s)
        token = self._token_file.get() if self._token_file is not None else self._token
        return HttpLimits(deadline_s=deadline, max_bytes=self.max_bytes, token=token, tls=self.tls)

    def _query(self, path: str, params: dict[str, str], timeout_s: float | None) -> tuple[PromSeries, ...]:
        url = f"{self.base_url}{path}"
        query = params["query"]
        limits = self._limits(timeout_s)
        full = f"{url}?{urllib.parse.urlencode(params)}"
        try:
            reply = get(full, limits)
        except SourceUnavailable as exc:
            detail = str(exc).removeprefix(full).strip()  # the URL is named once, without the encoded query
            raise SourceUnavailable(f"Prometheus at {url} (query {query[:200]!r}): {detail} (fix: {_FIX})") from exc
        except InputError as exc:  # over the size cap, or TLS: permanent until the configuration changes
            detail = str(exc).removeprefix(full).strip()
            if exc.fix:
                detail = detail.removesuffix(f" (fix: {exc.fix})")
            raise InputError(f"{detail} (query {query[:200]!r})", path=url, fix=exc.fix) from exc
        if reply.status >= 500:
            raise SourceUnavailable(f"Prometheus at {url} answered HTTP {reply.status}: {_error_text(reply.body)} "
                                    f"(query {query[:200]!r}); retrying next cycle")
        if reply.status >= 400:
            fix = ("pass a valid bearer token (--prometheus-token-file)" if reply.status in (401, 403)
                   else "correct the PromQL, the metric names or --prometheus-selector")
            raise InputError(f"Prometheus rejected query {query[:200]!r} with HTTP {reply.status}: "
                             f"{_error_text(reply.body)}", path=url, fix=fix)
        if not 200 <= reply.status < 300:
            raise InputError(f"answered HTTP {reply.status} {reply.reason[:80]} to {query[:200]!r} (redirects are "
                             "not followed)", path=url, fix="point --prometheus-url at the server itself")
        try:
            doc = loads_json(reply.body, max_bytes=self.max_bytes)
        except UntrustedInput as exc:
            raise InputError(f"answer is not JSON within Ebb's bounds ({exc}): {reply.body[:80]!r}", path=url,
                             fix="point ebb at a Prometheus server, not another HTTP service") from exc
        except ValueError as exc:
            raise InputError(f"answer is not JSON: {reply.body[:200]!r}", path=url,
                             fix="point ebb at a Prometheus server, not another HTTP service") from exc
        return _parse(doc, url, query)


def _fmt_time(t_s: float) -> str:
    return f"{t_s:.3f}"


def _error_text(body: bytes) -> str:
    """Prometheus' ``error`` field (with ``errorType``) from an error body, else the raw text (≤ 300 chars)."""
    try:
        doc = loads_json(body)
    except ValueError:
        return body[:200].decode(errors="replace").strip() or "(empty body)"
    if isinstance(doc, dict) and "error" in doc:
        return f"{str(doc.get('errorType', 'error'))[:40]}: {str(doc['error'])[:300]}"
    return body[:200].decode(errors="replace")


def _parse(doc: Any, url: str, query: str) -> tuple[PromSeries, ...]:
    """The series of a ``status: success`` answer; InputError naming URL and field otherwise."""
    def bad(what: str) -> InputError:
        return InputError(f"malformed answer to {query[:200]!r}: {what}", path=url,
                          fix="check the URL points at Prometheus' HTTP API (v1)")

    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = str(doc.get("error", "no error given"))[:300] if isinstance(doc, dict) else "not an object"
        raise bad(f"status is not 'success' ({err})")
    data = doc.get("data")
    if not isinstance(data, dict) or "result" not in data:
        raise bad("no data.result")
    kind, result = data.get("resultType"), data["result"]
    warnings = doc.get("warnings")
    if isinstance(warnings, list) and warnings:
        for w in warnings[:MAX_WARNINGS_LOGGED]:
            log.warning("Prometheus at %s warns about %r: %s", url, query[:200], str(w)[:200])
        if len(warnings) > MAX_WARNINGS_LOGGED:
            log.warning("Prometheus at %s: %d more warnings not logged", url, len(warnings) - MAX_WARNINGS_LOGGED)
    if kind in ("vector", "matrix") and (not isinstance(result, list) or len(result) > MAX_SERIES):
        size = f"{len(result):,} series" if isinstance(result, list) else f"a {type(result).__name__}"
        raise InputError(f"answer to {query[:200]!r} holds {size}, not a list of at most {MAX_SERIES:,}",
                         path=url, fix="narrow --prometheus-selector to the serving fleet's targets")
    try:
        if kind == "scalar":
            return (_series({}, [result]),)
        if kind == "vector":
            return tuple(_series(r["metric"], [r["value"]]) for r in result)
        if kind == "matrix":
            return tuple(_series(r["metric"], r["values"]) for r in result)
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as exc:
        raise bad(f"unreadable {kind} ({type(exc).__name__}: {str(exc)[:120]})") from exc
    raise bad(f"resultType {str(kind)[:40]!r} is not scalar, vector or matrix")


def _series(metric: Any, pairs: Any) -> PromSeries:
    if not isinstance(metric, dict) or not isinstance(pairs, list):
        raise TypeError("a series needs a metric object and a list of [time, value] pairs")
    if any(not isinstance(p, list) or len(p) != 2 for p in pairs):
        raise ValueError("a point is not a [time, value] pair")
    ts = np.array([float(p[0]) for p in pairs], dtype=np.float64)
    vals = np.array([float(p[1]) for p in pairs], dtype=np.float64)
    return PromSeries(MappingProxyType({str(k): str(v) for k, v in metric.items()}), ts, vals)


def _duration(seconds: float) -> str:
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


Key = frozenset[tuple[str, str]]
"""A series' labels without ``__name__``: the same worker in every query."""


@dataclass
class _Grid:
    """The series of one metric name laid on the step grid: value and presence per step."""

    values: dict[Key, FloatArray] = field(default_factory=dict)
    present: dict[Key, npt.NDArray[np.bool_]] = field(default_factory=dict)

    def at(self, key: Key, k: int) -> float | None:
        """The value at step ``k`` (NaN stays NaN), None when the series has no point there."""
        pres = self.present.get(key)
        return float(self.values[key][k]) if pres is not None and pres[k] else None

    def keys_at(self, k: int) -> list[Key]:
        return [key for key, pres in self.present.items() if pres[k]]


class PrometheusSource:
    """A :class:`~ebb.sources.live.SignalSource` over a Prometheus server; see the module docstring."""

    def __init__(self, client: PrometheusClient, *, selector: str | Selector = DEFAULT_SELECTOR,
                 replica_label: str = "worker", step_s: float = 1.0, lookback_s: float = 30.0,
                 scrape_interval_s: float = 1.0, rate_window_s: float | None = None,
                 max_sample_age_s: float | None = None, settle_s: float | None = None,
                 read_timeout_s: float = 4.0, clock: Callable[[], float] = time.time) -> None:
        if step_s <= 0 or lookback_s < step_s or scrape_interval_s <= 0:
            raise ValueError(f"need step_s > 0, lookback_s >= step_s, scrape_interval_s > 0; got "
                             f"{step_s!r}, {lookback_s!r}, {scrape_interval_s!r}")
        if lookback_s / step_s + 2 > MAX_POINTS:
            raise ValueError(f"lookback_s/step_s = {lookback_s / step_s:g} exceeds Prometheus' {MAX_POINTS} points")
        if not (_LABEL_NAME.fullmatch(replica_label) and not replica_label.startswith("__")):
            raise ConfigError(f"replica label {replica_label[:80]!r} is not a Prometheus label name "
                              "(fix: e.g. worker, or pod when the scrape config sets it)")
        if read_timeout_s <= 0:
            raise ValueError(f"read_timeout_s must be > 0, got {read_timeout_s!r}")
        self.client = client
        self.selector = _as_selector(selector)
        self.replica_label = replica_label
        self.step_s = step_s
        self.lookback_s = lookback_s
        self.rate_window_s = rate_window_s if rate_window_s is not None else 4.0 * scrape_interval_s
        self.max_sample_age_s = max_sample_age_s if max_sample_age_s is not None else 3.0 * scrape_interval_s
        if self.rate_window_s < 2 * scrape_interval_s or self.max_sample_age_s <= 0:
            raise ValueError(f"rate_window_s must cover two scrapes ({2 * scrape_interval_s:g} s) and "
                             f"max_sample_age_s be > 0; got {self.rate_window_s!r}, {self.max_sample_age_s!r}")
        self.settle_s = settle_s if settle_s is not None else 1.25 * scrape_interval_s
        if self.settle_s < 0:
            raise ValueError(f"settle_s must be >= 0, got {self.settle_s!r}")
        self.read_timeout_s = read_timeout_s
        self.queries = PromQueries.build(self.selector, _duration(self.rate_window_s))
        self._clock = clock
        if not self.selector.matchers:
            log.warning("Prometheus at %s: queries are unscoped (empty selector): any target Prometheus scrapes "
                        "can add workers, queue or latency rows; pass a selector such as %s",
                        client.base_url, DEFAULT_SELECTOR)

    def read(self, since_s: float) -> LiveSignals:
        step = self.step_s
        q = self.queries
        end = math.floor((self._clock() - self.settle_s) / step) * step
        start = end - math.floor(self.lookback_s / step) * step
        grid = np.round(np.arange(start, end + step / 2, step), 6)
        n = len(grid)
        deadline = time.monotonic() + self.read_timeout_s

        def over() -> SourceUnavailable:
            return SourceUnavailable(f"Prometheus at {self.client.base_url}: one read's queries did not finish "
                                     f"within {self.read_timeout_s:g} s (read_timeout_s); retrying next cycle")

        def timed(call: Callable[[float], T]) -> T:
            """``call(budget)`` with what is left of this read's budget as the query's deadline."""
            budget = deadline - time.monotonic()
            if budget <= 0:
                raise over()
            try:
                return call(budget)
            except SourceUnavailable as exc:
                if time.monotonic() >= deadline:  # cut by this read's budget, not by the query's own
                    raise over() from exc
                raise

        def fetch(query: str, first: float = start, points: int = n) -> dict[str, _Grid]:
            return self._lay(timed(lambda budget: self.client.range(query, first, end, step, timeout_s=budget)),
                             first, points)

        gauges = fetch(q.worker_gauges)
        inputs = _Inputs(
            running=gauges.get(names.WORKER_RUNNING, _Grid()),
            waiting=gauges.get(names.WORKER_WAITING, _Grid()),
            max_batch=gauges.get(names.WORKER_MAX_BATCH, _Grid()),
            scraped=fetch(q.worker_scraped).get("", _Grid()),
            prefill=fetch(q.prefill).get("", _Grid()),
            queued=fetch(q.router_queued).get(names.ROUTER_QUEUED, _Grid()),
            router_scraped=fetch(q.router_scraped).get("", _Grid()))
        # One step before the grid: the baseline of the first step's bucket increase.
        hist = fetch(q.latency, start - step, n + 1)

        drops: Counter[str] = Counter()
        fleet = _fleet_steps(grid, inputs, self.max_sample_age_s, drops, since_s, self.replica_label)
        rows = _latency_rows(grid, hist, drops, since_s)
        self._log_drops(drops)
        keep = fleet.ok & (grid > since_s)
        fine = FineSignals(t_s=grid[keep], prefill_replicas=fleet.prefill[keep], slot_replicas=fleet.slot[keep],
                           queued=fleet.queued[keep], **_rows_after(rows, since_s))
        seen = int(fleet.seen[keep].min()) if keep.any() else None
        good = np.flatnonzero(fleet.ok)
        if len(good) == 0:
            return LiveSignals(fine=fine, replicas_seen=seen)
        k = int(good[-1])
        return LiveSignals(fine=fine, inflight_by_replica=fleet.inflight[k], total_qps=timed(lambda budget: self._qps(float(grid[k]), budget)),
                           queued=float(fleet.queued[k]), newest_sample_s=float(fleet.oldest_scrape_s[k]),
                           replicas_seen=seen)

    def _log_drops(self, drops: Counter[str]) -> None:
        # Absent data is the normal state of a fleet starting or gone: not worth a warning.
        for level, part in ((logging.DEBUG, {w: c for w, c in drops.items() if w in _ABSENT}),
                            (logging.WARNING, {w: c for w, c in drops.items() if w not in _ABSENT})):
            if part:
                log.log(level, "Prometheus at %s: dropped %s", self.client.base_url,
                        "; ".join(f"{c} × {why}" for why, c in sorted(part.items())))

    def _lay(self, series: tuple[PromSeries, ...], start: float, n: int) -> dict[str, _Grid]:
        out: dict[str, _Grid] = {}
        for s in series:
            finite = np.isfinite(s.ts_s)  # a NaN/inf time has no step (and would not cast to an index)
            idx = np.round((s.ts_s[finite] - start) / self.step_s)
            inside = (idx >= 0) & (idx < n)
            at = idx[inside].astype(np.int64)
            vals = np.full(n, np.nan)
            pres = np.zeros(n, dtype=np.bool_)
            vals[at] = s.value[finite][inside]
            pres[at] = True
            g = out.setdefault(s.labels.get("__name__", ""), _Grid())
            g.values[s.key], g.present[s.key] = vals, pres
        return out

    def _qps(self, at_s: float, timeout_s: float) -> float | None:
        res = self.client.instant(self.queries.qps, at_s, timeout_s=timeout_s)
        if not res or len(res[0].value) == 0:
            return None
        v = float(res[0].value[0])
        if not math.isfinite(v) or v < 0:
            log.warning("Prometheus at %s: dropped total_qps %r (not a finite rate >= 0)", self.client.base_url, v)
            return None
        return v


@dataclass(frozen=True)
class _Inputs:
    running: _Grid
    waiting: _Grid
    max_batch: _Grid
    scraped: _Grid
    prefill: _Grid
    queued: _Grid
    router_scraped: _Grid


@dataclass(frozen=True)
class _Fleet:
    ok: npt.NDArray[np.bool_]
    prefill: FloatArray
    slot: FloatArray
    queued: FloatArray
    oldest_scrape_s: FloatArray
    inflight: list[dict[str, float]]
    seen: npt.NDArray[np.int64]
    """Distinct replicas whose values were fresh and sane at each step."""


_NO_ROUTER, _NO_WORKER = "step without a router queue sample", "step without any worker sample"
_ABSENT = frozenset({_NO_ROUTER, _NO_WORKER})


def _fleet_steps(grid: FloatArray, x: _Inputs, max_age_s: float, drops: Counter[str],
                 since_s: float, label: str = "worker") -> _Fleet:
    """Per step: whether every input is fresh and sane, the fleet sums, the oldest scrape behind it,
    the replicas counted. Reasons for dropping are counted for the steps after ``since_s`` (the
    ones a caller asked for)."""
    n = len(grid)
    f = _Fleet(np.ones(n, dtype=np.bool_), np.zeros(n), np.zeros(n), np.zeros(n), np.full(n, np.inf),
               [{} for _ in range(n)], np.zeros(n, dtype=np.int64))
    for k in range(n):
        t = float(grid[k])
        problems: list[str] = []
        routers = x.router_scraped.keys_at(k)
        if not routers:
            problems.append(_NO_ROUTER)
        for key in routers:
            q, ts = x.queued.at(key, k), float(x.router_scraped.values[key][k])
            why = _age_problem(t, ts, max_age_s, "router queue")
            if why is not None:
                problems.append(why)
            elif q is None or not (math.isfinite(q) and q >= 0):
                problems.append("step with a router queue that is not a finite count >= 0")
            else:
                f.queued[k] += q
                f.oldest_scrape_s[k] = min(f.oldest_scrape_s[k], ts)
        workers = set(x.running.keys_at(k)) | set(x.max_batch.keys_at(k)) | set(x.scraped.keys_at(k))
        if not workers:
            problems.append(_NO_WORKER)
        for key in sorted(workers, key=sorted):
            why = _worker_problem(t, key, k, x, max_age_s, label)
            if why is not None:
                problems.append(why)
                continue
            name = dict(key)[label]
            if name in f.inflight[k]:
                problems.append(f"step with two series naming one replica ({label}={name!r})")
                continue
            r, m = x.running.at(key, k), x.max_batch.at(key, k)
            assert r is not None and m is not None
            f.prefill[k] += x.prefill.at(key, k) or 0.0
            f.slot[k] += r / m
            f.oldest_scrape_s[k] = min(f.oldest_scrape_s[k], float(x.scraped.values[key][k]))
            f.inflight[k][name] = r + (x.waiting.at(key, k) or 0.0)
            f.seen[k] += 1
        if problems:
            f.ok[k] = False
            if t > since_s:
                drops[problems[0]] += 1
    return f


def _worker_problem(t: float, key: Key, k: int, x: _Inputs, max_age_s: float, label: str = "worker") -> str | None:
    """Why worker ``key``'s values at step ``k`` cannot count, or None when they can."""
    if label not in dict(key):
        return f"step with a worker series without a {label!r} label"
    ts = x.scraped.at(key, k)
    if ts is None:
        return "step with a worker without a scrape timestamp"
    why = _age_problem(t, ts, max_age_s, "worker")
    if why is not None:
        return why
    r, m, w, p = x.running.at(key, k), x.max_batch.at(key, k), x.waiting.at(key, k), x.prefill.at(key, k)
    if r is None or m is None:
        return "step with a worker missing running or max_batch"
    if not (math.isfinite(r) and r >= 0):
        return "step with a worker running count that is not finite and >= 0"
    if not (math.isfinite(m) and m > 0):
        return "step with a worker max_batch that is not finite and > 0"
    if r > MAX_RUNNING_PER_SLOT * m:
        return f"step with a worker running > {MAX_RUNNING_PER_SLOT:g} x max_batch"
    if w is not None and not (math.isfinite(w) and w >= 0):
        return "step with a worker waiting count that is not finite and >= 0"
    if p is not None and not (math.isfinite(p) and 0 <= p <= MAX_PREFILL_SHARE):
        return f"step with a worker prefill share outside [0, {MAX_PREFILL_SHARE:g}]"
    return None


CLOCK_SLACK_S: Final = 0.001
"""``timestamp()`` has millisecond resolution: a scrape time up to this far after its step is the step's."""


def _age_problem(t: float, scraped_s: float, max_age_s: float, who: str) -> str | None:
    """Why a value used at step ``t`` and scraped at ``scraped_s`` cannot count, or None.

    Real Prometheus never uses a sample from after the step; a time after it (or NaN) would make
    ``newest_sample_s`` lie about freshness, so it drops the step like a stale one."""
    age = t - scraped_s
    if age > max_age_s:
        return f"step with a stale {who} sample"
    if not age >= -CLOCK_SLACK_S:
        return f"step with a {who} scrape time after the step (or not a time)"
    return None


def _bucket_bound(key: Key) -> float | None:
    """A histogram series' upper bound ``le`` (``+Inf`` → inf); None unless a number >= 0 or +inf."""
    try:
        le = float(dict(key).get("le", ""))
    except ValueError:
        return None
    return le if le >= 0 else None  # NaN and negatives fail the comparison


def _latency_rows(grid: FloatArray, hist: Mapping[str, _Grid], drops: Counter[str],
                  since_s: float) -> dict[str, FloatArray]:
    """Weighted completion rows from the raw cumulative histogram buckets (see module docstring)."""
    n = len(grid)
    cols: dict[str, list[float]] = {"t": [], "ttft": [], "e2e": [], "w": []}
    for metric, col, other in ((names.ROUTER_TTFT, "ttft", "e2e"), (names.ROUTER_E2E, "e2e", "ttft")):
        g = hist.get(metric + "_bucket", _Grid())
        inc: dict[float, FloatArray] = {}
        for key, vals in g.values.items():
            le = _bucket_bound(key)
            if le is None:
                drops["histogram series whose 'le' is not a number >= 0 or +Inf"] += 1
                continue
            pres = g.present[key]
            prev, cur = vals[:-1], vals[1:]
            both = pres[:-1] & pres[1:]
            bad = both & ~(np.isfinite(prev) & np.isfinite(cur) & (prev >= 0) & (cur >= 0))
            if (bad & (grid > since_s)).any():
                drops["histogram bucket step with a NaN, infinite or negative count"] += int((bad & (grid > since_s)).sum())
            # A drop is a counter reset: the new value is all that was counted since.
            d = np.where(cur >= prev, cur - prev, cur)
            inc.setdefault(le, np.zeros(n))[:] += np.where(both & ~bad, d, 0.0)
        below = np.zeros(n)
        for le in sorted(inc):
            count = inc[le] - below
            below = np.maximum(below, inc[le])
            for k in np.flatnonzero(count > 0):
                cols["t"].append(float(grid[k]))
                cols["w"].append(float(count[k]))
                cols[col].append(math.inf if math.isinf(le) else le * 1000.0)
                cols[other].append(math.nan)
    order = np.argsort(np.array(cols["t"]), kind="stable")
    return {c: np.array(v, dtype=np.float64)[order] for c, v in cols.items()}


def _rows_after(rows: Mapping[str, FloatArray], since_s: float) -> dict[str, FloatArray]:
    keep = rows["t"] > since_s
    return {"done_t_s": rows["t"][keep], "done_ttft_ms": rows["ttft"][keep],
            "done_e2e_ms": rows["e2e"][keep], "done_weight": rows["w"][keep]}
