"""Which URLs the agent polls: the rule for every endpoint URL, and the router's ``/workers`` list.

Guarantees:

* :func:`check_endpoint` accepts exactly the URLs :func:`ebb.sources.http_get.check_url` accepts
  (http or https, a host, no empty or zero port, no user info, no fragment) that also carry no query
  string and no ``#`` at all — the agent appends ``/stats?since=N`` to it, so either would steer that
  GET elsewhere.
  The URL comes back without trailing ``/``. Anything else raises :class:`~ebb.errors.InputError`
  quoting at most 200 characters of it.
* :func:`parse_workers` reads a ``GET /workers`` answer (a JSON list of objects with a ``url``) of
  at most :data:`MAX_WORKERS_BYTES` (4 MiB) and 64 levels of nesting. A malformed answer as a whole
  raises :class:`~ebb.errors.InputError` (the caller keeps its current endpoints); a single bad
  entry is refused with its reason and the rest are used. Nothing else escapes (fuzz-tested).
* :func:`plan` caps the polled set at ``max_endpoints`` (default :data:`MAX_ENDPOINTS` = 256):
  fixed endpoints first, then the listed ones already polled, then new ones in listed order; the
  excess is returned so the caller can say what it refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from ebb.sources.agent_wire import brief
from ebb.errors import InputError
from ebb.sources.http_get import check_url
from ebb.untrusted import UntrustedInput, loads_json

__all__ = ["MAX_ENDPOINTS", "MAX_WORKERS_BYTES", "WorkerList", "check_endpoint", "parse_workers", "plan"]

MAX_ENDPOINTS: Final = 256
"""Endpoints one agent polls at most (static, router and discovered together). Why 256: one socket
each plus the server's 256 connections stays well under the default limit of 1,024 open files; and
each endpoint costs 10 GETs/s — measured on a 2-core host, one agent closes every bucket complete
for 32 endpoints, skips 20 % of them at 128 and most at 256, so a fleet larger than a node's needs
one agent per node (the DaemonSet), never one agent for all. The cap bounds what a router's list
can make the agent do; it is not a capacity target."""
MAX_WORKERS_BYTES: Final = 4 * 1024 * 1024
"""Largest ``/workers`` answer read (4 MiB: about 20,000 entries of 200 bytes)."""
_FIX = "use http://HOST:PORT or https://HOST:PORT, optionally with a /PATH, without a query or #"


def check_endpoint(url: str) -> str:
    """``url`` without a trailing ``/`` when it is a URL the agent may poll; InputError otherwise."""
    check_url(url)
    if "?" in url or "#" in url:  # check_url lets an empty fragment ("...#") through
        raise InputError(f"endpoint URL with a query string or fragment: {url[:200]!r}", fix=_FIX)
    return url.rstrip("/")


@dataclass(frozen=True)
class WorkerList:
    """One ``/workers`` answer: the usable URLs (deduplicated, in listed order) and the refusals."""

    urls: tuple[str, ...]
    refused: tuple[str, ...] = ()
    """One reason per refused entry (the entry quoted, cut to 80 characters)."""


def parse_workers(raw: bytes | str, src: str) -> WorkerList:
    """The endpoints a router lists at ``src``; see the module docstring for what is refused."""
    try:
        listed = loads_json(raw, max_bytes=MAX_WORKERS_BYTES)
    except UntrustedInput as exc:
        raise InputError(f"/workers answer refused: {exc}", path=src, fix="point --endpoints-from at an Ebb "
                         "router") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise InputError(f"/workers answer is not JSON: {str(exc)[:200]}", path=src,
                         fix="point --endpoints-from at an Ebb router") from exc
    if not isinstance(listed, list):
        raise InputError(f"/workers answer is {brief(listed)}, expected a list of {{\"url\": ...}} objects",
                         path=src, fix="point --endpoints-from at an Ebb router")
    urls: dict[str, None] = {}
    refused: list[str] = []
    for i, entry in enumerate(listed):
        url = entry.get("url") if isinstance(entry, dict) else None
        if not isinstance(url, str):
            refused.append(f"entry {i}: {brief(entry)} has no string 'url'")
            continue
        try:
            urls.setdefault(check_endpoint(url), None)
        except InputError as exc:
            refused.append(f"entry {i}: {str(exc)[:300]}")
    return WorkerList(tuple(urls), tuple(refused))


def plan(fixed: Sequence[str], polled: Iterable[str], listed: Sequence[str],
         max_endpoints: int = MAX_ENDPOINTS) -> tuple[list[str], list[str]]:
    """(endpoints to poll, listed endpoints refused for the cap), as described in the module docstring."""
    want: dict[str, None] = dict.fromkeys(fixed)
    now = set(polled)
    for u in [u for u in listed if u in now] + [u for u in listed if u not in now]:
        if u in want:
            continue
        if len(want) >= max_endpoints:
            break
        want[u] = None
    over = [u for u in listed if u not in want]
    return list(want), over
