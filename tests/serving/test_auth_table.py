"""One access table, both protocols: every REST route and gRPC method x {no, wrong, API, admin} token.

The expected answer of each row comes from the data plane's own ``ACCESS`` table
(public / API token / admin token), so REST and gRPC are held to the same rule;
the table must also cover every route the app serves and every RPC of the
service, so a new endpoint cannot skip it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from fwx.serving.dataplane import ACCESS, Access
from fwx.serving.proto import grpc_service_pb2 as pb
from fwx.serving.proto import grpc_service_pb2_grpc as pb_grpc
from fwx.serving.proto import health_pb2, health_pb2_grpc

API, ADMIN = "api-secret", "admin-secret"
CREDENTIALS = {"none": None, "wrong": "Bearer nope", "api": f"Bearer {API}", "admin": f"Bearer {ADMIN}"}
INFER = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]})
TF_PREDICT = json.dumps({"instances": [[4.0]]})
GENERATE = json.dumps({"text_input": "hi", "max_tokens": 1})
COMPLETION = json.dumps({"model": "linear", "prompt": "hi", "max_tokens": 1})
CHAT = json.dumps({"model": "linear", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})


@dataclass(frozen=True)
class Rest:
    op: str
    method: str
    path: str
    body: str = ""
    allowed_status: int = 200  # what an allowed caller gets (a generate route on a non-generation model: 400)


@dataclass(frozen=True)
class Rpc:
    op: str
    name: str
    request: Callable[[], Any]


def _infer_pb() -> Any:
    req = pb.ModelInferRequest(model_name="linear")
    x = req.inputs.add(name="x", datatype="FP32", shape=[1, 1])
    x.contents.fp32_contents.append(4.0)
    return req


REST = [
    Rest("live", "GET", "/v2/health/live"),
    Rest("ready", "GET", "/v2/health/ready"),
    Rest("server_metadata", "GET", "/v2"),
    Rest("metrics", "GET", "/metrics"),
    Rest("openapi", "GET", "/v2/openapi.json"),
    Rest("model_statistics", "GET", "/v2/models/stats"),
    Rest("repository_index", "POST", "/v2/repository/index", '{"ready": true}'),
    Rest("load_model", "POST", "/v2/repository/models/spare/load"),
    Rest("unload_model", "POST", "/v2/repository/models/spare/unload"),
    # the table's models take tensors, not text: an allowed caller passes auth and gets the 400 that says so
    Rest("repository_index", "GET", "/v1/models"),
    Rest("infer", "POST", "/v1/completions", COMPLETION, 400),
    Rest("infer", "POST", "/v1/chat/completions", CHAT, 400),
    *(
        r
        for base in ("/v2/models/linear", "/v2/models/linear/versions/1")
        for r in (
            Rest("model_metadata", "GET", base),
            Rest("model_ready", "GET", f"{base}/ready"),
            Rest("infer", "POST", f"{base}/infer", INFER),
            Rest("model_statistics", "GET", f"{base}/stats"),
            Rest("model_config", "GET", f"{base}/config"),
            Rest("infer", "POST", f"{base}/generate", GENERATE, 400),
            Rest("infer", "POST", f"{base}/generate_stream", GENERATE, 400),
        )
    ),
    *(
        r
        for base in ("/v1/models/linear", "/v1/models/linear/versions/1")
        for r in (
            Rest("model_status", "GET", base),
            Rest("infer", "POST", f"{base}:predict", TF_PREDICT),
            Rest("served_model", "GET", f"{base}/metadata"),
        )
    ),
]

RPCS = [
    Rpc("live", "ServerLive", pb.ServerLiveRequest),
    Rpc("ready", "ServerReady", pb.ServerReadyRequest),
    Rpc("server_metadata", "ServerMetadata", pb.ServerMetadataRequest),
    Rpc("model_ready", "ModelReady", lambda: pb.ModelReadyRequest(name="linear")),
    Rpc("model_metadata", "ModelMetadata", lambda: pb.ModelMetadataRequest(name="linear")),
    Rpc("model_config", "ModelConfig", lambda: pb.ModelConfigRequest(name="linear")),
    Rpc("model_statistics", "ModelStatistics", lambda: pb.ModelStatisticsRequest(name="linear")),
    Rpc("repository_index", "RepositoryIndex", lambda: pb.RepositoryIndexRequest(ready=True)),
    Rpc("infer", "ModelInfer", _infer_pb),
    Rpc("infer", "ModelStreamInfer", _infer_pb),
    Rpc("load_model", "RepositoryModelLoad", lambda: pb.RepositoryModelLoadRequest(model_name="spare")),
    Rpc("unload_model", "RepositoryModelUnload", lambda: pb.RepositoryModelUnloadRequest(model_name="spare")),
    Rpc("live", "Check", health_pb2.HealthCheckRequest),  # grpc.health.v1: public, like REST health
]


def allowed(op: str, credential: str) -> bool:
    access = ACCESS[op]
    if access is Access.PUBLIC:
        return True
    return credential == ("api" if access is Access.API else "admin")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("auth-table") / "repo", {"linear": "linear", "spare": "linear"})
    return live_server(repo, load_probe=False, grpc_port=0, api_token=API, admin_token=ADMIN, enable_model_control=True)


@pytest.fixture(scope="module")
def channel(server: Any) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_url) as ch:
        yield ch


@pytest.mark.parametrize("credential", list(CREDENTIALS))
@pytest.mark.parametrize("row", REST, ids=lambda r: f"{r.method} {r.path}")
def test_rest(server: Any, row: Rest, credential: str) -> None:
    token = CREDENTIALS[credential]
    headers = {"Authorization": token} if token else {}
    r = server.request(row.method, row.path, content=row.body, headers=headers)
    if allowed(row.op, credential):
        assert r.status_code == row.allowed_status, r.text
    else:
        assert r.status_code == 401, r.text
        error = r.json()["error"]
        assert "token" in (error["message"] if isinstance(error, dict) else error)  # OpenAI's shape on /v1


def _call(channel: grpc.Channel, row: Rpc, metadata: list[tuple[str, str]]) -> Any:
    if row.name == "Check":
        return health_pb2_grpc.HealthStub(channel).Check(row.request(), metadata=metadata, timeout=30)
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    if row.name == "ModelStreamInfer":
        reply = next(iter(stub.ModelStreamInfer(iter([row.request()]), metadata=metadata, timeout=30)))
        assert not reply.error_message, reply.error_message
        return reply
    return getattr(stub, row.name)(row.request(), metadata=metadata, timeout=30)


@pytest.mark.parametrize("credential", list(CREDENTIALS))
@pytest.mark.parametrize("row", RPCS, ids=lambda r: r.name)
def test_grpc(channel: grpc.Channel, row: Rpc, credential: str) -> None:
    token = CREDENTIALS[credential]
    metadata = [("authorization", token)] if token else []
    if allowed(row.op, credential):
        _call(channel, row, metadata)
        return
    with pytest.raises(grpc.RpcError) as err:
        _call(channel, row, metadata)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "token" in (err.value.details() or "")


def test_the_table_covers_every_route_rpc_and_operation(server: Any) -> None:
    served = {(m, route.path) for route in server.server.app.routes for m in (route.methods or ()) if m != "HEAD"}
    patterns = {
        (
            r.method,
            r.path.replace("linear", "{model}")
            .replace("/versions/1", "/versions/{version}")
            .replace("spare", "{model}"),
        )
        for r in REST
    }
    assert served == patterns
    rpcs = {name for name in dir(pb_grpc.GRPCInferenceServiceServicer) if name[0].isupper()}
    assert rpcs == {r.name for r in RPCS} - {"Check"}
    assert {r.op for r in REST} | {r.op for r in RPCS} == set(ACCESS)


def test_refusals_are_counted_alike_on_both_protocols(server: Any, channel: grpc.Channel) -> None:
    """A bad token and an undecodable request count once each, whichever transport carried them."""
    failures = server.dataplane.metrics.server_failures
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    api = [("authorization", f"Bearer {API}")]
    bad = pb.ModelInferRequest(model_name="linear")
    bad.inputs.add(name="x", datatype="FP32", shape=[-1, 1])
    cases = [
        ("unauthenticated", lambda: server.request("POST", "/v2/models/linear/infer", content=INFER)),
        ("unauthenticated", lambda: _raises(lambda: stub.ModelInfer(_infer_pb(), timeout=30))),
        ("unauthenticated", lambda: server.request("GET", "/v2/models/linear")),
        (
            "unauthenticated",
            lambda: _raises(lambda: stub.ModelMetadata(pb.ModelMetadataRequest(name="linear"), timeout=30)),
        ),
        (
            "invalid",
            lambda: server.request(
                "POST", "/v2/models/linear/infer", content=b"{", headers={"Authorization": f"Bearer {API}"}
            ),
        ),
        ("invalid", lambda: _raises(lambda: stub.ModelInfer(bad, metadata=api, timeout=30))),
        (
            "invalid",
            lambda: _raises(
                lambda: channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(
                    b"\xff\xff", metadata=api, timeout=30
                )
            ),
        ),
    ]
    for reason, call in cases:
        before = failures.get(reason, 0)
        call()
        assert failures.get(reason, 0) == before + 1, reason


def _raises(call: Callable[[], Any]) -> None:
    with pytest.raises(grpc.RpcError):
        call()
