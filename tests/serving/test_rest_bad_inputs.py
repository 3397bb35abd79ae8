"""Hostile or malformed requests are 4xx naming the problem, never 500, and the server keeps serving."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

LIMIT = 1 << 20  # a 1 MiB body limit for this module


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("bad") / "repo", {"linear": "linear", "multi": "multi", "cnn": "cnn"})
    return live_server(repo, load_probe=False, max_body_bytes=LIMIT)


def _x(**over: Any) -> dict[str, Any]:
    return {"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0], **over}


BAD_JSON: dict[str, tuple[str, Any, str]] = {
    "unknown input": ("linear", {"inputs": [_x(name="z")]}, "unknown input 'z'"),
    "missing input": (
        "multi",
        {"inputs": [{"name": "a", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]},
        "missing input(s): b",
    ),
    "duplicate input": ("linear", {"inputs": [_x(), _x()]}, "given twice"),
    "wrong dtype": ("linear", {"inputs": [_x(datatype="FP64")]}, "expected datatype FP32, got FP64"),
    "wrong rank": ("linear", {"inputs": [_x(shape=[1], data=[4.0])]}, "expected rank 2"),
    "wrong fixed dim": ("linear", {"inputs": [_x(shape=[1, 2], data=[4.0, 5.0])]}, "dimension 1 must be 1"),
    "data size mismatch": ("linear", {"inputs": [_x(shape=[2, 1])]}, "needs 2 elements, data has 1"),
    "huge shape": ("linear", {"inputs": [_x(shape=[2**62, 4])]}, "over the"),
    "negative dim": ("linear", {"inputs": [_x(shape=[-1, 1])]}, "negative dimension"),
    "empty but huge": ("linear", {"inputs": [_x(shape=[0, 2**62], data=[])]}, "spans more than the"),
    "string data": ("linear", {"inputs": [_x(data=["four"])]}, "FP32 data holds a null, a string"),
    "no inputs": ("linear", {"inputs": []}, "inputs must have at least 1 item"),
    "not an object": ("linear", [1, 2], "request body must be an object, got array"),
    "input not object": ("linear", {"inputs": [7]}, "inputs[0] must be an object, got integer"),
    "name missing": (
        "linear",
        {"inputs": [{"shape": [1, 1], "datatype": "FP32", "data": [1]}]},
        "inputs[0].name is required",
    ),
    "shape not list": ("linear", {"inputs": [_x(shape="1,1")]}, "inputs[0].shape must be an array, got string"),
    "unknown output": ("linear", {"inputs": [_x()], "outputs": [{"name": "nope"}]}, "unknown output 'nope'"),
    "bad timeout param": ("linear", {"inputs": [_x()], "parameters": {"timeout": "soon"}}, "timeout"),
    "empty batch": ("linear", {"inputs": [_x(shape=[0, 1], data=[])]}, "empty batch"),
}


@pytest.mark.parametrize("case", sorted(BAD_JSON))
def test_bad_json_requests_are_400(srv: Any, case: str) -> None:
    model, body, fragment = BAD_JSON[case]
    r = srv.request("POST", f"/v2/models/{model}/infer", content=json.dumps(body))
    assert r.status_code == 400, (case, r.status_code, r.text)
    assert fragment in r.json()["error"], (case, r.json())


def _binary(header: dict[str, Any], blob: bytes, declared: int | None = None) -> tuple[bytes, dict[str, str]]:
    for tensor in header.get("inputs", []):  # binary tensors carry no "data" (data=None drops it)
        if tensor.get("data", 0) is None:
            del tensor["data"]
    head = json.dumps(header).encode()
    n = len(head) if declared is None else declared
    return head + blob, {"Inference-Header-Content-Length": str(n)}


@pytest.mark.parametrize(
    ("shape", "size", "blob", "fragment"),
    [
        ([2**62, 4], 16, b"\0" * 16, "over the"),
        ([1, 1], 8, b"\0" * 8, "needs 4 bytes, got 8"),
        ([-1, 1], 4, b"\0" * 4, "negative"),
        ([1, 1], 400, b"\0" * 4, "binary_data_size 400 does not fit"),
        ([1, 1], -4, b"\0" * 4, "binary_data_size -4"),
    ],
)
def test_binary_size_mismatches_are_400(srv: Any, shape: list[int], size: int, blob: bytes, fragment: str) -> None:
    body, headers = _binary({"inputs": [_x(shape=shape, data=None, parameters={"binary_data_size": size})]}, blob)
    r = srv.request("POST", "/v2/models/linear/infer", content=body, headers=headers)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]


def test_unclaimed_binary_bytes_and_bad_header_length(srv: Any) -> None:
    body, headers = _binary({"inputs": [_x(data=None, parameters={"binary_data_size": 4})]}, b"\0" * 12)
    r = srv.request("POST", "/v2/models/linear/infer", content=body, headers=headers)
    assert r.status_code == 400
    assert "no input claims" in r.json()["error"]
    r = srv.request("POST", "/v2/models/linear/infer", content=b"{}", headers={"Inference-Header-Content-Length": "99"})
    assert r.status_code == 400
    r = srv.request(
        "POST", "/v2/models/linear/infer", content=b"\0" * 5, headers={"Inference-Header-Content-Length": "0"}
    )
    assert r.status_code == 400
    assert "needs 4 bytes" in r.json()["error"]


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("nested depth 10000", b"[" * 10000 + b"]" * 10000),
        (
            "nested data depth 10000",
            b'{"inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","data":' + b"[" * 10000 + b"]" * 10000 + b"}]}",
        ),
        (
            "nested data depth 500",
            b'{"inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","data":' + b"[" * 500 + b"4" + b"]" * 500 + b"}]}",
        ),
        ("malformed", b'{"inputs": [ {"name": "x",'),
        ("not utf-8", b'{"inputs": "\xff\xfe"}'),
        ("empty", b""),
    ],
)
def test_malformed_json_is_400(srv: Any, name: str, body: bytes) -> None:
    r = srv.request("POST", "/v2/models/linear/infer", content=body)
    assert r.status_code == 400, (name, r.status_code, r.text[:200])


def test_body_over_limit_is_413_by_content_length(srv: Any) -> None:
    r = srv.request("POST", "/v2/models/linear/infer", content=b" " * (LIMIT + 1))
    assert r.status_code == 413
    assert "limit" in r.json()["error"]


def test_chunked_body_over_limit_is_413(srv: Any) -> None:
    def chunks() -> Any:
        for _ in range(LIMIT // 65536 + 2):
            yield b" " * 65536

    import httpx

    with httpx.Client(base_url=srv.url) as client:  # real uvicorn: Transfer-Encoding: chunked, no Content-Length
        r = client.post("/v2/models/linear/infer", content=chunks())
    assert r.status_code == 413


def test_gzip_bomb_is_413(srv: Any) -> None:
    bomb = gzip.compress(b" " * (LIMIT * 4))
    assert len(bomb) < LIMIT
    r = srv.request("POST", "/v2/models/linear/infer", content=bomb, headers={"Content-Encoding": "gzip"})
    assert r.status_code == 413


def test_bad_encoding_and_corrupt_gzip_are_400(srv: Any) -> None:
    r = srv.request("POST", "/v2/models/linear/infer", content=b"xx", headers={"Content-Encoding": "br"})
    assert r.status_code == 400
    assert "Content-Encoding" in r.json()["error"]
    r = srv.request("POST", "/v2/models/linear/infer", content=b"not gzip", headers={"Content-Encoding": "gzip"})
    assert r.status_code == 400


def test_unknown_model_and_version_are_404(srv: Any) -> None:
    body = json.dumps({"inputs": [_x()]})
    assert srv.request("POST", "/v2/models/nope/infer", content=body).status_code == 404
    assert srv.request("POST", "/v2/models/linear/versions/9/infer", content=body).status_code == 404
    assert srv.request("POST", "/v2/models/linear/versions/abc/infer", content=body).status_code == 404


def test_non_ascii_digits_are_refused_not_500(srv: Any) -> None:
    """'¹' passes str.isdigit() but not int(): a version or length holding one is a 4xx, never a 500."""
    body = json.dumps({"inputs": [_x()]})
    assert srv.request("POST", "/v2/models/linear/versions/%C2%B9/infer", content=body).status_code == 404
    assert srv.request("GET", "/v2/models/linear/versions/%C2%B9/ready").status_code == 400
    r = srv.request(
        "POST", "/v2/models/linear/infer", content=body.encode(), headers={"Inference-Header-Content-Length": b"\xb9"}
    )
    assert r.status_code == 400


def test_server_still_serves_after_abuse(srv: Any) -> None:
    r = srv.request("POST", "/v2/models/linear/infer", content=json.dumps({"inputs": [_x()]}))
    assert r.status_code == 200
    assert r.json()["outputs"][0]["data"] == [9.0]
    fails = srv.request("GET", "/metrics").text
    assert 'fwx_request_failure_total{model="linear",reason="invalid",version="1"}' in fails, [
        x for x in fails.splitlines() if "fail" in x
    ]
