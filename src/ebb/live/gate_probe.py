"""Metrics-gate queries measured on Prometheus for the live controller's canary guard.

A gate's ``query`` is PromQL evaluated as an instant query; the measurement is the value of its
single series (Argo Rollouts' ``result``). No series, several series or a NaN → no data (the gate
counts it inconclusive — never a pass); ±inf is a measurement, passed on as is (the gate's
condition judges it). An unreachable server raises :class:`~ebb.errors.SourceUnavailable`, a
rejected query, token or answer :class:`~ebb.errors.InputError` (the controller counts either as
no data, and logs it).

The probe uses the ``client`` it is given, so it shares the signal source's bearer token, TLS
options, total deadline and size cap (by default 2 s and 16 MiB) and its 64-level JSON depth cap
(:class:`~ebb.sources.prometheus_api.PrometheusClient`). The query is sent as the gates file
writes it: the source's ``--prometheus-selector`` is *not* added (a gate is arbitrary PromQL, which
Ebb does not rewrite), so scope each gate's own series selectors there.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ebb.sources.prometheus_api import PrometheusClient

__all__ = ["prometheus_gate_probe"]


def prometheus_gate_probe(client: PrometheusClient) -> Callable[[str], float | None]:
    """A probe for :class:`~ebb.live.controller.Controller`'s ``gate_probe``."""

    def probe(query: str) -> float | None:
        series = client.instant(query)
        if len(series) != 1 or len(series[0].value) == 0:
            return None
        v = float(series[0].value[-1])
        return None if math.isnan(v) else v

    return probe
