"""One entry point for every source kind: detect by content, load safely, report defaults.

PyTorch sources of any kind (state_dict + ``--model-class``, factory, pickled
module, TorchScript, ``.pt2``) become one eager ``nn.Module`` and start the
planner at ``Format.PYTORCH``; the detected kind is kept for ``fwx.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fwx import ui
from fwx.errors import InputError, UsageError
from fwx.formats import Format, is_hf_folder
from fwx.frameworks import require, version_of
from fwx.safety import check_model
from fwx.signature import TensorSpec
from fwx.sources import torch_source as ts
from fwx.sources.boundary import format_of, loadable, sha256_of
from fwx.sources.extras import SourceExtras
from fwx.sources.onnx_external import external_files
from fwx.sources.pt2 import pt2_inputs, pt2_sizes
from fwx.sources.readers import onnx_signature, savedmodel_signature
from fwx.sources.tf_source import built_batch, keras_io, load_keras


@dataclass
class LoadedSource:
    format: Format  # as detected (TORCHSCRIPT, PT2, PYTORCH, KERAS, ...)
    plan_format: Format  # where the planner starts
    path: Path | None
    kind: str  # human description, e.g. "state_dict + tests.models:Net"
    framework: str
    framework_version: str
    obj: Any = None  # eager nn.Module / keras.Model
    inputs: tuple[TensorSpec, ...] | None = None  # the model's own, when it has them
    outputs: tuple[TensorSpec, ...] | None = None
    opset: int | None = None
    sha256: str = ""
    # sizes the model admits for a dynamic symbol where fwx's own sample sizes would not fit (a .pt2's Dim range)
    sizes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # what the source knows of its own use: a Hugging Face folder's task, config id ranges, tokenizer files...
    extras: SourceExtras = field(default_factory=SourceExtras)


def parse_model_kwargs(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(
            f"--model-kwargs is not valid JSON: {exc}", hint="e.g. --model-kwargs '{\"width\": 16}'"
        ) from exc
    if not isinstance(value, dict):
        raise UsageError("--model-kwargs must be a JSON object", hint="e.g. --model-kwargs '{\"width\": 16}'")
    return value


def is_factory_ref(source: str) -> bool:
    return not Path(source).exists() and bool(ts.FACTORY_RE.match(source))


def load_source(
    source: str | Path,
    *,
    model_class: str | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    trust: bool = False,
    signature_name: str = "serving_default",
    task: str | None = None,
    weights: str | Path | None = None,
) -> LoadedSource:
    """Load ``source`` (a path, or ``pkg.mod:build_fn`` for a factory) without running its code.

    ``task`` picks what a Hugging Face folder exports; ``weights`` fills a factory's module.
    """
    kwargs = dict(model_kwargs or {})
    if isinstance(source, str) and is_factory_ref(source):
        return _factory(source, kwargs, weights, trust)
    _check_flags(Path(source), task, weights)
    # the admitted private copy is the only one read from here on, trusted or not: what is hashed is what loads
    path = loadable(source)
    fmt = format_of(path)  # detected once, at the boundary (fwx.sources.boundary)
    if is_hf_folder(path):
        from fwx.sources.hf import load_hf  # imports torch and transformers

        hf = load_hf(path, task=task, trust=trust)
        return _torch(Format.PYTORCH, path, hf.kind, hf.module, inputs=hf.inputs, sizes=hf.sizes, extras=hf.extras)
    check_model(fmt, path, trust=trust)  # SavedModel I/O ops, ONNX custom domains: refused before any load
    if fmt is Format.PYTORCH:
        return _torch_checkpoint(path, model_class, kwargs, trust)
    if fmt is Format.TORCHSCRIPT:
        return _torch(fmt, path, "TorchScript archive", ts.load_torchscript(path, trust=trust).eval())
    if fmt is Format.PT2:
        return _pt2(path, trust)
    if fmt is Format.KERAS:
        return _keras(path, trust)
    if fmt is Format.SAVEDMODEL:
        tf = require("tensorflow", "reading SavedModels")
        sig = savedmodel_signature(path, signature_name)
        return LoadedSource(
            fmt,
            fmt,
            path,
            f"SavedModel (signature {signature_name})",
            "tensorflow",
            tf.__version__,
            inputs=sig.inputs,
            outputs=sig.outputs,
            sha256=sha256_of(path),
        )
    if fmt is Format.ONNX:
        sig, meta = onnx_signature(path)
        external_files(path)  # refuse data locations outside the model's folder before anything loads them
        return LoadedSource(
            fmt,
            fmt,
            path,
            f"ONNX (opset {meta['opset']})",
            "onnx",
            version_of("onnx"),
            inputs=sig.inputs,
            outputs=sig.outputs,
            opset=meta["opset"],
            sha256=sha256_of(path),
        )
    raise InputError(
        f"{path} is a {fmt} model, which fwx cannot export from",
        hint="export from the original PyTorch, Keras, SavedModel or ONNX model",
    )


def _factory(source: str, kwargs: dict[str, Any], weights: str | Path | None, trust: bool) -> LoadedSource:
    module = ts.build_module(source, kwargs).eval()
    if weights is None:
        return _torch(Format.PYTORCH, None, f"factory {source}", module)
    path = loadable(weights)
    ts.apply_state_dict(module, load_weights(path, trust=trust), Path(weights), source)
    return _torch(Format.PYTORCH, None, f"factory {source} + {Path(weights).name}", module)


def _check_flags(path: Path, task: str | None, weights: str | Path | None) -> None:
    if task is not None and not is_hf_folder(path):
        raise UsageError(f"--task applies to Hugging Face folders, not to {path}", hint="drop --task for this source")
    if weights is not None:
        raise UsageError(
            "--weights fills the module a factory builds (SOURCE pkg.mod:build_fn)",
            hint="with --model-class, pass the weights file itself as SOURCE",
        )


def load_weights(path: Path, *, trust: bool) -> Any:
    """A state_dict from safetensors (data only) or from a pickle walked first and loaded weights-only."""
    from fwx.sources.hf_files import load_weights as read

    if not path.is_file():
        raise InputError(f"{path} does not exist", hint="check the weights path")
    return read(path, trust=trust)


def _torch(fmt: Format, path: Path | None, kind: str, module: Any, **kw: Any) -> LoadedSource:
    torch = require("torch", "loading PyTorch models")
    return LoadedSource(
        fmt,
        Format.PYTORCH,
        path,
        kind,
        "torch",
        torch.__version__,
        obj=module,
        sha256=sha256_of(path) if path else "",
        **kw,
    )


def _torch_checkpoint(path: Path, model_class: str | None, kwargs: dict[str, Any], trust: bool) -> LoadedSource:
    torch = require("torch", "loading PyTorch models")
    obj = load_weights(path, trust=trust) if path.suffix == ".safetensors" else ts.load_checkpoint(path, trust=trust)
    if isinstance(obj, torch.nn.Module):
        return _torch(Format.PYTORCH, path, "pickled nn.Module", obj.eval())
    state = ts.find_state_dict(obj)
    if state is None:
        raise InputError(
            f"{path} holds a {type(obj).__name__}, neither a state_dict nor an nn.Module",
            hint="save model.state_dict() or the module itself",
        )
    if not model_class:
        raise UsageError(
            f"{path} is a state_dict: fwx needs the class that rebuilds the model",
            hint="pass --model-class pkg.module:Class (and --model-kwargs JSON if it takes arguments)",
        )
    module = ts.build_module(model_class, kwargs)
    ts.apply_state_dict(module, state, path, model_class)
    return _torch(Format.PYTORCH, path, f"state_dict + {model_class}", module.eval())


def _pt2(path: Path, trust: bool) -> LoadedSource:
    ep = ts.load_pt2(path, trust=trust)
    inputs = pt2_inputs(ep)
    return _torch(
        Format.PT2,
        path,
        "torch.export ExportedProgram",
        ts.program_module(ep),
        inputs=inputs,
        sizes=pt2_sizes(ep, inputs),
    )


def _keras(path: Path, trust: bool) -> LoadedSource:
    model = load_keras(path, trust=trust)
    inputs, outputs = keras_io(model)
    inputs, outputs, fixed = built_batch(model, inputs, outputs)
    if fixed:
        ui.warn(
            f"{path.name} records a fixed batch ({fixed}), the batch Keras built it with; fwx keeps the batch "
            f"dynamic, as model.export() does (pin --input {fixed} to keep it fixed)"
        )
    return LoadedSource(
        Format.KERAS,
        Format.KERAS,
        path,
        f"Keras model ({path.suffix or 'folder'})",
        "keras",
        version_of("keras"),
        obj=model,
        inputs=inputs,
        outputs=outputs,
        sha256=sha256_of(path),
    )
