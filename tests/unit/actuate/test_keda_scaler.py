"""KEDA's external scaler served from the hand-off board, called by a client generated from the upstream proto."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

grpc = pytest.importorskip("grpc", reason="the keda extra (grpcio) is a dev dependency; CI installs it")
pytest.importorskip("grpc_tools", reason="grpcio-tools generates the test's client; CI installs it")

from ebb.decide.handoff import HandoffBoard  # noqa: E402
from ebb.actuate.keda_scaler import METRIC_NAME, KedaScalerServer, match_target  # noqa: E402
from ebb.errors import ConfigError  # noqa: E402
from ebb.testing.keda_client import KedaEmulator, generated_stubs  # noqa: E402

T = "serving/llm"


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def board(clock: Clock) -> HandoffBoard:
    b = HandoffBoard(stale_after_s=30.0, clock=clock)
    b.spec_seen(T, 4)
    return b


def serve(board: HandoffBoard, **kw: object) -> Iterator[tuple[KedaScalerServer, object]]:
    server = KedaScalerServer(board, classes={T: "chat"}, **kw)  # type: ignore[arg-type]
    address = server.start("127.0.0.1:0")
    channel = grpc.insecure_channel(address)
    try:
        yield server, generated_stubs()[1].ExternalScalerStub(channel)
    finally:
        channel.close()
        server.stop(0)


@pytest.fixture
def stub(board: HandoffBoard) -> Iterator[object]:
    for _, s in serve(board):
        yield s


def ref(**meta: str) -> object:
    pb2, _ = generated_stubs()
    return pb2.ScaledObjectRef(name="llm-scaler", namespace="serving", scalerMetadata={"deployment": "llm", **meta})


def metrics(stub: object, **meta: str) -> float:
    pb2, _ = generated_stubs()
    got = stub.GetMetrics(pb2.GetMetricsRequest(scaledObjectRef=ref(**meta), metricName=METRIC_NAME),  # type: ignore[attr-defined]
                          timeout=5).metricValues
    assert len(got) == 1 and got[0].metricName == METRIC_NAME and got[0].metricValue == int(got[0].metricValueFloat)
    return float(got[0].metricValueFloat)


def test_the_metric_spec_is_one_metric_with_a_target_of_one_replica(stub: object) -> None:
    spec = stub.GetMetricSpec(ref(), timeout=5).metricSpecs  # type: ignore[attr-defined]
    assert [(s.metricName, s.targetSize, s.targetSizeFloat) for s in spec] == [(METRIC_NAME, 1, 1.0)]


def test_get_metrics_answers_the_decided_replicas_and_follows_each_hand_off(stub: object, board: HandoffBoard) -> None:
    assert metrics(stub) == 4
    board.hand_off(T, 2)
    assert metrics(stub) == 2
    assert stub.IsActive(ref(), timeout=5).result is True  # type: ignore[attr-defined]


def test_is_active_is_false_only_when_ebb_would_scale_to_zero(stub: object, board: HandoffBoard) -> None:
    board.hand_off(T, 0)
    assert stub.IsActive(ref(), timeout=5).result is False  # type: ignore[attr-defined]


def test_the_deployment_defaults_to_the_scaled_objects_name() -> None:
    assert match_target("llm", "serving", {}).target == T
    assert match_target("x", "serving", {"namespace": "other", "deployment": "d"}).target == "other/d"


@pytest.mark.parametrize(("meta", "code"), [({"deployment": "unknown"}, "NOT_FOUND"),
                                            ({"workloadClass": "batch"}, "FAILED_PRECONDITION")])
def test_a_target_ebb_does_not_scale_as_named_is_an_error_keda_counts(stub: object, meta: dict[str, str],
                                                                      code: str) -> None:
    with pytest.raises(grpc.RpcError) as err:
        metrics(stub, **meta)
    assert err.value.code().name == code


def test_a_target_whose_data_is_stale_is_unavailable_so_kedas_fallback_holds(stub: object, clock: Clock) -> None:
    clock.now = 31.0
    with pytest.raises(grpc.RpcError) as err:
        metrics(stub)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_with_a_token_only_a_trigger_that_carries_it_gets_an_answer(board: HandoffBoard) -> None:
    for _, s in serve(board, token="s3cret"):
        assert metrics(s, tokenFromEnv="s3cret") == 4
        for bad in ({}, {"tokenFromEnv": "wrong"}):
            with pytest.raises(grpc.RpcError) as err:
                metrics(s, **bad)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_stream_is_active_sends_the_answer_at_once_then_each_change(stub: object, board: HandoffBoard) -> None:
    stream = stub.StreamIsActive(ref(), timeout=10)  # type: ignore[attr-defined]
    assert next(stream).result is True
    board.hand_off(T, 0)
    assert next(stream).result is False
    stream.cancel()


def test_stream_metric_spec_sends_the_spec_at_once(stub: object) -> None:
    stream = stub.StreamMetricSpec(ref(), timeout=10)  # type: ignore[attr-defined]
    assert next(stream).metricSpecs[0].metricName == METRIC_NAME
    stream.cancel()


def test_an_oversized_request_is_refused_and_the_server_keeps_serving(stub: object) -> None:
    with pytest.raises(grpc.RpcError) as err:
        metrics(stub, junk="x" * 70_000)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert metrics(stub) == 4


def test_the_hpa_applies_ebbs_number_as_is_outside_its_tolerance(board: HandoffBoard) -> None:
    for server, _ in serve(board):
        with grpc.insecure_channel(server.address) as channel:
            keda = KedaEmulator(channel, name="llm-scaler", namespace="serving", metadata={"deployment": "llm"},
                                min_replicas=1, max_replicas=20, fallback_replicas=1)
            board.hand_off(T, 2)
            assert keda.sync(0.0, 4).replicas == 2
            board.hand_off(T, 9)
            assert keda.sync(15.0, 2).replicas == 9
            board.hand_off(T, 11)
            assert keda.sync(30.0, 10).replicas is None  # 11/10 is within the HPA's 10 % tolerance


def test_mismatched_tls_flags_are_refused_before_anything_listens(board: HandoffBoard, tmp_path: object) -> None:
    with pytest.raises(ConfigError, match="--keda-cert and --keda-key go together"):
        KedaScalerServer(board, cert_file="c.pem")
    with pytest.raises(ConfigError, match="readable PEM"):
        KedaScalerServer(board, cert_file="/nonexistent/c.pem", key_file="/nonexistent/k.pem")
    with pytest.raises(ConfigError, match="HOST:PORT"):
        KedaScalerServer(board).start("nonsense")


def test_a_replica_that_is_not_the_leader_answers_unavailable(board: HandoffBoard) -> None:
    for server, s in serve(board):
        server.is_leader = lambda: False
        with pytest.raises(grpc.RpcError) as err:
            metrics(s)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "not the leader" in (err.value.details() or "")
