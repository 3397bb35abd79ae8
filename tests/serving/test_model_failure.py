"""An artifact that raises on a request that passed the signature check is a server fault, not bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from fwx.serving.proto import grpc_service_pb2 as pb
from fwx.serving.proto import grpc_service_pb2_grpc as pb_grpc


def _body(rows: int) -> str:
    return json.dumps({"inputs": [{"name": "x", "shape": [rows, 1], "datatype": "FP32", "data": [1.0] * rows}]})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("brittle") / "repo", {"brittle": "brittle"})
    return live_server(repo, load_probe=False, grpc_port=0)


def test_artifact_crash_is_500_and_internal(server: Any) -> None:
    assert server.request("POST", "/v2/models/brittle/infer", content=_body(1)).status_code == 200
    r = server.request("POST", "/v2/models/brittle/infer", content=_body(2))
    assert r.status_code == 500
    assert r.json()["error"].startswith("model brittle/1 failed on this request")
    req = pb.ModelInferRequest(model_name="brittle")
    x = req.inputs.add(name="x", datatype="FP32", shape=[2, 1])
    x.contents.fp32_contents.extend([1.0, 1.0])
    with grpc.insecure_channel(server.grpc_url) as ch, pytest.raises(grpc.RpcError) as err:
        pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=30)
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "failed on this request" in (err.value.details() or "")
    assert server.request("POST", "/v2/models/brittle/infer", content=_body(1)).status_code == 200
