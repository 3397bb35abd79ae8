"""ONNX external data: check where a model's tensors point, and gather them next to the artifact.

An ``.onnx`` file may keep its weights in other files named by each tensor's
``location``. A crafted location reads (or, on save, writes) outside the
model's folder: CVE-2022-25882, CVE-2024-27318 (``a/../../x``), symlinks and
hard links (onnx docs/security.md). fwx checks every location before anything
loads the data: relative, no ``..``, inside the model's folder after resolving
symlinks, a regular file with one link.

The published ONNX artifact is ``model.onnx`` plus, when the weights are
external, one ``model.onnx.data`` file (the tensors are rewritten to point at
it, so the source's file names cannot collide with other artifacts). fwx.json
lists that file with its own sha256 under the entry's ``files``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fwx.frameworks import require
from fwx.runtimes.files import load_onnx
from fwx.safety.onnx_locations import check_location

DATA_SUFFIX = ".data"


def _locations(model: Any) -> list[str]:
    onnx = require("onnx", "reading ONNX models")
    from onnx.external_data_helper import _get_all_tensors

    found: list[str] = []
    for tensor in _get_all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loc = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if loc not in found:
            found.append(loc)
    return found


def external_files(model_path: Path, model: Any = None) -> list[Path]:
    """Every external data file of ``model_path``, each checked; empty when the weights are inline."""
    if model is None:
        model = load_onnx(model_path)
    return [check_location(model_path, loc) for loc in _locations(model)]


def gather_external_data(src: Path, out: Path) -> list[str]:
    """Write ``src`` at ``out`` with all its external tensors in ``out.name + '.data'``; returns the extra names.

    Call it only after ``external_files(src)`` has checked every location.
    """
    onnx = require("onnx", "copying ONNX models")
    from onnx.external_data_helper import convert_model_to_external_data

    model = load_onnx(src, external_data=True)
    data = out.name + DATA_SUFFIX
    # Small tensors stay inline: onnxruntime's shape inference cannot read an external Unsqueeze/Reshape
    # axes tensor ("Cannot parse data from external tensors"); save_model(size_threshold=) moved them anyway.
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location=data, size_threshold=1024)
    onnx.save_model(model, str(out))
    return [data] if (out.parent / data).exists() else []
