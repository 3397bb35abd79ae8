"""KServe v2 REST: every endpoint, JSON and binary tensors, in-process and with tritonclient.http."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

MODELS = {"linear": "linear", "cnn": "cnn", "multi": "multi", "fixed": "fixed", "seq": "seq", "text": "text"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("kserve") / "repo", MODELS)
    return live_server(repo, load_probe=False)


def _infer(srv: Any, model: str, body: dict[str, Any], **kw: Any) -> Any:
    return srv.request("POST", f"/v2/models/{model}/infer", content=json.dumps(body), **kw)


def test_linear_turns_4_into_9(srv: Any) -> None:
    r = _infer(srv, "linear", {"id": "r1", "inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4]}]})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc == {
        "model_name": "linear",
        "model_version": "1",
        "id": "r1",
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 1], "data": [9.0]}],
    }


def test_health_and_server_metadata(srv: Any) -> None:
    assert srv.request("GET", "/v2/health/live").status_code == 200
    ready = srv.request("GET", "/v2/health/ready")
    assert ready.status_code == 200
    assert ready.content == b""
    meta = srv.request("GET", "/v2").json()
    assert meta["name"] == "fwx"
    assert "binary_tensor_data" in meta["extensions"]


def test_model_ready_metadata_and_versions(srv: Any) -> None:
    assert srv.request("GET", "/v2/models/cnn/ready").status_code == 200
    assert srv.request("GET", "/v2/models/cnn/versions/1/ready").status_code == 200
    assert srv.request("GET", "/v2/models/cnn/versions/7/ready").status_code == 400
    assert srv.request("GET", "/v2/models/nope/ready").status_code == 400
    meta = srv.request("GET", "/v2/models/cnn/versions/1").json()
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["parameters"] == {"format": "onnx"}
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
    assert meta["versions"] == ["1"]
    missing = srv.request("GET", "/v2/models/nope")
    assert missing.status_code == 404
    assert "nope" in missing.json()["error"]


def test_model_config_is_triton_shaped(srv: Any) -> None:
    cfg = srv.request("GET", "/v2/models/cnn/config").json()
    assert cfg["max_batch_size"] == 32
    assert cfg["input"][0]["dims"] == [3, 32, 32]
    assert cfg["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 100
    fixed = srv.request("GET", "/v2/models/fixed/config").json()
    assert fixed["max_batch_size"] == 0
    assert fixed["input"][0]["dims"] == [1, 4]
    assert "dynamic_batching" not in fixed


def test_statistics_count_requests(srv: Any) -> None:
    before = srv.request("GET", "/v2/models/multi/stats").json()["model_stats"][0]
    body = {
        "inputs": [
            {"name": "a", "shape": [2, 3], "datatype": "FP32", "data": [1, 5, 2, 0, 0, 9]},
            {"name": "b", "shape": [2, 3], "datatype": "INT64", "data": [1, 1, 1, 2, 2, 2]},
        ]
    }
    assert _infer(srv, "multi", body).status_code == 200
    after = srv.request("GET", "/v2/models/multi/versions/1/stats").json()["model_stats"][0]
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    assert after["inference_count"] == before["inference_count"] + 2
    assert after["inference_stats"]["compute_infer"]["ns"] > 0
    everything = srv.request("GET", "/v2/models/stats").json()["model_stats"]
    assert {s["name"] for s in everything} == set(MODELS)


def test_multi_io_and_output_selection(srv: Any) -> None:
    body = {
        "inputs": [
            {"name": "a", "shape": [2, 3], "datatype": "FP32", "data": [[1, 5, 2], [0, 0, 9]]},
            {"name": "b", "shape": [2, 3], "datatype": "INT64", "data": [1, 1, 1, 2, 2, 2]},
        ],
        "outputs": [{"name": "idx"}],
    }
    doc = _infer(srv, "multi", body).json()
    assert doc["outputs"] == [{"name": "idx", "datatype": "INT64", "shape": [2], "data": [1, 2]}]


def test_binary_request_and_response(srv: Any) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    header = json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": [2, 3, 32, 32], "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}}
            ],
            "outputs": [{"name": "probs", "parameters": {"binary_data": True}}],
        }
    ).encode()
    r = srv.request(
        "POST",
        "/v2/models/cnn/infer",
        content=header + x.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert r.status_code == 200, r.text
    n = int(r.headers["inference-header-content-length"])
    head = json.loads(r.content[:n])
    assert head["outputs"][0]["parameters"]["binary_data_size"] == 2 * 10 * 4
    probs = np.frombuffer(r.content[n:], np.float32).reshape(2, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_raw_single_input_body(srv: Any) -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    r = srv.request(
        "POST", "/v2/models/fixed/infer", content=x.tobytes(), headers={"Inference-Header-Content-Length": "0"}
    )
    assert r.status_code == 200, r.text
    n = int(r.headers["inference-header-content-length"])
    np.testing.assert_array_equal(np.frombuffer(r.content[n:], np.float32), [0, 3, 6, 9])


def test_binary_data_output_parameter(srv: Any) -> None:
    body = {
        "inputs": [{"name": "x", "shape": [2, 1], "datatype": "FP32", "data": [1, 2]}],
        "parameters": {"binary_data_output": True},
    }
    r = _infer(srv, "linear", body)
    n = int(r.headers["inference-header-content-length"])
    np.testing.assert_array_equal(np.frombuffer(r.content[n:], np.float32), [3, 5])


def test_bytes_tensors_roundtrip(srv: Any) -> None:
    payload = struct.pack("<I", 2) + b"hi" + struct.pack("<I", 0)
    header = json.dumps(
        {"inputs": [{"name": "s", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": len(payload)}}]}
    ).encode()
    r = srv.request(
        "POST",
        "/v2/models/text/infer",
        content=header + payload,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == ["hi", ""]


def test_gzip_body_accepted(srv: Any) -> None:
    import gzip

    body = gzip.compress(
        json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4]}]}).encode()
    )
    r = srv.request("POST", "/v2/models/linear/infer", content=body, headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200
    assert r.json()["outputs"][0]["data"] == [9.0]


def test_unknown_route_is_json_404(srv: Any) -> None:
    r = srv.request("GET", "/v3/whatever")
    assert r.status_code == 404
    assert "error" in r.json()


# ----------------------------------------------------------------- tritonclient.http against real uvicorn


@pytest.fixture(scope="module")
def triton(srv: Any) -> Any:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(srv.url.removeprefix("http://"))
    yield client
    client.close()


@pytest.mark.e2e
@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_http_infer(triton: Any, binary: bool) -> None:
    import tritonclient.http as httpclient

    assert triton.is_server_live()
    assert triton.is_server_ready()
    assert triton.is_model_ready("cnn")
    x = np.random.default_rng(2).standard_normal((3, 3, 32, 32)).astype(np.float32)
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput("probs", binary_data=binary)
    res = triton.infer("cnn", [inp], outputs=[out])
    probs = res.as_numpy("probs")
    assert probs.shape == (3, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.e2e
def test_tritonclient_http_metadata_config_stats(triton: Any) -> None:
    meta = triton.get_model_metadata("linear")
    assert meta["inputs"][0]["name"] == "x"
    assert triton.get_model_config("linear")["max_batch_size"] == 32
    assert triton.get_server_metadata()["name"] == "fwx"
    stats = triton.get_inference_statistics("linear")
    assert stats["model_stats"][0]["name"] == "linear"
    index = triton.get_model_repository_index()
    assert {m["name"] for m in index} == set(MODELS)
