"""BYTES tensors: bytes are bytes on every protocol that can carry them.

The binary extension, gRPC (typed ``bytes_contents`` and raw contents) and TF
Serving's ``{"b64": ...}`` carry any bytes, unchanged. JSON strings carry only
UTF-8, so a non-UTF-8 output asked for as JSON is a 400 that says how to get it
in binary, and onnxruntime (whose Python API takes UTF-8 text only) answers a
non-UTF-8 input with a 400 naming the element, never a 500 about surrogates.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.serving.codecs import decode_raw, encode_raw, json_data

RAW = [b"\xff\xfe\x00bin", b"", "h\u00e9".encode(), b"\x80"]


def _framed(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(b)) + b for b in items)


def test_binary_extension_round_trips_any_bytes() -> None:
    arr = decode_raw("s", "BYTES", [4], _framed(RAW))
    assert arr.tolist() == RAW
    assert encode_raw(arr) == _framed(RAW)


def test_grpc_carries_any_bytes() -> None:
    from fwx.serving.grpc.codecs import decode_contents, encode_infer_response
    from fwx.serving.proto import grpc_service_pb2 as pb
    from fwx.serving.types import InferResponse, InferTensor

    contents = pb.InferTensorContents(bytes_contents=RAW)
    arr = decode_contents("s", "BYTES", [4], contents)
    assert arr.tolist() == RAW
    msg = encode_infer_response(InferResponse("m", "1", [InferTensor("out", "BYTES", [4], arr)]))
    assert msg.raw_output_contents[0] == _framed(RAW)


def test_tf_serving_b64_carries_any_bytes() -> None:
    from fwx.serving.rest.tf_serving import encode_predict
    from fwx.serving.types import InferResponse, InferTensor

    arr = np.array(RAW, dtype=object)
    body = json.loads(encode_predict(InferResponse("m", "1", [InferTensor("out", "BYTES", [4], arr)]), "instances"))
    got = [base64.b64decode(p["b64"]) if isinstance(p, dict) else p.encode() for p in body["predictions"]]
    assert got == RAW


def test_json_output_of_non_utf8_is_a_400_with_the_way_out() -> None:
    assert json_data(np.array(["h\u00e9".encode(), b"ok"], dtype=object), "out") == ["h\u00e9", "ok"]
    with pytest.raises(InputError) as err:
        json_data(np.array([b"ok", b"\xff"], dtype=object), "out")
    assert err.value.http_status == 400
    assert "output 'out' element 1 is not UTF-8" in err.value.message
    assert '"binary_data": true' in (err.value.hint or "")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("bytes") / "repo", {"text": "text"})
    return live_server(repo, load_probe=False, grpc_port=0)


def _binary_infer(srv: Any, items: list[bytes]) -> Any:
    payload = _framed(items)
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "s",
                    "shape": [len(items)],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(payload)},
                }
            ],
            "outputs": [{"name": "out", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return srv.request(
        "POST",
        "/v2/models/text/infer",
        content=head + payload,
        headers={"Inference-Header-Content-Length": str(len(head))},
    )


def test_utf8_bytes_cross_the_onnx_model_unchanged(srv: Any) -> None:
    items = ["h\u00e9 \u2603".encode(), b"", b"a\x00b"]
    r = _binary_infer(srv, items)
    assert r.status_code == 200, r.text
    head = int(r.headers["inference-header-content-length"])
    assert r.content[head:] == _framed(items)


def test_non_utf8_into_onnxruntime_is_a_clear_400_on_every_protocol(srv: Any) -> None:
    r = _binary_infer(srv, [b"ok", b"\xff\xfe"])
    assert r.status_code == 400
    assert "input 's' element 1 is not UTF-8 text" in r.json()["error"]
    assert "surrogates" not in r.text
    tf = srv.request(
        "POST",
        "/v1/models/text:predict",
        content=json.dumps({"instances": [{"b64": base64.b64encode(b"\xff").decode()}]}),
    )
    assert tf.status_code == 400
    assert "not UTF-8 text" in tf.json()["error"]
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(srv.grpc_url)
    inp = grpcclient.InferInput("s", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"\xff"], dtype=object))
    with pytest.raises(InferenceServerException) as err:
        client.infer("text", [inp])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "not UTF-8 text" in str(err.value)


def test_lone_surrogates_in_json_get_a_hint(srv: Any) -> None:
    body = '{"inputs": [{"name": "s", "shape": [1], "datatype": "BYTES", "data": ["\\udcff"]}]}'
    r = srv.request("POST", "/v2/models/text/infer", content=body)
    assert r.status_code == 400
    assert "binary tensor extension" in r.json()["error"]
