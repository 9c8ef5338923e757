"""Prometheus' HTTP query API: :class:`PrometheusClient` and the :class:`PromSeries` it returns.

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
"-Inf" included) and handed over unfiltered; the source
(:class:`~ebb.sources.prometheus.PrometheusSource`) filters.

Records are logged on the logger ``ebb.sources.prometheus`` (the source's), so one logger carries
every line about one Prometheus server: at most :data:`MAX_WARNINGS_LOGGED` (3) of an answer's
``warnings``, and a bearer token sent over plain http.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ebb.errors import ConfigError, InputError, SourceUnavailable
from ebb.sources.http_get import HttpLimits, TlsOptions, check_url, get
from ebb.untrusted import UntrustedInput, loads_json

__all__ = ["MAX_BYTES", "MAX_SERIES", "MAX_WARNINGS_LOGGED", "PromSeries", "PrometheusClient"]

log = logging.getLogger("ebb.sources.prometheus")  # the source's logger, as before the split
FloatArray = npt.NDArray[np.float64]

MAX_SERIES: Final = 50_000
"""Series accepted in one answer: a 1,000-worker fleet's gauges are 3,000; more is a selector that
matches far too much (or a hostile server), refused as an InputError before any is laid out."""
MAX_BYTES: Final = 16 * 1024 * 1024
"""Default body cap of one answer (bytes)."""
MAX_WARNINGS_LOGGED: Final = 3
"""Prometheus ``warnings`` logged per answer (each cut to 200 characters); the rest are counted."""

_FIX = "check that Prometheus runs and that the URL given to ebb (--prometheus-url) points at it"


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
