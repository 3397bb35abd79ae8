"""KServe v2 protobuf messages <-> the data plane's types.

The gRPC transport's only translation layer: everything here is pure (no
grpc import, no I/O), so it is unit-testable without a server. Raw tensor
bytes go through the shared, overflow-safe ``fwx.serving.codecs``; typed
``contents`` are checked against the declared shape before use. Responses
always use ``raw_output_contents`` (what tritonclient and perf_analyzer read).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from google.protobuf import json_format

from fwx.errors import InputError
from fwx.serving.codecs import decode_raw, element_count, encode_raw, np_dtype
from fwx.serving.proto import grpc_service_pb2 as pb
from fwx.serving.types import InferRequest, InferResponse, InferTensor, RequestedOutput

#: datatype -> (InferTensorContents field, dtype that field holds on the wire)
_CONTENTS: dict[str, tuple[str, np.dtype]] = {
    "BOOL": ("bool_contents", np.dtype(np.bool_)),
    "INT8": ("int_contents", np.dtype(np.int32)),
    "INT16": ("int_contents", np.dtype(np.int32)),
    "INT32": ("int_contents", np.dtype(np.int32)),
    "INT64": ("int64_contents", np.dtype(np.int64)),
    "UINT8": ("uint_contents", np.dtype(np.uint32)),
    "UINT16": ("uint_contents", np.dtype(np.uint32)),
    "UINT32": ("uint_contents", np.dtype(np.uint32)),
    "UINT64": ("uint64_contents", np.dtype(np.uint64)),
    "FP32": ("fp32_contents", np.dtype(np.float32)),
    "FP64": ("fp64_contents", np.dtype(np.float64)),
    "BYTES": ("bytes_contents", np.dtype(object)),
}


# ---------------------------------------------------------------- parameters


def params_from_pb(params: Mapping[str, Any]) -> dict[str, Any]:
    """``map<string, InferParameter>`` -> plain dict (the oneof that is set, or None)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        which = value.WhichOneof("parameter_choice")
        out[key] = getattr(value, which) if which else None
    return out


def params_to_pb(params: Mapping[str, Any], target: Any) -> None:
    """Fill a ``map<string, InferParameter>`` from a dict; values of other types become strings."""
    for key, value in params.items():
        if value is None:
            continue
        slot = target[key]
        if isinstance(value, bool):
            slot.bool_param = value
        elif isinstance(value, int):
            if value < 2**63:
                slot.int64_param = value
            else:
                slot.uint64_param = value
        elif isinstance(value, float):
            slot.double_param = value
        else:
            slot.string_param = value if isinstance(value, str) else str(value)


# ---------------------------------------------------------------- inference


def decode_infer_request(msg: Any, deadline: float | None) -> InferRequest:
    """A ``ModelInferRequest`` -> ``InferRequest``; raises InputError naming the bad tensor."""
    raw = msg.raw_input_contents
    inputs = msg.inputs
    if raw and len(raw) != len(inputs):
        raise InputError(
            f"request has {len(inputs)} inputs but {len(raw)} raw_input_contents",
            hint="send one raw buffer per input, in input order, or use typed contents for all",
        )
    tensors = []
    for i, t in enumerate(inputs):
        name, datatype, shape = t.name, t.datatype, list(t.shape)
        if raw:
            if t.HasField("contents"):
                raise InputError(f"input {name!r}: has both contents and raw_input_contents", hint="use one form")
            data = decode_raw(name, datatype, shape, raw[i])
        else:
            data = decode_contents(name, datatype, shape, t.contents)
        params = params_from_pb(t.parameters) if t.parameters else {}
        tensors.append(InferTensor(name, datatype, shape, data, params))
    outputs = [
        RequestedOutput(o.name, False, params_from_pb(o.parameters) if o.parameters else {}) for o in msg.outputs
    ]
    return InferRequest(
        model_name=msg.model_name,
        model_version=msg.model_version or None,
        inputs=tensors,
        outputs=outputs,
        id=msg.id,
        parameters=params_from_pb(msg.parameters) if msg.parameters else {},
        deadline=deadline,
    )


