"""NVIDIA's tritonclient.grpc (unmodified) against `fwx serve`'s gRPC port, real models and data plane."""

from __future__ import annotations

import queue
import time
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import InferInput, InferRequestedOutput
from tritonclient.utils import InferenceServerException


def _input(name: str, arr: np.ndarray, datatype: str) -> InferInput:
    inp = InferInput(name, list(arr.shape), datatype)
    inp.set_data_from_numpy(arr)
    return inp


def _fails(fn: Any, *args: Any, **kw: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as err:
        fn(*args, **kw)
    return err.value


def test_health_and_metadata(client: Any) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("linear")
    assert client.is_model_ready("linear", "1")
    assert not client.is_model_ready("nope")
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "fwx"
    assert "statistics" in meta["extensions"]
    model = client.get_model_metadata("multi", as_json=True)
    assert model["platform"] == "onnxruntime_onnx"
    assert model["versions"] == ["1"]
    assert model["inputs"] == [
        {"name": "a", "datatype": "FP32", "shape": ["-1", "3"]},
        {"name": "b", "datatype": "INT64", "shape": ["-1", "3"]},
    ]
    assert [o["name"] for o in model["outputs"]] == ["sum", "idx"]


def test_model_config_parses(client: Any) -> None:
    cfg = client.get_model_config("multi").config
    assert cfg.name == "multi"
    assert cfg.platform == "onnxruntime_onnx"
    assert cfg.max_batch_size == 32
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [("a", 11, [3]), ("b", 9, [3])]  # FP32, INT64
    assert [(o.name, list(o.dims)) for o in cfg.output] == [("sum", [3]), ("idx", [])]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 2000
    assert cfg.dynamic_batching.default_queue_policy.max_queue_size == 100
    assert cfg.parameters["format"].string_value == "onnx"
    assert cfg.instance_group[0].kind == 2  # KIND_CPU


def test_infer_fp32_raw(client: Any) -> None:
    x = np.array([[4.0], [-1.5]], dtype=np.float32)
    result = client.infer("linear", [_input("x", x, "FP32")], request_id="r1")
    np.testing.assert_array_equal(result.as_numpy("y"), np.array([[9.0], [-2.0]], dtype=np.float32))
    response = result.get_response()
    assert response.id == "r1"
    assert response.model_name == "linear"
    assert response.model_version == "1"


def test_infer_int64_and_requested_outputs(client: Any) -> None:
    a = np.array([[0.5, 3.0, 1.0]], dtype=np.float32)
    b = np.array([[1, 2, 2**40]], dtype=np.int64)
    inputs = [_input("a", a, "FP32"), _input("b", b, "INT64")]
    both = client.infer("multi", inputs)
    np.testing.assert_allclose(both.as_numpy("sum"), a + b.astype(np.float32))
    assert both.as_numpy("idx").dtype == np.int64
    assert both.as_numpy("idx").tolist() == [1]
    only = client.infer("multi", inputs, outputs=[InferRequestedOutput("idx")])
    assert [o.name for o in only.get_response().outputs] == ["idx"]
    assert only.as_numpy("sum") is None
    assert only.as_numpy("idx").tolist() == [1]


def test_infer_bytes(client: Any) -> None:
    s = np.array([b"hello", b"", "wörld".encode()], dtype=np.object_)
    result = client.infer("text", [_input("s", s, "BYTES")])
    assert result.as_numpy("out").tolist() == [b"hello", b"", "wörld".encode()]


def test_statistics_and_index(client: Any) -> None:
    client.infer("linear", [_input("x", np.ones((1, 1), np.float32), "FP32")])
    stats = client.get_inference_statistics("linear", as_json=True)["model_stats"][0]
    assert stats["name"] == "linear"
    assert int(stats["inference_stats"]["success"]["count"]) >= 1
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {m["name"]: m["state"] for m in index} == dict.fromkeys(("linear", "multi", "sleepy", "text"), "READY")


@pytest.mark.parametrize(
    ("arr", "datatype"),
    [
        (np.zeros((2, 2), np.float32), "FP32"),  # wrong shape
        (np.zeros((2, 1), np.int32), "INT32"),  # wrong dtype
        (np.zeros((2, 1), np.float64), "FP64"),
    ],
)
def test_bad_input_is_invalid_argument(client: Any, arr: np.ndarray, datatype: str) -> None:
    err = _fails(client.infer, "linear", [_input("x", arr, datatype)])
    assert str(err.status()) == "StatusCode.INVALID_ARGUMENT"
    assert "'x'" in err.message()


def test_unknown_model_is_not_found(client: Any) -> None:
    err = _fails(client.infer, "nope", [_input("x", np.zeros((1, 1), np.float32), "FP32")])
    assert str(err.status()) == "StatusCode.NOT_FOUND"
    assert "nope" in err.message()
    assert str(_fails(client.get_model_metadata, "nope").status()) == "StatusCode.NOT_FOUND"
    assert str(_fails(client.get_model_config, "linear", "7").status()) == "StatusCode.NOT_FOUND"


def test_client_deadline_is_deadline_exceeded(client: Any) -> None:
    err = _fails(client.infer, "sleepy", [_input("x", np.zeros((1, 1), np.float32), "FP32")], client_timeout=0.02)
    assert str(err.status()) == "StatusCode.DEADLINE_EXCEEDED"


def test_grpc_deadline_reaches_the_dataplane(client: Any, server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    real = server.dataplane.infer

    async def spy(request: Any) -> Any:
        seen.append(request)
        return await real(request)

    monkeypatch.setattr(server.dataplane, "infer", spy)
    x = [_input("x", np.zeros((1, 1), np.float32), "FP32")]
    client.infer("linear", x, client_timeout=5.0)
    client.infer("linear", x)
    assert seen[0].deadline is not None  # the client's 5 s reached the data plane as a deadline
    assert seen[0].deadline - time.monotonic() < 5.1  # never later than asked (gRPC rounds the wire timeout up)
    assert seen[1].deadline is None


def test_oversized_message_is_resource_exhausted(client: Any, server: Any) -> None:
    limit = server.config.grpc_max_message_bytes
    assert limit < 2**21
    x = np.zeros((limit // 4 + 1024, 1), np.float32)
    err = _fails(client.infer, "linear", [_input("x", x, "FP32")])
    assert str(err.status()) == "StatusCode.RESOURCE_EXHAUSTED"


def test_model_control_disabled_by_default(client: Any) -> None:
    assert str(_fails(client.load_model, "linear").status()) == "StatusCode.PERMISSION_DENIED"
    err = _fails(client.unload_model, "linear", headers={"authorization": "Bearer x"})
    assert str(err.status()) == "StatusCode.PERMISSION_DENIED"
    assert client.is_model_ready("linear")


def test_stream_infer(client: Any) -> None:
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i in range(3):
            client.async_stream_infer(
                "linear", [_input("x", np.array([[float(i)]], np.float32), "FP32")], request_id=f"ok{i}"
            )
        client.async_stream_infer("nope", [_input("x", np.array([[1.0]], np.float32), "FP32")], request_id="bad")
        got = [results.get(timeout=10) for _ in range(4)]
    finally:
        client.stop_stream()
    ok = {r.get_response().id: float(r.as_numpy("y")[0, 0]) for r, e in got if e is None}
    bad = [e for r, e in got if e is not None]
    assert ok == {"ok0": 1.0, "ok1": 3.0, "ok2": 5.0}
    assert len(bad) == 1
    assert "nope" in bad[0].message()
