"""PromQL of the Prometheus source: the selector that scopes every query, and the queries.

Scope (``selector``). Every series selector of every query carries the label matchers of
``selector`` (default :data:`DEFAULT_SELECTOR`, ``job=~"ebb|ebb-.+"``: the jobs of
:func:`ebb.testing.prometheus.write_file_sd_config` and of ``ebb demo --live``), so a target
outside it — any other pod Prometheus scrapes — cannot add a worker, a queue or latency rows.
``selector`` is a comma-separated list of matchers ``name="v"``, ``name!="v"``, ``name=~"re"``,
``name!~"re"`` (optionally in ``{}``; values in double or single quotes, escapes ``\\\\``, ``\\"``,
``\\'`` only; no ``__name__`` or other ``__`` label; at most 4,096 characters). It is parsed
(:meth:`Selector.parse`, :class:`~ebb.errors.ConfigError` with the fix otherwise) and re-rendered,
never pasted, so nothing but label matchers can reach the PromQL. An empty selector means
unscoped: allowed only when asked for explicitly, and logged as a WARNING (by
:class:`~ebb.sources.prometheus.PrometheusSource`). Regular expressions are RE2 and checked by
Prometheus: a bad one is an InputError at the first read (the controller fails static). Queries
per read (:class:`PromQueries`; ``W`` = ``rate_window_s``, ``S`` = the selector's matchers)::

    {__name__=~"ebb_worker_running|ebb_worker_waiting|ebb_worker_max_batch",S}   per-worker gauges
    timestamp(ebb_worker_running{S})            when each worker's value was really scraped
    rate(ebb_worker_prefill_busy_seconds_total{S}[W])   per-worker prefill busy share
    ebb_router_queued{S}   and   timestamp(ebb_router_queued{S})
    {__name__=~"ebb_router_ttft_seconds_bucket|ebb_router_e2e_seconds_bucket",S} raw cumulative
    sum(rate(ebb_router_requests_total{S}[W]))  instant, newest good step: ``total_qps``
                                                (answered requests/s, the arrival rate when steady)

Sums are taken by the source, not in PromQL, so every worker's value can be checked before it counts.

Engine mode (:class:`EngineQueries`: an inference engine's own series, e.g. vLLM's). ``G`` = the
replica label, ``job`` and ``instance`` (one scrape target). One query per metric name of the
profile (a signal with a V1 and a V0 name has two; the source takes, per target and step, the
first in the profile's order that answers). Names are checked against :data:`METRIC_NAME` and a
name's own label pairs (``name{k="v"}``) are re-rendered as matchers beside ``S``, so nothing from
an engines file can carry PromQL::

    sum by (G) (RUNNING{S})   and   min by (G) (timestamp(RUNNING{S}))   count, and scrape time
    sum by (G) (WAITING{S})   sum by (G) (MAX_CONCURRENCY{S})   max by (G) (KV_USAGE{S})
    sum by (G) (rate(BUSY_SECONDS{S}[W]))
    sum by (G, le) (TTFT_bucket{S})   sum by (G, le) (E2E_bucket{S})   raw cumulative, per target
    count by (G) (group by (G, M) (RUNNING{S}))   models per target (profiles with model labels M)
    up{S'}                             only when no running series answers (which error to raise)

``S'`` is ``S`` without its matchers on the profile's model labels (``model_name="llama"``, which
selects one model's series: ``up`` carries no model label, so keeping them would match no target).

The sums run within one target only (an engine's ``engine="0"``/``"1"`` or ``model_name`` series);
targets are never summed in PromQL, so two targets claiming one replica are still seen, and a
histogram's increase is taken per target (a target appearing with old counts adds nothing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Final, Literal, Protocol

from ebb.errors import ConfigError
from ebb.model import live as names

__all__ = ["DEFAULT_SELECTOR", "LABEL_NAME", "MAX_SELECTOR_CHARS", "METRIC_NAME", "EngineQueries", "LabelMatcher",
           "MatchOp", "MetricName", "PromQueries", "Selector", "as_selector", "check_label", "check_metric_name",
           "duration"]

DEFAULT_SELECTOR: Final = 'job=~"ebb|ebb-.+"'
"""The jobs Ebb's own Prometheus configs use: ``ebb`` (tests, file-SD) and ``ebb-router`` /
``ebb-worker`` / ``ebb-agent`` (``ebb demo --live``). Anchored, as every PromQL regex is."""
MAX_SELECTOR_CHARS: Final = 4096

_SELECTOR_FIX = ('write label matchers separated by commas, e.g. job="ebb",namespace="serving" '
                 '(operators = != =~ !~, values in double quotes, \\\\ and \\" the only escapes)')


# -- the selector ------------------------------------------------------------------------------
LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A Prometheus label name (``fullmatch``)."""
METRIC_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
"""A Prometheus metric name (``fullmatch``): no character that is special in PromQL or in an RE2 regex."""


