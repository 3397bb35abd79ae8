"""``fwx inspect``: signature and metadata of any model or artifact, without running model code.

ONNX, TFLite, SavedModel and Keras files are read as data (``fwx.sources.readers``).
A TorchScript archive's forward declaration is read from its code text and its
root class from the pickle opcodes (never unpickled); loading it needs
``--trust-model-code``. A checkpoint is loaded weights-only when that is safe,
else its unsafe globals are listed. A version folder shows its fwx.json.
"""

from __future__ import annotations

import itertools
import pickletools
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fwx.errors import InputError, UnsafeModelError, UsageError
from fwx.formats import Format
from fwx.manifest import MANIFEST_NAME, Manifest, size_of
from fwx.repository import Repository
from fwx.safety import check_model
from fwx.signature import Signature
from fwx.sources import readers
from fwx.sources import torch_source as ts
from fwx.sources.boundary import format_of, loadable
from fwx.sources.pt2 import pt2_inputs


def inspect_path(path: str | Path, *, trust: bool = False, signature_name: str = "serving_default") -> dict[str, Any]:
    """A JSON-able description of ``path``: format, signature (when known), metadata, notes."""
    p = Path(path)
    if p.is_dir() and (p / MANIFEST_NAME).is_file():
        return _version_folder(p)
    if p.is_dir() and not (p / "saved_model.pb").is_file() and Repository(p.parent).versions(p.name):
        return {"path": str(p), "format": "model folder", "versions": Repository(p.parent).versions(p.name)}
    shown, p = str(p), loadable(p)  # its admitted private copy: the only bytes read from here on
    fmt = format_of(p)
    info: dict[str, Any] = {
        "path": shown,
        "format": fmt.value,
        "size_bytes": size_of(p),
        "signature": None,
        "metadata": {},
        "notes": [],
    }
    try:  # the handlers only read data; still say when loading the file would reach outside the tensor world
        check_model(fmt, p, trust=trust)
    except UnsafeModelError as exc:
        info["notes"].append(f"{exc.message}; pass --trust-model-code to load it")
    _HANDLERS[fmt](p, info, trust=trust, signature_name=signature_name)
    return info


def _sig(info: dict[str, Any], sig: Signature | None) -> None:
    info["signature"] = sig.to_json() if sig is not None else None


def _version_folder(p: Path) -> dict[str, Any]:
    m = Manifest.read(p)
    arts = {
        k: {
            "path": a.path,
            "size_bytes": a.size_bytes,
            "precision": a.precision,
            "opset": a.opset,
            "layout": a.layout,
            "status": a.status,
            "validated": a.validation.get("passed"),
            "path_taken": " -> ".join([a.hops[0]["source"], *(h["target"] for h in a.hops)]) if a.hops else "",
        }
        for k, a in m.artifacts.items()
    }
    return {
        "path": str(p),
        "format": "version folder",
        "name": m.name,
        "version": m.version,
        "signature": m.signature,
        "source": vars(m.source),
        "created": m.created,
        "command": m.command,
        "fwx_version": m.fwx_version,
        "artifacts": arts,
        "skipped": dict(m.skipped),
    }


def _onnx(p: Path, info: dict[str, Any], **_: Any) -> None:
    sig, meta = readers.onnx_signature(p)
    _sig(info, sig)
    info["metadata"] = meta


def _tflite(p: Path, info: dict[str, Any], **_: Any) -> None:
    sig, meta = readers.tflite_signature(p)
    _sig(info, sig)
    info["metadata"] = meta


def _savedmodel(p: Path, info: dict[str, Any], *, signature_name: str, **_: Any) -> None:
    sigs = readers.savedmodel_signatures(p)
    key = signature_name if signature_name in sigs else next(iter(sigs), None)
    _sig(info, sigs.get(key) if key else None)
    tags = [list(mg.meta_info_def.tags) for mg in readers.savedmodel_proto(p).meta_graphs]
    info["metadata"] = {"signature": key, "signatures": {k: str(v) for k, v in sigs.items()}, "tags": tags}