def decode_contents(name: str, datatype: str, shape: list[int], contents: Any) -> np.ndarray:
    """Typed ``InferTensorContents`` -> array, with the element count checked against ``shape``."""
    count = element_count(name, shape)
    spec = _CONTENTS.get(datatype)
    if spec is None:
        np_dtype(name, datatype)  # raises for unknown datatypes
        raise InputError(
            f"input {name!r}: {datatype} cannot be sent as typed contents",
            hint="send it in raw_input_contents (little-endian bytes)",
        )
    field, wire = spec
    values = getattr(contents, field)
    if len(values) != count:
        raise InputError(f"input {name!r}: shape {shape} needs {count} elements, {field} has {len(values)}")
    if datatype == "BYTES":
        arr = np.empty(count, dtype=object)
        arr[:] = list(values)
        return arr.reshape(shape)
    arr = np.asarray(values, dtype=wire)
    target = np_dtype(name, datatype)
    if target != wire:
        info = np.iinfo(target)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise InputError(f"input {name!r}: a value is out of range for {datatype}")
        arr = arr.astype(target)
    return arr.reshape(shape)


def encode_infer_response(resp: InferResponse) -> Any:
    """``InferResponse`` -> ``ModelInferResponse`` with every output in raw_output_contents."""
    msg = pb.ModelInferResponse(model_name=resp.model_name, model_version=resp.model_version, id=resp.id)
    outs = msg.outputs
    raw = []
    for t in resp.outputs:
        out = outs.add(name=t.name, datatype=t.datatype, shape=t.shape)
        if t.parameters:
            params_to_pb(t.parameters, out.parameters)
        raw.append(encode_raw(t.data))
    msg.raw_output_contents.extend(raw)
    if resp.parameters:
        params_to_pb(resp.parameters, msg.parameters)
    return msg


# ---------------------------------------------------------------- metadata, config, stats


def server_metadata_to_pb(meta: Mapping[str, Any]) -> Any:
    return pb.ServerMetadataResponse(
        name=str(meta.get("name", "")),
        version=str(meta.get("version", "")),
        extensions=[str(e) for e in meta.get("extensions", ())],
    )


def _tensor_metadata(items: Iterable[Mapping[str, Any]]) -> list[Any]:
    return [
        pb.ModelMetadataResponse.TensorMetadata(
            name=t["name"], datatype=t["datatype"], shape=[int(d) for d in t["shape"]]
        )
        for t in items
    ]


def model_metadata_to_pb(meta: Mapping[str, Any]) -> Any:
    """Model metadata dict -> message (the protocol has no slot for ``parameters``)."""
    return pb.ModelMetadataResponse(
        name=meta["name"],
        versions=[str(v) for v in meta.get("versions", ())],
        platform=str(meta.get("platform", "")),
        inputs=_tensor_metadata(meta.get("inputs", ())),
        outputs=_tensor_metadata(meta.get("outputs", ())),
    )


def model_config_to_pb(config: Mapping[str, Any]) -> Any:
    """Triton-style config JSON -> ``ModelConfigResponse``.

    The JSON form of Triton's config is the protobuf JSON mapping of the
    message, so json_format does the work; fields fwx's proto subset leaves out
    are ignored. Plain string parameters are wrapped as ``{"string_value": ...}``.
    """
    data = dict(config)
    if isinstance(data.get("parameters"), Mapping):
        data["parameters"] = {
            k: v if isinstance(v, Mapping) else {"string_value": str(v)} for k, v in data["parameters"].items()
        }
    msg = pb.ModelConfigResponse()
    json_format.ParseDict(data, msg.config, ignore_unknown_fields=True)
    return msg


def model_statistics_to_pb(stats: Mapping[str, Any]) -> Any:
    """Triton stats JSON (``{"model_stats": [...]}``) -> ``ModelStatisticsResponse``."""
    msg = pb.ModelStatisticsResponse()
    json_format.ParseDict(dict(stats), msg, ignore_unknown_fields=True)
    return msg


def repository_index_to_pb(index: Iterable[Mapping[str, Any]]) -> Any:
    """The index as the data plane filtered it."""
    models = [
        pb.RepositoryIndexResponse.ModelIndex(
            name=str(m["name"]),
            version=str(m.get("version", "")),
            state=str(m.get("state", "")),
            reason=str(m.get("reason") or ""),
        )
        for m in index
    ]
    return pb.RepositoryIndexResponse(models=models)
