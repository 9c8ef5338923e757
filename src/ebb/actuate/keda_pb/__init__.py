"""KEDA's external-scaler messages, built from the vendored proto's compiled descriptor (README.md here).

:func:`messages` loads ``externalscaler.desc`` (a ``FileDescriptorSet`` compiled from
``externalscaler.proto`` by ``grpc_tools.protoc``) into a *private* descriptor pool and returns the
message classes. Private, so a process that also imports a client generated from the same proto
(a test playing KEDA, another library) holds both without a duplicate-symbol clash; and no protobuf
gencode is committed, so any protobuf >= 4.21 runtime reads it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

from ebb.errors import require_extra

__all__ = ["DESCRIPTOR_SET", "PROTO", "messages"]

PROTO = Path(__file__).with_name("externalscaler.proto")
DESCRIPTOR_SET = Path(__file__).with_name("externalscaler.desc")
MESSAGES = ("ScaledObjectRef", "IsActiveResponse", "GetMetricSpecResponse", "MetricSpec", "GetMetricsRequest",
            "GetMetricsResponse", "MetricValue")


@functools.cache
def messages() -> SimpleNamespace:
    """The proto's message classes by name (``messages().GetMetricsResponse``); extra ``keda``."""
    descriptor_pb2 = require_extra("google.protobuf.descriptor_pb2", "keda")
    pool_mod = require_extra("google.protobuf.descriptor_pool", "keda")
    factory = require_extra("google.protobuf.message_factory", "keda")
    files = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_SET.read_bytes())
    pool = pool_mod.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    return SimpleNamespace(**{name: factory.GetMessageClass(pool.FindMessageTypeByName(f"externalscaler.{name}"))
                              for name in MESSAGES})
