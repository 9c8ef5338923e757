"""Metrics-gate queries measured on Prometheus for the live controller's canary guard.

A gate's ``query`` is PromQL evaluated as an instant query; the measurement is the value of its
single series (Argo Rollouts' ``result``). No series, several series or a NaN → no data (the gate
counts it inconclusive — never a pass); an unreachable server raises
:class:`~ebb.errors.SourceUnavailable` (the controller counts it as no data too, and logs it).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ebb.sources.prometheus import PrometheusClient

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
