"""Protobuf <-> data-plane translation, without a server."""

from __future__ import annotations

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.serving.grpc import codecs as gc
from fwx.serving.proto import grpc_service_pb2 as pb
from fwx.serving.types import InferResponse, InferTensor


def test_raw_inputs_and_parameters_decode() -> None:
    req = pb.ModelInferRequest(model_name="m", model_version="", id="7")
    t = req.inputs.add(name="x", datatype="FP32", shape=[2, 2])
    t.parameters["scale"].double_param = 0.5
    req.parameters["priority"].int64_param = 2
    req.parameters["flag"].bool_param = True
    req.outputs.add(name="y")
    req.raw_input_contents.append(np.arange(4, dtype="<f4").tobytes())
    out = gc.decode_infer_request(req, deadline=12.5)
    assert out.model_version is None
    assert out.id == "7"
    assert out.deadline == 12.5
    assert out.parameters == {"priority": 2, "flag": True}
    assert out.inputs[0].parameters == {"scale": 0.5}
    np.testing.assert_array_equal(out.inputs[0].data, np.arange(4, dtype=np.float32).reshape(2, 2))
    assert [o.name for o in out.outputs] == ["y"]


@pytest.mark.parametrize(
    ("datatype", "field", "values", "dtype"),
    [
        ("FP32", "fp32_contents", [1.5, -2.0], np.float32),
        ("FP64", "fp64_contents", [1.5, -2.0], np.float64),
        ("INT8", "int_contents", [-128, 127], np.int8),
        ("INT64", "int64_contents", [2**40, -3], np.int64),
        ("UINT16", "uint_contents", [0, 65535], np.uint16),
        ("UINT64", "uint64_contents", [2**63, 1], np.uint64),
        ("BOOL", "bool_contents", [True, False], np.bool_),
    ],
)
def test_typed_contents(datatype: str, field: str, values: list, dtype: type) -> None:
    req = pb.ModelInferRequest(model_name="m")
    t = req.inputs.add(name="x", datatype=datatype, shape=[2])
    getattr(t.contents, field).extend(values)
    arr = gc.decode_infer_request(req, None).inputs[0].data
    assert arr.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(arr, np.array(values, dtype=dtype))


def test_typed_bytes() -> None:
    req = pb.ModelInferRequest(model_name="m")
    req.inputs.add(name="s", datatype="BYTES", shape=[1, 2]).contents.bytes_contents.extend([b"ab", b""])
    arr = gc.decode_infer_request(req, None).inputs[0].data
    assert arr.shape == (1, 2)
    assert arr.dtype == object
    assert arr[0, 0] == b"ab"


@pytest.mark.parametrize(
    ("datatype", "shape", "fill", "needle"),
    [
        ("INT8", [1], lambda c: c.int_contents.append(300), "out of range"),
        ("FP32", [3], lambda c: c.fp32_contents.extend([1.0, 2.0]), "needs 3 elements"),
        ("FP16", [1], lambda c: None, "raw_input_contents"),
        ("COMPLEX", [1], lambda c: None, "unsupported datatype"),
        ("FP32", [-1], lambda c: None, "negative"),
    ],
)
def test_bad_typed_contents(datatype: str, shape: list, fill: object, needle: str) -> None:
    req = pb.ModelInferRequest(model_name="m")
    t = req.inputs.add(name="inp0", datatype=datatype, shape=shape)
    fill(t.contents)  # type: ignore[operator]
    with pytest.raises(InputError, match=needle) as err:
        gc.decode_infer_request(req, None)
    assert "'inp0'" in err.value.message


def test_raw_errors_name_the_tensor() -> None:
    req = pb.ModelInferRequest(model_name="m")
    req.inputs.add(name="a", datatype="FP32", shape=[2**62, 4])
    req.raw_input_contents.append(b"\0" * 16)
    with pytest.raises(InputError, match="'a'"):
        gc.decode_infer_request(req, None)
    req.inputs.add(name="b", datatype="FP32", shape=[1])
    with pytest.raises(InputError, match="2 inputs but 1 raw"):
        gc.decode_infer_request(req, None)


def test_mixed_raw_and_typed_refused() -> None:
    req = pb.ModelInferRequest(model_name="m")
    req.inputs.add(name="a", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
    req.raw_input_contents.append(b"\0" * 4)
    with pytest.raises(InputError, match="both"):
        gc.decode_infer_request(req, None)


def test_response_is_raw_and_round_trips() -> None:
    y = np.array([[1.0, 2.0]], dtype=np.float32)
    s = np.array([b"hi", b"there"], dtype=object)
    resp = InferResponse(
        "m",
        "3",
        [InferTensor("y", "FP32", [1, 2], y, {"note": "x"}), InferTensor("s", "BYTES", [2], s)],
        id="q",
        parameters={"big": 2**64 - 1, "f": 0.25},
    )
    msg = gc.encode_infer_response(resp)
    assert [o.name for o in msg.outputs] == ["y", "s"]
    assert not msg.outputs[0].HasField("contents")
    assert np.frombuffer(msg.raw_output_contents[0], "<f4").tolist() == [1.0, 2.0]
    assert msg.raw_output_contents[1] == b"\x02\x00\x00\x00hi\x05\x00\x00\x00there"
    assert gc.params_from_pb(msg.parameters) == {"big": 2**64 - 1, "f": 0.25}
    assert gc.params_from_pb(msg.outputs[0].parameters) == {"note": "x"}


def test_model_config_and_stats_from_json() -> None:
    cfg = gc.model_config_to_pb(
        {
            "name": "m",
            "platform": "tflite",
            "max_batch_size": 8,
            "input": [{"name": "x", "data_type": "TYPE_INT64", "dims": [-1, 3]}],
            "output": [{"name": "y", "data_type": "TYPE_FP16", "dims": [3]}],
            "dynamic_batching": {"max_queue_delay_microseconds": 100},
            "parameters": {"format": "tflite"},
            "some_future_key": 1,
        }
    ).config
    assert cfg.input[0].data_type == 9
    assert list(cfg.input[0].dims) == [-1, 3]
    assert cfg.output[0].data_type == 10
    assert cfg.parameters["format"].string_value == "tflite"
    stats = gc.model_statistics_to_pb(
        {
            "model_stats": [
                {
                    "name": "m",
                    "version": "1",
                    "inference_count": 5,
                    "inference_stats": {"queue": {"count": 5, "ns": 99}},
                }
            ]
        }
    )
    assert stats.model_stats[0].inference_stats.queue.ns == 99
    idx = gc.repository_index_to_pb(
        [{"name": "a", "version": 1, "state": "READY"}, {"name": "b", "version": 2, "state": "FAILED", "reason": "bad"}]
    )
    assert [(m.name, m.version, m.reason) for m in idx.models] == [("a", "1", ""), ("b", "2", "bad")]
