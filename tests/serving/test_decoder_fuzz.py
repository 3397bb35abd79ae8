"""Property-based fuzz of every request decoder: anything a client sends is decoded or refused as a 4xx.

Each decoder (v2 JSON, the binary tensor extension, TF Serving JSON, gRPC
messages and raw gRPC bytes) is fed generated input and then the request
plan of a real signature; the only exception allowed out is an ``FwxError``
with a 4xx status (gRPC: not INTERNAL/UNKNOWN). Bounded: 200 examples per
decoder, no deadline, no example database.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fwx.errors import FwxError
from fwx.serving.grpc import codecs as grpc_codecs
from fwx.serving.grpc.safe_decode import BadMessage
from fwx.serving.proto import grpc_service_pb2 as pb
from fwx.serving.rest import kserve, tf_serving
from fwx.serving.signature_check import RequestPlan
from fwx.signature import Signature, TensorSpec

FUZZ = settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
SIGS = [
    Signature((TensorSpec("x", "float32", ("N", 1)),), (TensorSpec("y", "float32", ("N", 1)),)),
    Signature(
        (TensorSpec("a", "float32", ("N", 3)), TensorSpec("b", "int64", ("N", 3))),
        (TensorSpec("y", "float32", ("N", 3)),),
    ),
    Signature((TensorSpec("s", "bytes", ("N",)),), (TensorSpec("y", "int64", ("N",)),)),
]
DATATYPES = ["FP32", "FP64", "FP16", "INT64", "INT8", "UINT8", "BOOL", "BYTES", "BF16", "INT4", ""]

_numbers = st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.sampled_from([0, 1, -1, 1.5, 1e300])
_leaf = st.none() | st.booleans() | _numbers | st.text(max_size=4) | st.fixed_dictionaries({"b64": st.text(max_size=8)})
_json = st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=16,
)
_shape = st.lists(st.integers(-2, 4) | st.sampled_from([2**62, 2**31]), max_size=4) | _json
_tensor = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["x", "a", "b", "s", "z"]) | _json,
        "shape": _shape,
        "datatype": st.sampled_from(DATATYPES) | _json,
    },
    optional={
        "data": st.lists(_leaf, max_size=6) | st.lists(st.lists(_numbers, max_size=3), max_size=3) | _json,
        "parameters": st.fixed_dictionaries({}, optional={"binary_data_size": st.integers(-4, 64) | _json}) | _json,
    },
)
_infer_doc = st.fixed_dictionaries(
    {"inputs": st.lists(_tensor, max_size=3) | _json},
    optional={
        "outputs": st.lists(
            st.fixed_dictionaries({"name": st.text(max_size=3) | _json}, optional={"parameters": _json}), max_size=2
        )
        | _json,
        "id": st.text(max_size=4) | _json,
        "parameters": st.dictionaries(st.sampled_from(["binary_data_output", "timeout", "p"]), _leaf, max_size=2)
        | _json,
    },
)


def _client_error(exc: FwxError) -> None:
    assert 400 <= exc.http_status < 500, f"{type(exc).__name__} {exc.http_status}: {exc}"
    assert exc.grpc_code not in ("INTERNAL", "UNKNOWN"), exc
    assert "\n" not in str(exc)


def _through_plan(sig: Signature, request: Any) -> None:
    plan = RequestPlan(sig, batchable=True)
    plan.check(request.inputs)
    if request.outputs:
        plan.check_outputs(request.outputs)


def _decode_json(sig: Signature, body: bytes, header_len: str | None = None) -> None:
    try:
        request, _ = kserve.parse_infer(body, header_len, "m", None, lambda: sig, None)
        _through_plan(sig, request)
    except FwxError as exc:
        _client_error(exc)


@FUZZ
@given(sig=st.sampled_from(SIGS), doc=_infer_doc | _json)
def test_v2_json_decoder(sig: Signature, doc: Any) -> None:
    _decode_json(sig, orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS) if _dumpable(doc) else b"{")


@FUZZ
@given(
    sig=st.sampled_from(SIGS),
    doc=_infer_doc,
    blob=st.binary(max_size=64),
    header=st.none() | st.integers(-3, 600).map(str) | st.sampled_from(["", "x", "1e3", " 7"]),
)
def test_binary_extension_decoder(sig: Signature, doc: Any, blob: bytes, header: str | None) -> None:
    head = orjson.dumps(doc) if _dumpable(doc) else b"{"
    real = str(len(head)) if header is None else header
    _decode_json(sig, head + blob, real)
    _decode_json(sig, blob, "0")  # a raw single-input body


@FUZZ
@given(
    sig=st.sampled_from(SIGS),
    doc=st.fixed_dictionaries(
        {},
        optional={
            "instances": _json | st.lists(st.lists(_numbers, max_size=2), max_size=3),
            "inputs": _json | st.dictionaries(st.sampled_from(["x", "a", "b", "s"]), _json, max_size=3),
            "signature_name": _json | st.just("serving_default"),
        },
    )
    | _json,
)
def test_tf_serving_decoder(sig: Signature, doc: Any) -> None:
    try:
        body = orjson.dumps(doc) if _dumpable(doc) else b"[1,"
        request, _ = tf_serving.parse_predict(body, "m", None, sig, None)
        _through_plan(sig, request)
    except FwxError as exc:
        _client_error(exc)


_pb_tensor = st.builds(
    lambda name, datatype, shape, fp32, i64, by, params: _pb_input(name, datatype, shape, fp32, i64, by, params),
    st.sampled_from(["x", "a", "b", "s", ""]),
    st.sampled_from(DATATYPES),
    st.lists(st.integers(-2, 2**62), max_size=4),
    st.lists(st.floats(width=32), max_size=4),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
    st.lists(st.binary(max_size=4), max_size=3),
    st.dictionaries(st.sampled_from(["p", "q"]), st.booleans() | st.integers(-9, 9) | st.text(max_size=3), max_size=2),
)


def _pb_input(
    name: str,
    datatype: str,
    shape: list[int],
    fp32: list[float],
    i64: list[int],
    by: list[bytes],
    params: dict[str, Any],
) -> Any:
    t = pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
    t.contents.fp32_contents.extend(fp32)
    t.contents.int64_contents.extend(i64)
    t.contents.bytes_contents.extend(by)
    grpc_codecs.params_to_pb(params, t.parameters)
    return t


@FUZZ
@given(
    sig=st.sampled_from(SIGS),
    inputs=st.lists(_pb_tensor, max_size=3),
    raw=st.none() | st.lists(st.binary(max_size=24), max_size=3),
    outputs=st.lists(st.text(max_size=2), max_size=2),
)
def test_grpc_message_decoder(sig: Signature, inputs: list[Any], raw: list[bytes] | None, outputs: list[str]) -> None:
    msg = pb.ModelInferRequest(
        model_name="m",
        inputs=inputs,
        outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name=o) for o in outputs],
    )
    if raw is not None:
        msg.raw_input_contents.extend(raw)
    try:
        _through_plan(sig, grpc_codecs.decode_infer_request(msg, None))
    except FwxError as exc:
        _client_error(exc)


@FUZZ
@given(sig=st.sampled_from(SIGS), data=st.binary(max_size=96))
def test_grpc_bytes_decoder(sig: Signature, data: bytes) -> None:
    """Bytes off the wire: a parse failure is the server's INVALID_ARGUMENT path (BadMessage), never a crash."""
    try:
        msg = pb.ModelInferRequest.FromString(data)
    except Exception:  # noqa: BLE001 - exactly what safe_decode turns into BadMessage
        assert "not a valid protobuf" in BadMessage("ModelInfer").message
        return
    try:
        _through_plan(sig, grpc_codecs.decode_infer_request(msg, None))
    except FwxError as exc:
        _client_error(exc)