def _keras(p: Path, info: dict[str, Any], **_: Any) -> None:
    config, meta = readers.keras_config(p)
    lambdas, foreign = readers.keras_code_risks(config)
    _sig(info, readers.keras_config_signature(config))
    layers = readers.keras_layers(config)
    info["metadata"] = {
        **meta,
        "class_name": config.get("class_name"),
        "layers": len(layers),
        "layer_types": dict(Counter(layers).most_common()),
    }
    if lambdas:
        info["notes"].append(f"Lambda layers (Python code in the file): {', '.join(lambdas)}")
    if foreign:
        info["notes"].append(f"classes from outside Keras: {', '.join(foreign)}")
    info["notes"].append("outputs are known only after loading the model (fwx export shows them)")


def _torchscript(p: Path, info: dict[str, Any], *, trust: bool, **_: Any) -> None:
    root, forward = torchscript_forward(p)
    info["metadata"] = {"class": root, "forward": forward}
    if not trust:
        info["notes"].append("TorchScript is code: read as text only; pass --trust-model-code to load it")
        return
    module = ts.load_torchscript(p, trust=True)
    info["metadata"]["schema"] = str(module.forward.schema)
    info["metadata"]["parameters"] = sum(int(t.numel()) for t in module.parameters())


def torchscript_forward(p: Path) -> tuple[str | None, str | None]:
    """Root class (from pickle opcodes, not unpickled) and its ``forward`` declaration (from the code text).

    The archive keeps the zip bounds (a 0.5 MB file inflated a 512 MiB ``data.pkl`` here), and the text is
    searched in linear time (a 10 KB code file kept the one regex this replaced busy for hours).
    """
    from fwx.safety.zipbounds import ZipBoundsError, ZipCorruptError, open_bounded

    try:
        zf = open_bounded(p.read_bytes(), where=f"{p.name}!/")
        pkl = next(n for n in zf.names if n.endswith("/data.pkl"))
        root = _first_global(zf.read(pkl))
        if root is None:
            return None, None
        module, _, cls = root.rpartition(".")
        prefix = pkl[: -len("data.pkl")]
        code_file = f"{prefix}code/{module.replace('.', '/')}.py"
        text = zf.read(code_file).decode("utf-8", "replace") if code_file in zf.members else ""
    except (ZipCorruptError, StopIteration, KeyError, OSError, ValueError) as exc:
        if isinstance(exc, ZipBoundsError) and not isinstance(exc, ZipCorruptError):
            from fwx.safety import BOUNDS_HINT

            raise UnsafeModelError(f"{p}: {exc}", hint=BOUNDS_HINT) from exc
        return None, None
    return root, _forward_decl(text, cls)


_RETURNS = re.compile(r"\)\s*->\s*([^:\n]+):")
_DECL_WINDOW = 2048  # a forward declaration is a few lines; nothing past this is searched


def _forward_decl(text: str, cls: str) -> str | None:
    start = text.find(f"class {cls}(")
    at = text.find("def forward(self", start) if start >= 0 else -1
    if at < 0:
        return None
    window = text[at + len("def forward(self") : at + _DECL_WINDOW]
    m = _RETURNS.search(window)
    if m is None:
        return None
    head = window[: m.start()]
    args = head[head.index(",") + 1 :] if "," in head.split(")")[0] else ""
    return f"forward({' '.join(args.split())}) -> {m.group(1).strip()}"


def _first_global(data: bytes) -> str | None:
    """The pickle's first global; only its first opcodes are walked (TorchScript names the root class there)."""
    strings: list[str] = []
    for op, arg, _ in itertools.islice(pickletools.genops(data), _FIRST_OPS):
        if op.name == "GLOBAL" and isinstance(arg, str):
            return arg.replace(" ", ".")
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(str(arg))
        if op.name == "STACK_GLOBAL" and len(strings) >= 2:
            return f"{strings[-2]}.{strings[-1]}"
    return None


