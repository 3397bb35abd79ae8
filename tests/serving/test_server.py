"""The Server object: HTTP and gRPC on one loop over one data plane; shutdown refuses new work at once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]})


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("server") / "repo", {"linear": "linear"})
    return live_server(repo, load_probe=False, grpc_port=0)


def test_grpc_and_rest_share_one_data_plane(srv: Any) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(srv.grpc_url)
    assert client.is_server_ready()
    inp = grpcclient.InferInput("x", [2, 1], "FP32")
    inp.set_data_from_numpy(np.array([[4.0], [0.0]], np.float32))
    np.testing.assert_array_equal(client.infer("linear", [inp]).as_numpy("y"), [[9.0], [1.0]])
    assert srv.request("POST", "/v2/models/linear/infer", content=BODY).status_code == 200
    stats = srv.request("GET", "/v2/models/linear/stats").json()["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 2  # one over each protocol, same counters
    client.close()


def test_shutdown_refuses_new_work_on_both_protocols(srv: Any) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    srv.dataplane.begin_shutdown()
    assert srv.request("GET", "/v2/health/ready").status_code == 400
    assert srv.request("GET", "/v2/health/live").status_code == 200
    r = srv.request("POST", "/v2/models/linear/infer", content=BODY)
    assert r.status_code == 503
    assert "shutting down" in r.json()["error"]
    assert r.headers["retry-after"] == "1"
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    assert not client.is_server_ready()
    inp = grpcclient.InferInput("x", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[4.0]], np.float32))
    with pytest.raises(InferenceServerException, match="shutting down") as info:
        client.infer("linear", [inp])
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    client.close()
