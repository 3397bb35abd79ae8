"""KServe v2 REST bodies <-> data plane types, including the binary tensor extension.

JSON is parsed with orjson into plain dicts (no pydantic per request); orjson
refuses nesting deeper than 1024 and the tensor decoders refuse anything whose
size does not match its shape. Binary tensors are decoded as zero-copy views
of the request body.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from fwx.decimal_text import is_digits
from fwx.errors import InputError
from fwx.serving.codecs import decode_json_data, decode_raw, encode_raw, json_data
from fwx.serving.rest.schema import check_infer_request
from fwx.serving.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from fwx.signature import KSERVE_DTYPES, Signature, is_dynamic

HEADER_LEN = "inference-header-content-length"
_DUMP_OPTS = orjson.OPT_SERIALIZE_NUMPY


def load_json(data: bytes | memoryview) -> Any:
    """orjson.loads with every failure (syntax, depth, encoding) turned into a 400."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        hint = (
            (
                "JSON strings must be valid Unicode; send bytes that are not UTF-8 with the binary tensor "
                "extension (binary_data_size) or gRPC"
            )
            if "surrogate" in str(exc)
            else None
        )
        raise InputError(f"request body is not valid JSON: {str(exc)[:200]}", hint=hint) from None


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InputError(f"{where}: '{key}' is missing or not a {getattr(kind, '__name__', 'valid value')}")
    return value