_FIRST_OPS = 64


def _pt2(p: Path, info: dict[str, Any], *, trust: bool, **_: Any) -> None:
    risky = ts.pt2_pickled_payloads(p)
    if risky and not trust:
        info["notes"].append(f"holds pickled objects ({', '.join(risky[:3])}); pass --trust-model-code to load it")
        return
    ep = ts.load_pt2(p, trust=trust)
    inputs = pt2_inputs(ep)
    _sig(info, Signature(inputs) if inputs else None)
    ops = Counter(str(n.target) for n in ep.graph.nodes if n.op == "call_function")
    info["metadata"] = {
        "outputs": len(ep.graph_signature.user_outputs),
        "ops": dict(ops.most_common(15)),
        "range_constraints": {str(k): str(v) for k, v in ep.range_constraints.items()},
    }


def _hf_folder(p: Path, info: dict[str, Any], *, trust: bool) -> None:
    """A save_pretrained folder, read as data: its config, the task fwx would export, the files it carries."""
    from fwx.sources import hf_files, hf_tasks

    info["format"] = "hugging face folder"
    try:
        config = hf_files.check_folder(p, trust=trust)
    except UnsafeModelError as exc:
        info["notes"].append(f"{exc.message}; pass --trust-model-code to load it")
        config = hf_files.read_json(p / hf_files.CONFIG)
    info["metadata"] = {
        "model_type": config.get("model_type"),
        "architectures": config.get("architectures"),
        "files": sorted(f.name for f in p.iterdir() if f.is_file()),
    }
    try:
        task = hf_tasks.infer_task(config)
    except UsageError as exc:
        info["notes"].append(exc.message)
        return
    arch = next(iter(config.get("architectures") or []), "")
    info["metadata"].update(task=task, outputs=list(hf_tasks.task_outputs(task, str(arch))))
    info["notes"].append(f"export it with: fwx export {p} --task {task} (see docs/huggingface.md for the tasks)")


def _checkpoint(p: Path, info: dict[str, Any], *, trust: bool, **_: Any) -> None:
    if p.is_dir():
        _hf_folder(p, info, trust=trust)
        return
    needed = ts.unsafe_globals(p)
    info["metadata"]["unsafe_globals"] = needed
    if needed and not trust and ts.torch_nn_classes(needed) is None:
        info["notes"].append("this pickle imports code to load; pass --trust-model-code to load it")
        return
    obj = ts.load_checkpoint(p, trust=trust)
    state = ts.find_state_dict(obj)
    if state is not None:
        info["metadata"].update(_state_summary(state))
        info["notes"].append("a state_dict: export it with --model-class pkg.mod:Class")
    elif hasattr(obj, "parameters"):
        info["metadata"].update(
            {"class": type(obj).__name__, "parameters": sum(int(t.numel()) for t in obj.parameters())}
        )
    else:
        raise InputError(f"{p} holds a {type(obj).__name__}, not a model or a state_dict")


_HANDLERS: dict[Format, Callable[..., None]] = {
    Format.ONNX: _onnx,
    Format.TFLITE: _tflite,
    Format.SAVEDMODEL: _savedmodel,
    Format.KERAS: _keras,
    Format.TORCHSCRIPT: _torchscript,
    Format.PT2: _pt2,
    Format.PYTORCH: _checkpoint,
}


def _state_summary(state: Any) -> dict[str, Any]:
    tensors = list(state.items())
    return {
        "tensors": len(tensors),
        "parameters": sum(int(t.numel()) for _, t in tensors),
        "dtypes": dict(Counter(str(t.dtype).replace("torch.", "") for _, t in tensors)),
        "first": {k: list(t.shape) for k, t in tensors[:8]},
    }
