"""Tokens, model control, the health service, typed contents, port handling and drain, over real channels."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from fwx.errors import UsageError
from fwx.serving.config import ServerConfig
from fwx.serving.proto import grpc_service_pb2 as pb
from fwx.serving.proto import grpc_service_pb2_grpc as pb_grpc
from fwx.serving.proto import health_pb2, health_pb2_grpc


@pytest.fixture(scope="module")
def secured(
    live_server: Callable[..., Any], make_repo: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("grpc-secured"), {"linear": "linear"})
    return live_server(
        repo, grpc_port=0, http_port=-1, api_token="api-secret", enable_model_control=True, admin_token="admin-secret"
    )


def _x() -> list[grpcclient.InferInput]:
    inp = grpcclient.InferInput("x", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[4.0]], np.float32))
    return [inp]


def _code(fn: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(InferenceServerException) as err:
        fn(*args, **kw)
    return str(err.value.status())


def test_api_token_on_inference(secured: Any) -> None:
    c = grpcclient.InferenceServerClient(secured.grpc_url)
    assert _code(c.infer, "linear", _x()) == "StatusCode.UNAUTHENTICATED"
    assert _code(c.infer, "linear", _x(), headers={"authorization": "Bearer wrong"}) == "StatusCode.UNAUTHENTICATED"
    ok = c.infer("linear", _x(), headers={"authorization": "Bearer api-secret"})
    assert ok.as_numpy("y")[0, 0] == 9.0
    assert c.is_server_ready()  # health/metadata stay open


def test_model_control_needs_admin_token(secured: Any) -> None:
    c = grpcclient.InferenceServerClient(secured.grpc_url)
    assert _code(c.load_model, "linear") == "StatusCode.UNAUTHENTICATED"
    assert _code(c.load_model, "linear", headers={"authorization": "Bearer api-secret"}) == "StatusCode.UNAUTHENTICATED"
    admin = {"authorization": "Bearer admin-secret"}
    api = {"authorization": "Bearer api-secret"}
    c.unload_model("linear", headers=admin)
    assert not c.is_model_ready("linear", headers=api)
    c.load_model("linear", headers=admin)
    assert c.is_model_ready("linear", headers=api)
    assert _code(c.load_model, "../etc", headers=admin) == "StatusCode.INVALID_ARGUMENT"


def test_error_hint_in_trailing_metadata(secured: Any) -> None:
    with grpc.insecure_channel(secured.grpc_url) as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="linear"))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert err.value.details() == "model control needs the admin token"
    assert "Bearer" in dict(err.value.trailing_metadata())["fwx-hint"]


def test_health_check_raw_stub(server: Any) -> None:
    with grpc.insecure_channel(server.grpc_url) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for service in ("", "inference.GRPCInferenceService"):
            resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:
            health.Check(health_pb2.HealthCheckRequest(service="other"), timeout=5)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()


def test_typed_contents_over_the_wire(server: Any) -> None:
    with grpc.insecure_channel(server.grpc_url) as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        req = pb.ModelInferRequest(model_name="multi")
        req.inputs.add(name="a", datatype="FP32", shape=[1, 3]).contents.fp32_contents.extend([1.0, 5.0, 2.0])
        req.inputs.add(name="b", datatype="INT64", shape=[1, 3]).contents.int64_contents.extend([1, 2, 3])
        resp = stub.ModelInfer(req, timeout=5)
    assert [(o.name, o.datatype, list(o.shape)) for o in resp.outputs] == [
        ("sum", "FP32", [1, 3]),
        ("idx", "INT64", [1]),
    ]
    assert np.frombuffer(resp.raw_output_contents[0], "<f4").tolist() == [2.0, 7.0, 5.0]
    assert np.frombuffer(resp.raw_output_contents[1], "<i8").tolist() == [1]


def test_port_in_use_is_a_usage_error(server: Any, tmp_path: Any) -> None:
    from fwx.serving.grpc.server import create_grpc_server

    async def bind() -> None:
        create_grpc_server(object(), ServerConfig(repository=tmp_path, grpc_port=server.server.grpc_port))

    with pytest.raises(UsageError, match=str(server.server.grpc_port)):
        server.call(bind())


def test_address_formats() -> None:
    from fwx.serving.grpc.server import _address

    assert _address("127.0.0.1", 8001) == "127.0.0.1:8001"
    assert _address("::1", 8001) == "[::1]:8001"
    assert _address("[::]", 0) == "[::]:0"


def test_stop_drains_inflight_then_refuses(
    live_server: Callable[..., Any], make_repo: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    repo = make_repo(tmp_path_factory.mktemp("grpc-drain"), {"sleepy": "sleepy"})
    srv = live_server(repo, grpc_port=0, http_port=-1, drain_seconds=20)
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    done: queue.Queue[Any] = queue.Queue()
    x = grpcclient.InferInput("x", [1, 1], "FP32")
    x.set_data_from_numpy(np.array([[7.0]], np.float32))
    c.async_infer("sleepy", [x], callback=lambda result, error: done.put((result, error)))
    end = time.monotonic() + 10
    while srv.dataplane.inflight == 0 and done.empty() and time.monotonic() < end:
        time.sleep(0.002)
    srv.call(srv.server.stop())  # drain, close the gRPC port, unload (idempotent: the fixture stops it again)
    result, error = done.get(timeout=30)
    assert error is None
    assert result.as_numpy("y")[0, 0] == 7.0
    assert _code(c.is_server_live) == "StatusCode.UNAVAILABLE"
