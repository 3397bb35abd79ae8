"""Reading signatures and metadata as data, never running the model.

``fwx inspect`` and the exporter's source defaults use these: ONNX through its
protobuf, SavedModel through ``saved_model_pb2`` (no ``tf.saved_model.load``),
TFLite through the interpreter's tensor details, Keras through ``config.json``
(or the ``.h5`` ``model_config`` attribute). Artifacts written by fwx are read
back through their runtimes instead (``fwx.runtimes``).
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fwx.errors import InputError, UnsafeModelError, first_line
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.runtimes.files import CORRUPT_HINT, check_tflite_file, load_onnx
from fwx.signature import Signature, TensorSpec, spec_from_dims


def onnx_signature(path: Path) -> tuple[Signature, dict[str, Any]]:
    """Graph inputs (minus initializers) and outputs; ``dim_param`` symbols become dynamic dims."""
    onnx = require("onnx", "reading ONNX models")
    model = load_onnx(path)
    graph = model.graph
    if not graph.output:
        raise InputError(f"{path} has no graph outputs", hint=CORRUPT_HINT)
    init = {i.name for i in graph.initializer}

    def spec(vi: Any) -> TensorSpec:
        t = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type) if t.elem_type else "float32"
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
        return spec_from_dims(vi.name, dtype, dims)

    sig = Signature(tuple(spec(v) for v in graph.input if v.name not in init), tuple(spec(v) for v in graph.output))
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    meta = {
        "opset": opsets.get("ai.onnx"),
        "opsets": opsets,
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "nodes": len(graph.node),
        "op_types": dict(Counter(n.op_type for n in graph.node).most_common()),
        "metadata": {p.key: p.value for p in model.metadata_props},
    }
    return sig, meta


def savedmodel_proto(path: Path) -> Any:
    require("tensorflow", "reading SavedModels")
    with quiet():
        from tensorflow.core.protobuf import saved_model_pb2
    pb = path / "saved_model.pb"
    sm = saved_model_pb2.SavedModel()
    try:
        sm.ParseFromString(pb.read_bytes())
    except Exception as exc:  # noqa: BLE001 - DecodeError
        raise InputError(f"cannot read {pb}: {first_line(exc)}", hint=CORRUPT_HINT) from exc
    return sm


def savedmodel_signatures(path: Path) -> dict[str, Signature]:
    """Every serving signature of a SavedModel, read from ``saved_model.pb`` as data."""
    tf = require("tensorflow", "reading SavedModels")
    out: dict[str, Signature] = {}
    for mg in savedmodel_proto(path).meta_graphs:
        for key, sd in mg.signature_def.items():
            if key.startswith("__"):
                continue

            def spec(name: str, info: Any) -> TensorSpec:
                dims = [None if d.size < 0 else d.size for d in info.tensor_shape.dim]
                return spec_from_dims(name, tf.dtypes.as_dtype(info.dtype).name, dims)

            out[key] = Signature(
                tuple(spec(k, v) for k, v in sorted(sd.inputs.items())),
                tuple(spec(k, v) for k, v in sorted(sd.outputs.items())),
            )
    return out


def savedmodel_signature(path: Path, name: str) -> Signature:
    sigs = savedmodel_signatures(path)
    if name not in sigs:
        have = ", ".join(sigs) or "none"
        raise InputError(f"{path} has no signature {name!r} (it has: {have})", hint="pick one with --signature")
    return sigs[name]


def tflite_signature(path: Path) -> tuple[Signature, dict[str, Any]]:
    """Signature-runner names when present (``shape_signature`` -1 = dynamic), else tensor details."""
    require("ai_edge_litert", "reading TFLite models")
    from ai_edge_litert.interpreter import Interpreter

    check_tflite_file(path)
    try:
        with quiet():
            it = Interpreter(model_path=str(path))
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot read {path} as TFLite: {first_line(exc)}", hint=CORRUPT_HINT) from exc
    sigs = it.get_signature_list()
    if sigs:
        key = "serving_default" if "serving_default" in sigs else next(iter(sigs))
        runner = it.get_signature_runner(key)
        ins, outs = runner.get_input_details(), runner.get_output_details()
    else:
        key = ""
        ins = {d["name"]: d for d in it.get_input_details()}
        outs = {d["name"]: d for d in it.get_output_details()}

    def spec(name: str, d: dict[str, Any]) -> TensorSpec:
        return spec_from_dims(name, np.dtype(d["dtype"]).name, [int(x) for x in d.get("shape_signature", d["shape"])])

    quant = {
        n: {"scale": float(d["quantization"][0]), "zero_point": int(d["quantization"][1])}
        for n, d in {**ins, **outs}.items()
        if d["quantization"][0]
    }
    sig = Signature(tuple(spec(n, d) for n, d in ins.items()), tuple(spec(n, d) for n, d in outs.items()))
    return sig, {
        "signature_key": key,
        "signatures": list(sigs),
        "quantized_io": quant,
        "tensors": len(it.get_tensor_details()),
    }


def keras_config(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config, metadata)`` of a ``.keras`` zip or a legacy ``.h5``, parsed as JSON only."""
    try:
        if zipfile.is_zipfile(path):
            return _keras_zip_config(path)
        h5py = require("h5py", "reading .h5 Keras models")
        with h5py.File(path, "r") as fh:
            raw = fh.attrs.get("model_config")
            meta = {k: _text(fh.attrs[k]) for k in ("keras_version", "backend") if k in fh.attrs}
        if raw is None:
            raise InputError(
                f"{path} is an HDF5 file without a model config (weights only?)",
                hint="save the whole model with model.save('model.keras')",
            )
        return json.loads(_text(raw)), meta
    except (InputError, UnsafeModelError):
        raise
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot read {path} as a Keras model: {first_line(exc)}", hint=CORRUPT_HINT) from exc