def _params(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    params = obj.get("parameters") or {}
    if not isinstance(params, dict):
        raise InputError(f"{where}: 'parameters' must be an object")
    return params


def parse_infer(
    body: bytes,
    header_len: str | None,
    model: str,
    version: str | None,
    signature: Callable[[], Signature],
    deadline: float | None,
) -> tuple[InferRequest, bool]:
    """The request, and whether outputs default to binary (raw-body requests answer in binary)."""
    if header_len is None:
        json_part, binary = memoryview(body), memoryview(b"")
    else:
        if not is_digits(header_len.strip()) or int(header_len) > len(body):
            raise InputError(
                f"Inference-Header-Content-Length {header_len[:20]!r} does not fit a {len(body)}-byte body"
            )
        n = int(header_len)
        if n == 0:
            return _raw_request(body, model, version, signature(), deadline), True
        view = memoryview(body)
        json_part, binary = view[:n], view[n:]
    doc = load_json(json_part)
    check_infer_request(doc)
    if not isinstance(doc, dict):
        raise InputError("the request body must be a JSON object with an 'inputs' list")
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise InputError("the request needs a non-empty 'inputs' list")
    params = _params(doc, "request")
    binary_out = params.pop("binary_data_output", False) is True
    inputs, offset = [], 0
    for i, item in enumerate(raw_inputs):
        tensor, used = _input(item, i, binary, offset)
        inputs.append(tensor)
        offset += used
    if offset != len(binary):
        raise InputError(
            f"the body has {len(binary) - offset} bytes of binary data no input claims",
            hint="binary_data_size of the inputs must add up to the bytes after the JSON header",
        )
    outputs = [_output(o, i, binary_out) for i, o in enumerate(doc.get("outputs") or [])]
    req_id = doc.get("id", "")
    return InferRequest(
        model,
        version,
        inputs,
        outputs,
        id=req_id if isinstance(req_id, str) else str(req_id),
        parameters=params,
        deadline=deadline,
    ), binary_out


def _input(item: Any, i: int, binary: memoryview, offset: int) -> tuple[InferTensor, int]:
    if not isinstance(item, dict):
        raise InputError(f"inputs[{i}] must be an object")
    name = _field(item, "name", str, f"inputs[{i}]")
    datatype = _field(item, "datatype", str, f"input {name!r}")
    shape = _field(item, "shape", list, f"input {name!r}")
    params = _params(item, f"input {name!r}")
    size = params.get("binary_data_size")
    if size is None:
        if "data" not in item:
            raise InputError(f"input {name!r} has neither 'data' nor a binary_data_size parameter")
        return InferTensor(name, datatype, shape, decode_json_data(name, datatype, shape, item["data"]), params), 0
    if "data" in item:
        raise InputError(
            f"input {name!r} has both 'data' and a binary_data_size parameter",
            hint="send the tensor either as JSON 'data' or as binary after the header, not both",
        )
    if isinstance(size, bool) or not isinstance(size, int) or size < 0 or offset + size > len(binary):
        raise InputError(
            f"input {name!r}: binary_data_size {size!r} does not fit the {len(binary) - offset} "
            "binary bytes left in the body"
        )
    data = decode_raw(name, datatype, shape, binary[offset : offset + size])
    return InferTensor(name, datatype, shape, data, params), size


def _output(item: Any, i: int, binary_default: bool) -> RequestedOutput:
    if not isinstance(item, dict):
        raise InputError(f"outputs[{i}] must be an object")
    name = _field(item, "name", str, f"outputs[{i}]")
    params = _params(item, f"output {name!r}")
    binary = params.get("binary_data", binary_default)
    return RequestedOutput(name, binary=binary is True, parameters=params)


def _raw_request(body: bytes, model: str, version: str | None, sig: Signature, deadline: float | None) -> InferRequest:
    """Inference-Header-Content-Length: 0 -- the whole body is the only input, batch 1."""
    if len(sig.inputs) != 1:
        raise InputError(
            f"a raw binary request needs a model with one input; {model} has {len(sig.inputs)}",
            hint="send a JSON header with Inference-Header-Content-Length",
        )
    spec = sig.inputs[0]
    dims = list(spec.shape)
    if dims and is_dynamic(dims[0]):
        dims[0] = 1
    if any(is_dynamic(d) for d in dims) or spec.dtype == "bytes":
        raise InputError(
            f"input {spec.name!r} has dynamic dimensions {spec.kserve_shape()}; a raw binary request "
            "cannot say its shape",
            hint="send a JSON header with the shape",
        )
    shape = [int(d) for d in dims]
    datatype = KSERVE_DTYPES[spec.dtype]
    data = decode_raw(spec.name, datatype, shape, memoryview(body))
    return InferRequest(model, version, [InferTensor(spec.name, datatype, shape, data)], deadline=deadline)


def encode_infer(resp: InferResponse, request: InferRequest, binary_default: bool) -> tuple[bytes, int | None]:
    """The response body, and the JSON header length when binary tensors follow it."""
    wanted = {o.name: o.binary for o in request.outputs}
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for t in resp.outputs:
        entry: dict[str, Any] = {"name": t.name, "datatype": t.datatype, "shape": t.shape}
        if t.parameters:  # e.g. a text task's content_type
            entry["parameters"] = dict(t.parameters)
        if wanted.get(t.name, binary_default):
            raw = encode_raw(t.data)
            entry["parameters"] = {**entry.get("parameters", {}), "binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = json_data(t.data, t.name)
        entries.append(entry)
    doc: dict[str, Any] = {"model_name": resp.model_name, "model_version": resp.model_version, "outputs": entries}
    if resp.id:
        doc["id"] = resp.id
    if resp.parameters:
        doc["parameters"] = resp.parameters
    head = orjson.dumps(doc, option=_DUMP_OPTS)
    if not blobs:
        return head, None
    return b"".join([head, *blobs]), len(head)


def deadline_from_header(value: str | None) -> float | None:
    """``Inference-Timeout: <ms>`` -> a time.monotonic() deadline."""
    if value is None:
        return None
    try:
        ms = float(value)
    except ValueError:
        raise InputError(f"Inference-Timeout {value[:40]!r} is not a number of milliseconds") from None
    if not ms >= 0:
        raise InputError("Inference-Timeout must be a non-negative number of milliseconds")
    return time.monotonic() + ms / 1000.0
