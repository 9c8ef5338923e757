"""Metrics-gate queries measured for the live controller's canary guard: when, how, and on Prometheus.

**Measured only when asked.** While the policy names ``gate_queries()`` (a gated step is in flight),
:func:`gated_observation` measures each once per cycle through the controller's ``gate_probe`` into
``Observation.gate_values`` (span ``ebb.gate.measure`` per query); otherwise, or without a probe,
nothing is queried and the observation is returned as it is. A query whose probe raises an
:class:`~ebb.errors.EbbError`, or answers None, is NaN (no data: the gate counts it inconclusive —
never a pass), logged as a warning.

:func:`prometheus_gate_probe` is the probe on Prometheus. A gate's ``query`` is PromQL evaluated as
an instant query; the measurement is the value of its single series (Argo Rollouts' ``result``). No
series, several series or a NaN → no data; ±inf is a measurement, passed on as is (the gate's
condition judges it). An unreachable server raises :class:`~ebb.errors.SourceUnavailable`, a
rejected query, token or answer :class:`~ebb.errors.InputError` (either counted as no data, and
logged).

The probe uses the ``client`` it is given, so it shares the signal source's bearer token, TLS
options, total deadline and size cap (by default 2 s and 16 MiB) and its 64-level JSON depth cap
(:class:`~ebb.sources.prometheus_api.PrometheusClient`). The query is sent as the gates file
writes it: the source's ``--prometheus-selector`` is *not* added (a gate is arbitrary PromQL, which
Ebb does not rewrite), so scope each gate's own series selectors there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace

from ebb.errors import EbbError
from ebb.model.observation import Observation
from ebb.model.spans import Spans
from ebb.sources.prometheus_api import PrometheusClient

__all__ = ["GateProbe", "gated_observation", "prometheus_gate_probe"]

log = logging.getLogger("ebb.live.controller")

GateProbe = Callable[[str], float | None]
"""Measures one metrics-gate query; None = no data."""


def gated_observation(obs: Observation, queries: tuple[str, ...], probe: GateProbe | None,
                      spans: Spans) -> Observation:
    """``obs`` with each of the policy's gate ``queries`` measured once (only while it names any)."""
    if not queries or probe is None:
        return obs
    return replace(obs, gate_values=_measured(probe, queries, spans))


def _measured(probe: GateProbe, queries: tuple[str, ...], spans: Spans) -> dict[str, float]:
    """One measurement of every gate query; a failed query is no data (NaN)."""
    values: dict[str, float] = {}
    for q in queries:
        with spans.layer("ebb.gate.measure", **{"ebb.gate.query": q}) as gs:
            try:
                v = probe(q)
            except EbbError as exc:
                log.warning("gate query %r failed: %s (counted as no data)", q, exc)
                v = None
            values[q] = math.nan if v is None else float(v)
            gs.set(**{"ebb.gate.value": v})
    return values


def prometheus_gate_probe(client: PrometheusClient) -> GateProbe:
    """A probe for :class:`~ebb.live.controller.Controller`'s ``gate_probe``."""

    def probe(query: str) -> float | None:
        series = client.instant(query)
        if len(series) != 1 or len(series[0].value) == 0:
            return None
        v = float(series[0].value[-1])
        return None if math.isnan(v) else v

    return probe