def _keras_zip_config(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ``.keras`` zip's config and metadata, within the zip bounds: the whole archive must fit the inflate
    budget before Keras opens it, and each JSON member the config limit before it is parsed."""
    from fwx.safety import BOUNDS_HINT
    from fwx.safety.zipbounds import ZipBoundsError, ZipCorruptError, open_bounded

    try:
        zf = open_bounded(path.read_bytes(), where=f"{path.name}!/")
        if "config.json" not in zf.members:
            raise InputError(f"{path} holds no config.json", hint=CORRUPT_HINT)
        config = json.loads(zf.read_config("config.json"))
        meta = json.loads(zf.read_config("metadata.json")) if "metadata.json" in zf.members else {}
    except ZipCorruptError as exc:
        raise InputError(f"cannot read {path} as a Keras model: {exc}", hint=CORRUPT_HINT) from exc
    except ZipBoundsError as exc:
        raise UnsafeModelError(f"{path}: {exc}", hint=BOUNDS_HINT) from exc
    return config, meta


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _config_nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every dict in a Keras config, depth first (layers, their nested layers and objects)."""
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _config_nodes(v)
    elif isinstance(node, list):
        for v in node:
            yield from _config_nodes(v)


def keras_code_risks(config: Any) -> tuple[list[str], list[str]]:
    """Lambda layers (Python bytecode in the file) and classes from modules outside Keras."""
    lambdas: list[str] = []
    foreign: list[str] = []
    for node in _config_nodes(config):
        cls = node.get("class_name")
        if cls in ("Lambda", "__lambda__", "TFOpLambda"):
            lambdas.append(str((node.get("config") or {}).get("name") or node.get("name") or cls))
        module = node.get("module")
        if cls and isinstance(module, str) and not _keras_module(module):
            foreign.append(f"{module}.{node.get('registered_name') or cls}")
    return sorted(set(lambdas)), sorted(set(foreign))


def keras_custom_classes(config: Any) -> dict[str, str | None]:
    """Classes the file names that are not Keras' own -> the module it says defines them (None when saved
    from a script: ``register_keras_serializable`` in ``__main__`` leaves no module to import)."""
    found: dict[str, str | None] = {}
    for node in _config_nodes(config):
        cls, module = node.get("class_name"), node.get("module")
        if cls and (node.get("registered_name") or module) and not _keras_module(module):
            found[str(node.get("registered_name") or cls)] = None if module in (None, "__main__") else str(module)
    return dict(sorted(found.items()))


def _keras_module(module: Any) -> bool:
    return isinstance(module, str) and module.split(".")[0] in ("keras", "tf_keras")


def keras_layers(config: dict[str, Any]) -> list[str]:
    layers = (config.get("config") or {}).get("layers") or []
    return [str(layer.get("class_name")) for layer in layers if isinstance(layer, dict)]


def keras_config_signature(config: dict[str, Any]) -> Signature | None:
    """Inputs from the ``InputLayer`` entries of a functional/sequential config (outputs need the model)."""
    specs = []
    for layer in (config.get("config") or {}).get("layers") or []:
        if isinstance(layer, dict) and layer.get("class_name") == "InputLayer":
            cfg = layer.get("config") or {}
            shape = cfg.get("batch_shape") or cfg.get("batch_input_shape")
            if shape is not None:
                specs.append(
                    spec_from_dims(
                        str(cfg.get("name") or layer.get("name")), cfg.get("dtype") or "float32", list(shape)
                    )
                )
    return Signature(tuple(specs)) if specs else None
