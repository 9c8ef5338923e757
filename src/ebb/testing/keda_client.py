"""Test harness: KEDA's side of the external scaler, with a client generated from the upstream proto.

:func:`generated_stubs` runs ``grpc_tools.protoc`` (a dev dependency) on the vendored upstream
``externalscaler.proto`` into a fresh directory and imports the ``_pb2`` / ``_pb2_grpc`` modules it
writes: the client is generated from the proto, independently of the server's committed messages.

:class:`KedaEmulator` plays KEDA's operator and the HPA it owns for one ScaledObject, as KEDA 2.x
does for an ``external`` trigger: ``GetMetricSpec`` once, then per sync ``GetMetrics`` → the HPA
(:class:`ebb.sim.baselines.hpa_controller.HpaController`, the conformance-tested emulator: an
External metric with an ``AverageValue`` target, the given tolerance and behavior) → ``/scale``.
A failed call counts toward ``fallback.failureThreshold``; past it, ``behavior:
currentReplicasIfHigher`` sets ``max(current, fallback.replicas)`` (KEDA's fallback.go).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import ebb.actuate.keda_pb as keda_pb
from ebb.sim.baselines.hpa_behavior import Behavior
from ebb.sim.baselines.hpa_controller import HpaConfig, HpaController, MetricSpec
from ebb.sim.handed_off import DOCUMENTED_BEHAVIOR

__all__ = ["DOCUMENTED_BEHAVIOR", "KedaEmulator", "generated_stubs"]

PROTO = keda_pb.PROTO

_stubs: tuple[ModuleType, ModuleType] | None = None


def generated_stubs() -> tuple[ModuleType, ModuleType]:
    """(``externalscaler_pb2``, ``externalscaler_pb2_grpc``) generated now from the upstream proto."""
    global _stubs
    if _stubs is None:
        out = Path(tempfile.mkdtemp(prefix="keda-stubs-"))
        (out / "kedaclient").mkdir()
        (out / "kedaclient" / "__init__.py").write_text("")
        (out / "kedaclient" / "externalscaler.proto").write_bytes(PROTO.read_bytes())
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}",
                        f"--grpc_python_out={out}", "kedaclient/externalscaler.proto"], check=True)
        sys.path.insert(0, str(out))
        _stubs = (importlib.import_module("kedaclient.externalscaler_pb2"),
                  importlib.import_module("kedaclient.externalscaler_pb2_grpc"))
    return _stubs


@dataclass
class SyncResult:
    """One KEDA/HPA sync: the replicas it set (None: left as they were) and why."""

    replicas: int | None
    reason: str


class KedaEmulator:
    """KEDA + its HPA for one ScaledObject (module docstring). ``channel`` is a ``grpc.Channel``."""

    def __init__(self, channel: Any, *, name: str, namespace: str, metadata: dict[str, str], min_replicas: int,
                 max_replicas: int, fallback_replicas: int, failure_threshold: int = 3, tolerance: float = 0.1,
                 behavior: Behavior = DOCUMENTED_BEHAVIOR) -> None:
        pb2, pb2_grpc = generated_stubs()
        self._pb2 = pb2
        self.stub = pb2_grpc.ExternalScalerStub(channel)
        self.ref = pb2.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata)
        self._hpa_config = HpaConfig(metric=MetricSpec.external_average_value(1000), min_replicas=min_replicas,
                                     max_replicas=max_replicas, tolerance=tolerance, behavior=behavior,
                                     downscale_stabilization_s=0)
        self.hpa: HpaController | None = None
        """The HPA KEDA creates from the first GetMetricSpec (its AverageValue target)."""
        self.fallback_replicas, self.failure_threshold = fallback_replicas, failure_threshold
        self.failures = 0
        self.metric_name: str | None = None
        self.target_milli = 0

    def sync(self, now_s: float, spec_replicas: int, timeout_s: float = 2.0) -> SyncResult:
        """One sync at ``now_s`` of a Deployment at ``spec_replicas``: the replicas to write, or None."""
        try:
            if self.metric_name is None:
                spec = self.stub.GetMetricSpec(self.ref, timeout=timeout_s).metricSpecs[0]
                self.metric_name = spec.metricName
                self.target_milli = round(1000 * (spec.targetSizeFloat or spec.targetSize))
                self.hpa = HpaController(replace(self._hpa_config,
                                                 metric=MetricSpec.external_average_value(self.target_milli)))
            values = self.stub.GetMetrics(self._pb2.GetMetricsRequest(scaledObjectRef=self.ref,
                                                                     metricName=self.metric_name),
                                          timeout=timeout_s).metricValues
        except Exception as exc:  # grpc.RpcError and friends: KEDA counts a failure
            self.failures += 1
            if self.failures < self.failure_threshold:
                return SyncResult(None, f"error {self.failures}: {exc}")
            want = max(spec_replicas, self.fallback_replicas)  # behavior: currentReplicasIfHigher
            return SyncResult(want if want != spec_replicas else None, "fallback")
        self.failures = 0
        value = values[0].metricValueFloat or float(values[0].metricValue)
        # KEDA reports the value in milli-units; the HPA divides by the AverageValue target per replica.
        per_pod_milli = round(1000 * value)
        assert self.hpa is not None
        decision = self.hpa.reconcile(now_s, spec_replicas, spec_replicas, (), {},
                                      external_values_milli=(per_pod_milli,))
        want = decision.desired_replicas
        return SyncResult(want if want != spec_replicas else None, decision.reason)
