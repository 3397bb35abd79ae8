"""TF Serving REST (``/v1/models/...``) <-> data plane types.

Row (``instances``) and columnar (``inputs``) request bodies, ``{"b64": ...}``
for bytes, and TF Serving's response shapes: ``predictions`` for rows,
``outputs`` for columns, with a single output unwrapped as TF Serving does.
JSON numbers are cast to the dtype the pinned signature declares.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from fwx.decimal_text import is_digits
from fwx.errors import InputError, first_line
from fwx.serving.codecs import MAX_ELEMENTS
from fwx.serving.json_values import numeric_array
from fwx.serving.rest.kserve import load_json
from fwx.serving.rest.schema import check_tf_predict_request
from fwx.serving.types import InferRequest, InferResponse, InferTensor
from fwx.signature import KSERVE_DTYPES, Signature, TensorSpec

SIGNATURE = "serving_default"
TF_DTYPES = {
    "float32": "DT_FLOAT",
    "float64": "DT_DOUBLE",
    "float16": "DT_HALF",
    "bfloat16": "DT_BFLOAT16",
    "int8": "DT_INT8",
    "int16": "DT_INT16",
    "int32": "DT_INT32",
    "int64": "DT_INT64",
    "uint8": "DT_UINT8",
    "uint16": "DT_UINT16",
    "uint32": "DT_UINT32",
    "uint64": "DT_UINT64",
    "bool": "DT_BOOL",
    "bytes": "DT_STRING",
}
TF_STATES = {"READY": "AVAILABLE", "LOADING": "LOADING", "UNAVAILABLE": "END", "FAILED": "END"}


def _b64(value: Any) -> Any:
    """Replace ``{"b64": "..."}`` leaves with bytes, anywhere in a nested list."""
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise InputError('an object inside tensor data must be {"b64": "..."}')
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise InputError('invalid base64 in a {"b64": ...} value') from None
    if isinstance(value, list):
        return [_b64(v) for v in value]
    if isinstance(value, str):
        return value.encode("utf-8")
    return value


def _to_array(spec: TensorSpec, value: Any) -> np.ndarray:
    try:
        if spec.dtype == "bytes":
            arr = np.array(_b64(value), dtype=object)
        elif spec.dtype == "bool":
            _check_bools(spec.name, value)
            arr = np.asarray(value, dtype=np.bool_)
        else:
            arr = numeric_array(spec.name, spec.dtype, np.dtype(spec.dtype), value)
    except InputError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        first = first_line(exc, 200)
        raise InputError(f"input {spec.name!r}: cannot read the values as {spec.dtype}: {first}") from None
    if arr.size > MAX_ELEMENTS:
        raise InputError(f"input {spec.name!r}: {arr.size} elements is over the limit")
    return arr


def _check_bools(name: str, value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif not isinstance(item, bool):
            raise InputError(f"input {name!r}: expected true/false, got {item!r}")


def _tensor(spec: TensorSpec, arr: np.ndarray) -> InferTensor:
    return InferTensor(spec.name, KSERVE_DTYPES[spec.dtype], list(arr.shape), arr)


def parse_predict(
    body: bytes, model: str, version: str | None, sig: Signature, deadline: float | None
) -> tuple[InferRequest, str]:
    """A ``:predict`` body -> (request, "instances" or "inputs")."""
    doc = load_json(body)
    check_tf_predict_request(doc)
    if not isinstance(doc, dict):
        raise InputError("the body must be a JSON object with 'instances' or 'inputs'")
    name = doc.get("signature_name", SIGNATURE)
    if name not in (SIGNATURE, "", None):
        raise InputError(f"unknown signature_name {name!r}", hint=f"fwx serves one signature, {SIGNATURE!r}")
    if ("instances" in doc) == ("inputs" in doc):
        raise InputError("send exactly one of 'instances' (row format) or 'inputs' (columnar format)")
    if "instances" in doc:
        arrays = _rows(doc["instances"], sig)
        style = "instances"
    else:
        arrays = _columns(doc["inputs"], sig)
        style = "inputs"
    inputs = [_tensor(spec, arrays[spec.name]) for spec in sig.inputs if spec.name in arrays]
    unknown = sorted(set(arrays) - set(sig.input_names))
    if unknown:
        raise InputError(
            f"unknown input(s): {', '.join(map(repr, unknown))}", hint=f"this model takes: {', '.join(sig.input_names)}"
        )
    return InferRequest(model, version, inputs, deadline=deadline), style


def _rows(instances: Any, sig: Signature) -> dict[str, np.ndarray]:
    if not isinstance(instances, list) or not instances:
        raise InputError("'instances' must be a non-empty list (one entry per example)")
    names = sig.input_names
    named = all(isinstance(r, dict) and set(r) != {"b64"} for r in instances)
    if not named:
        if len(names) != 1:
            raise InputError(
                f"this model takes {len(names)} inputs; each instance must be an object with keys {', '.join(names)}"
            )
        return {names[0]: _to_array(sig.inputs[0], instances)}
    keys = set(instances[0])
    if any(set(r) != keys for r in instances):
        raise InputError("every instance must have the same keys")
    specs = {s.name: s for s in sig.inputs}
    return {k: _to_array(specs[k], [r[k] for r in instances]) if k in specs else np.empty(0) for k in keys}


def _columns(inputs: Any, sig: Signature) -> dict[str, np.ndarray]:
    specs = {s.name: s for s in sig.inputs}
    if isinstance(inputs, dict) and set(inputs) != {"b64"}:
        return {k: _to_array(specs[k], v) if k in specs else np.empty(0) for k, v in inputs.items()}
    if len(specs) != 1:
        raise InputError(f"this model takes {len(specs)} inputs; 'inputs' must be an object keyed by input name")
    return {sig.inputs[0].name: _to_array(sig.inputs[0], inputs)}


def _jsonable(arr: np.ndarray) -> Any:
    if arr.dtype.kind in "OSU":
        return _bytes_list(arr.tolist())
    if arr.dtype == np.float16:
        return arr.astype(np.float32)
    return np.ascontiguousarray(arr)


def _bytes_list(value: Any) -> Any:
    if isinstance(value, list):
        return [_bytes_list(v) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
    return value


def encode_predict(resp: InferResponse, style: str) -> bytes:
    """TF Serving's response shape for the request's style."""
    outs = resp.outputs
    if style == "inputs":
        body: Any = _jsonable(outs[0].data) if len(outs) == 1 else {t.name: _jsonable(t.data) for t in outs}
        return orjson.dumps({"outputs": body}, option=orjson.OPT_SERIALIZE_NUMPY)
    if len(outs) == 1:
        return orjson.dumps({"predictions": _jsonable(outs[0].data)}, option=orjson.OPT_SERIALIZE_NUMPY)
    rows = min((t.data.shape[0] if t.data.ndim else 1) for t in outs)
    preds = [
        {t.name: _jsonable(t.data[i]) if t.data.ndim > 1 else _scalar(t.data[i]) for t in outs} for i in range(rows)
    ]
    return orjson.dumps({"predictions": preds}, option=orjson.OPT_SERIALIZE_NUMPY)


def _scalar(value: Any) -> Any:
    if isinstance(value, bytes):
        return _bytes_list(value)
    return value.item() if hasattr(value, "item") else value


def model_status(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """GET /v1/models/{m}: one status per known version, newest first (TF Serving's order)."""
    status = []
    for e in sorted(entries, key=lambda e: int(e["version"]) if is_digits(str(e["version"])) else 0, reverse=True):
        failed = e["state"] == "FAILED"
        status.append(
            {
                "version": str(e["version"]),
                "state": TF_STATES.get(e["state"], "END"),
                "status": {
                    "error_code": "UNKNOWN" if failed else "OK",
                    "error_message": e.get("reason", "") if failed else "",
                },
            }
        )
    return {"model_version_status": status}


def _tensor_info(spec: TensorSpec, tensor_name: str) -> dict[str, Any]:
    dims = [{"size": str(d), "name": ""} for d in spec.kserve_shape()]
    return {
        "dtype": TF_DTYPES.get(spec.dtype, "DT_INVALID"),
        "tensor_shape": {"dim": dims, "unknown_rank": False},
        "name": tensor_name,
    }


def _op_name(name: str) -> str:
    """``name`` with the characters TF refuses in op names replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", name)


def tf_tensor_names(sig: Signature) -> tuple[dict[str, str], dict[str, str]]:
    """The graph tensor names TF Serving shows for a ``tf.saved_model.save`` export of this signature.

    Inputs are the signature's placeholders, ``serving_default_<name>:0``; outputs
    are the outputs of the one call op, ``StatefulPartitionedCall:<i>``, numbered
    in sorted key order (how TF flattens a dict of outputs).
    """
    inputs = {s.name: f"{SIGNATURE}_{_op_name(s.name)}:0" for s in sig.inputs}
    outputs = {n: f"StatefulPartitionedCall:{i}" for i, n in enumerate(sorted(sig.output_names))}
    return inputs, outputs


def model_metadata(name: str, version: str, sig: Signature) -> dict[str, Any]:
    """GET /v1/models/{m}/metadata in TF Serving's JSON shape, with TF's tensor names."""
    in_names, out_names = tf_tensor_names(sig)
    sig_def = {
        "inputs": {s.name: _tensor_info(s, in_names[s.name]) for s in sig.inputs},
        "outputs": {s.name: _tensor_info(s, out_names[s.name]) for s in sig.outputs},
        "method_name": "tensorflow/serving/predict",
    }
    return {
        "model_spec": {"name": name, "signature_name": "", "version": version},
        "metadata": {"signature_def": {"signature_def": {SIGNATURE: sig_def}}},
    }
