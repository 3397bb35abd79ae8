"""An ONNX source with the pinned sizes written in: the file the converters read when a pin fixes an axis
the file leaves dynamic.

Every converter takes an ONNX file's shapes from the file itself, so ``--input x:float32[N,3,32,32]`` (or
``--example-inputs``) on a file declaring ``[N,3,H,W]`` reached no target: each kept H and W dynamic and
read-back refused it. fwx writes a copy with those dims fixed (shape inference re-run, external data
copied beside it) into the export's work folder and converts that; the source the user named, its sha256
and the path in ``fwx.json`` stay the original's.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fwx.formats import Format
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.runtimes.files import load_onnx
from fwx.signature import Signature, TensorSpec, is_dynamic
from fwx.sources.load import LoadedSource
from fwx.sources.onnx_external import external_files

#: name -> {axis: size}: the axes a pin fixes that the file leaves dynamic.
Pins = Mapping[str, Mapping[int, int]]


def pinned_axes(declared: Sequence[TensorSpec], pinned: Sequence[TensorSpec]) -> dict[str, dict[int, int]]:
    """Each axis the file declares dynamic (``declared``) and the pin fixes, by tensor name."""
    by_name = {s.name: s for s in pinned}
    out: dict[str, dict[int, int]] = {}
    for spec in declared:
        pin = by_name.get(spec.name)
        if pin is None or pin.rank != spec.rank:
            continue
        fixed = {
            axis: int(mine)
            for axis, (theirs, mine) in enumerate(zip(spec.shape, pin.shape, strict=True))
            if is_dynamic(theirs) and not is_dynamic(mine)
        }
        if fixed:
            out[spec.name] = fixed
    return out


def convert_file(src: LoadedSource, signature: Signature, folder: Path) -> Path | None:
    """The file the first hop converts: ``src.path``, or a copy in ``folder`` with the pinned sizes fixed."""
    if src.format is not Format.ONNX or src.path is None:
        return src.path
    pins = pinned_axes((*(src.inputs or ()), *(src.outputs or ())), (*signature.inputs, *signature.outputs))
    if not pins:
        return src.path
    return write_pinned(src.path, pins, folder)


def write_pinned(path: Path, pins: Pins, folder: Path) -> Path:
    """``path`` written into ``folder`` (same name) with ``pins`` fixed on its graph inputs and outputs.

    The tensors' data is not loaded: external tensors stay references, and their files (checked by
    ``external_files``: relative, inside the model's folder, one link) are copied under the same names.
    """
    onnx = require("onnx", "pinning ONNX sizes")
    model = load_onnx(path)
    for vi in (*model.graph.input, *model.graph.output):
        for axis, size in pins.get(vi.name, {}).items():
            dim = vi.type.tensor_type.shape.dim[axis]
            dim.Clear()
            dim.dim_value = size
    _reinfer(onnx, model)
    folder.mkdir(parents=True, exist_ok=True)
    top = path.parent.resolve()
    for data in external_files(path, model):
        dest = folder / data.relative_to(top)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data, dest)
    out = folder / path.name
    onnx.save_model(model, str(out))
    return out


def _reinfer(onnx: Any, model: Any) -> None:
    """Intermediate shapes recomputed from the fixed inputs; an entry inference cannot redo is kept as it was
    (a dynamic symbol is still true of the pinned file, only less precise)."""
    old = list(model.graph.value_info)
    del model.graph.value_info[:]
    try:
        with quiet(native=True):
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - an op onnx cannot infer: the converters infer what they need themselves
        model.graph.value_info.extend(old)
        return
    known = {vi.name for vi in inferred.graph.value_info}
    model.graph.value_info.extend(inferred.graph.value_info)
    model.graph.value_info.extend(vi for vi in old if vi.name not in known)
