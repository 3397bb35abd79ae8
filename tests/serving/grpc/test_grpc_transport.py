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
def served(
    live_server: Callable[..., Any], make_repo: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("grpc"), {"linear": "linear"})
    return live_server(repo, grpc_port=0)


@pytest.fixture(scope="module")
def url(served: Any) -> str:
    return str(served.grpc_url)


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


@pytest.mark.parametrize("name", ["nope", "naïve☃"])  # a non-ASCII name in the message: still NOT_FOUND
def test_unknown_model_is_not_found(url: str, name: str) -> None:
    with grpc.insecure_channel(url) as ch, pytest.raises(grpc.RpcError) as info:
        _raw(
            ch,
            "/inference.GRPCInferenceService/ModelMetadata",
            pb.ModelMetadataRequest(name=name).SerializeToString(),
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND, info.value.details()
    for _, value in info.value.trailing_metadata() or ():
        assert value.isascii()
        assert value.isprintable()


@pytest.mark.parametrize(("name", "value"), [("timeout", -1), ("timeout_ms", -1), ("timeout_ms", "soon")])
def test_a_bad_timeout_is_invalid_argument_with_the_rest_message(served: Any, name: str, value: Any) -> None:
    """The error's hint says "µs": it must reach the client as ASCII metadata, not as INTERNAL "Invalid metadata"."""
    req = pb.ModelInferRequest(model_name="linear")
    req.inputs.add(name="x", datatype="FP32", shape=[1, 1])
    req.raw_input_contents.append(np.array([[4.0]], np.float32).tobytes())
    if isinstance(value, int):
        req.parameters[name].int64_param = value
    else:
        req.parameters[name].string_param = value
    with grpc.insecure_channel(served.grpc_url) as ch, pytest.raises(grpc.RpcError) as info:
        _raw(ch, "/inference.GRPCInferenceService/ModelInfer", req.SerializeToString())
    rest = served.request(
        "POST",
        "/v2/models/linear/infer",
        json={
            "inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}],
            "parameters": {name: value},
        },
    )
    assert rest.status_code == 400
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert "must be a non-negative number" in info.value.details()
    assert rest.json()["error"].startswith(info.value.details())  # REST appends the hint; gRPC sends it apart
    hint = dict(info.value.trailing_metadata() or ())["fwx-hint"]
    assert hint.isascii()
    assert hint.isprintable()
    assert "us" in hint


def test_every_hint_becomes_printable_ascii_metadata() -> None:
    from fwx.errors import InputError, UnavailableError
    from fwx.serving.grpc.status import status_of

    for hint in ("500000 (µs) × 2 – “quoted”…", "line one\nline\ttwo", "naïve ☃ model"):
        for exc in (InputError("m", hint=hint), UnavailableError("m", hint=hint)):
            got = status_of(exc)[2]
            assert got is not None
            assert got.isascii(), got
            assert got.isprintable(), got
    assert status_of(InputError("m", hint="e.g. 500000 (µs)"))[2] == "e.g. 500000 (us)"