def _dumpable(doc: Any) -> bool:
    try:
        orjson.dumps(doc)
    except (TypeError, orjson.JSONEncodeError):
        return False
    return True


# ------------------------------------------------------------------ over the wire
@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("fuzz") / "repo", {"linear": "linear"})
    srv = live_server(repo, load_probe=False, grpc_port=0, http_port=-1)
    with grpc.insecure_channel(srv.grpc_url) as ch:
        yield ch


GARBAGE = [b"\xff\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", b"\x12\x05abc", b"\x08" * 9, b"\x1a\x80\x80\x80\x80\x10"]


@pytest.mark.parametrize("rpc", ["ModelInfer", "ModelMetadata", "ModelReady", "RepositoryIndex", "ModelConfig"])
def test_garbage_bytes_on_a_raw_channel_are_invalid_argument(channel: grpc.Channel, rpc: str) -> None:
    call = channel.unary_unary(f"/inference.GRPCInferenceService/{rpc}")
    for payload in GARBAGE:
        with pytest.raises(grpc.RpcError) as err:
            call(payload, timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (payload, err.value.details())
        assert err.value.details() == f"the {rpc} request is not a valid protobuf message"


def test_garbage_in_a_stream_is_an_error_reply_and_the_stream_goes_on(channel: grpc.Channel) -> None:
    good = pb.ModelInferRequest(model_name="linear", id="ok")
    x = good.inputs.add(name="x", datatype="FP32", shape=[1, 1])
    x.contents.fp32_contents.append(4.0)
    stream = channel.stream_stream(
        "/inference.GRPCInferenceService/ModelStreamInfer", response_deserializer=pb.ModelStreamInferResponse.FromString
    )
    replies = list(stream(iter([GARBAGE[0], good.SerializeToString()]), timeout=30))
    errors = sorted(r.error_message for r in replies)
    assert errors == ["", "the ModelStreamInfer request is not a valid protobuf message"]


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.binary(max_size=64))
def test_random_bytes_over_grpc_never_internal(channel: grpc.Channel, data: bytes) -> None:
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    code, details = grpc.StatusCode.OK, ""
    try:
        call(data, timeout=30)
    except grpc.RpcError as err:
        code, details = err.code(), err.details()
    assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), details
