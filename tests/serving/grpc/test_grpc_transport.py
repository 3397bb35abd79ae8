"""The one gRPC server (grpc.aio on the data plane's loop): infer, health, undecodable bytes, unknown models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest

from fwx.serving.proto import grpc_service_pb2 as pb
from fwx.serving.proto import health_pb2


@pytest.fixture(scope="module")
def url(
    live_server: Callable[..., Any], make_repo: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
) -> str:
    repo = make_repo(tmp_path_factory.mktemp("grpc"), {"linear": "linear"})
    return str(live_server(repo, grpc_port=0, http_port=-1).grpc_url)


def _raw(channel: grpc.Channel, method: str, payload: bytes) -> bytes:
    return bytes(channel.unary_unary(method)(payload, timeout=10))


def test_infer_ready_and_health(url: str) -> None:
    req = pb.ModelInferRequest(model_name="linear")
    req.inputs.add(name="x", datatype="FP32", shape=[1, 1])
    req.raw_input_contents.append(np.array([[4.0]], np.float32).tobytes())
    with grpc.insecure_channel(url) as ch:
        out = pb.ModelInferResponse.FromString(
            _raw(ch, "/inference.GRPCInferenceService/ModelInfer", req.SerializeToString())
        )
        ready = pb.ServerReadyResponse.FromString(_raw(ch, "/inference.GRPCInferenceService/ServerReady", b""))
        health = health_pb2.HealthCheckResponse.FromString(_raw(ch, "/grpc.health.v1.Health/Check", b""))
    assert np.frombuffer(out.raw_output_contents[0], np.float32).tolist() == [9.0]  # y = 2x + 1
    assert ready.ready
    assert health.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("method", ["ModelInfer", "ModelMetadata"])
def test_bytes_that_do_not_parse_are_invalid_argument_not_internal(url: str, method: str) -> None:
    with grpc.insecure_channel(url) as ch, pytest.raises(grpc.RpcError) as info:
        _raw(ch, f"/inference.GRPCInferenceService/{method}", b"\xff\xff\xff not protobuf")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid protobuf message" in str(info.value.details())


def test_unknown_model_is_not_found(url: str) -> None:
    with grpc.insecure_channel(url) as ch, pytest.raises(grpc.RpcError) as info:
        _raw(
            ch,
            "/inference.GRPCInferenceService/ModelMetadata",
            pb.ModelMetadataRequest(name="nope").SerializeToString(),
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
