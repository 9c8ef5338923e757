"""The vendored KEDA proto is upstream's, and the committed descriptor is compiled from it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from ebb.actuate import keda_pb

UPSTREAM_SHA256 = "0e1c84a7ee1d4745eefe1fd7d16e2cbbd02763dc0cfc4c4c37d92d026deb9253"
"""sha256 of kedacore/keda ``pkg/scalers/externalscaler/externalscaler.proto`` at 82ac584 (keda_pb/README.md)."""


def test_the_vendored_proto_is_the_upstream_file_unchanged() -> None:
    assert hashlib.sha256(keda_pb.PROTO.read_bytes()).hexdigest() == UPSTREAM_SHA256


def test_the_committed_descriptor_is_what_protoc_compiles_from_the_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools compiles the proto; a dev dependency CI installs")
    src = Path(keda_pb.__file__).parents[3]
    out = tmp_path / "externalscaler.desc"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"--descriptor_set_out={out}",
                    "ebb/actuate/keda_pb/externalscaler.proto"], check=True, cwd=src)
    assert out.read_bytes() == keda_pb.DESCRIPTOR_SET.read_bytes()


def test_every_message_of_the_service_is_built() -> None:
    pytest.importorskip("google.protobuf", reason="the keda extra (protobuf) is a dev dependency")
    m = keda_pb.messages()
    assert m.GetMetricsResponse(metricValues=[m.MetricValue(metricName="x", metricValueFloat=2.0)]).metricValues[0] \
        .metricValueFloat == 2.0
    assert m.ScaledObjectRef.FromString(m.ScaledObjectRef(name="a", scalerMetadata={"k": "v"})
                                        .SerializeToString()).scalerMetadata["k"] == "v"