def check_metric_name(name: str, where: str) -> str:
    """``name`` when it is a Prometheus metric name; ConfigError naming ``where`` otherwise."""
    if not (isinstance(name, str) and len(name) <= 200 and METRIC_NAME.fullmatch(name)):
        raise ConfigError(f"{where}: {str(name)[:80]!r} is not a Prometheus metric name "
                          "(fix: letters, digits, '_' and ':' only, not starting with a digit)")
    return name
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
            m = LABEL_NAME.match(s, i)
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


def as_selector(selector: str | Selector) -> Selector:
    """``selector`` itself, or parsed by :meth:`Selector.parse` (ConfigError when it is not matchers)."""
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


@dataclass(frozen=True)
class EngineQueries:
    """The PromQL of engine mode (see the module docstring): one query per profile name, in the
    profile's preference order, per signal."""

    running: tuple[str, ...]
    scraped: tuple[str, ...]
    """``min by (G) (timestamp(...))`` of each running name: the target's scrape time."""
    waiting: tuple[str, ...]
    max_concurrency: tuple[str, ...]
    kv: tuple[str, ...]
    busy: tuple[str, ...]
    ttft: tuple[str, ...]
    e2e: tuple[str, ...]
    up: str
    models: tuple[str, ...] = ()
    """``count by (G) (group by (G, M) (RUNNING))`` per running name: how many models each target serves
    (empty for a profile without model labels)."""

    @classmethod
    def build(cls, selector: Selector, window: str, *, replica_label: str, running: Sequence[MetricName],
              waiting: Sequence[MetricName], max_concurrency: Sequence[MetricName] = (),
              kv: Sequence[MetricName] = (), busy: Sequence[MetricName] = (), ttft: Sequence[MetricName] = (),
              e2e: Sequence[MetricName] = (), model_labels: Sequence[str] = ()) -> EngineQueries:
        """The queries for these metric names (each checked by :func:`check_metric_name`; a name's own
        label pairs join the selector's matchers, re-rendered like them); ``model_labels`` (checked by
        :func:`check_label`) add the models query and are left out of ``up``'s matchers."""
        if not LABEL_NAME.fullmatch(replica_label):
            raise ConfigError(f"replica label {replica_label[:80]!r} is not a Prometheus label name")
        g = ",".join(dict.fromkeys((replica_label, "job", "instance")))
        labels = ",".join(dict.fromkeys(check_label(x) for x in model_labels))

        def sel(m: MetricName, suffix: str = "") -> str:
            name = check_metric_name(m.name + suffix, "engine profile")
            own = tuple(LabelMatcher(check_label(k), "=", v) for k, v in m.matchers)
            return Selector(own + selector.matchers).select(name)

        return cls(
            running=tuple(f"sum by ({g}) ({sel(m)})" for m in running),
            scraped=tuple(f"min by ({g}) (timestamp({sel(m)}))" for m in running),
            waiting=tuple(f"sum by ({g}) ({sel(m)})" for m in waiting),
            max_concurrency=tuple(f"sum by ({g}) ({sel(m)})" for m in max_concurrency),
            kv=tuple(f"max by ({g}) ({sel(m)})" for m in kv),
            busy=tuple(f"sum by ({g}) (rate({sel(m)}[{window}]))" for m in busy),
            ttft=tuple(f"sum by ({g},le) ({sel(m, '_bucket')})" for m in ttft),
            e2e=tuple(f"sum by ({g},le) ({sel(m, '_bucket')})" for m in e2e),
            up=Selector(tuple(x for x in selector.matchers if x.name not in model_labels)).select("up"),
            models=tuple(f"count by ({g}) (group by ({g},{labels}) ({sel(m)}))" for m in running) if labels else ())


class MetricName(Protocol):
    """A metric name with the label pairs its samples must carry (``name{k="v"}`` in a profile)."""

    @property
    def name(self) -> str: ...
    @property
    def matchers(self) -> tuple[tuple[str, str], ...]: ...


def check_label(name: str) -> str:
    """``name`` when it is a label name a profile may match on (not ``__``-reserved); ConfigError otherwise."""
    if not (LABEL_NAME.fullmatch(name) and not name.startswith("__")):
        raise ConfigError(f"engine profile: {name[:80]!r} is not a label name a profile may match on")
    return name


def duration(seconds: float) -> str:
    """A PromQL duration: whole seconds as ``4s``, else milliseconds (``1500ms``), at least ``1ms``."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
