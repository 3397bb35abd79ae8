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

import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from fwx.errors import InputError
from fwx.frameworks import require
from fwx.runtimes.files import load_onnx

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


def check_location(model_path: Path, location: str) -> Path:
    """The file ``location`` names, or ``InputError`` if it could reach outside the model's folder."""
    base = model_path.parent.resolve()

    def refuse(why: str) -> InputError:
        return InputError(
            f"{model_path.name}: external data location {location!r} {why}",
            hint="keep the data files in the model's folder, named by plain relative paths",
        )

    posix = PurePosixPath(location.replace("\\", "/"))
    if not location or posix.is_absolute() or PureWindowsPath(location).drive:
        raise refuse("is not a relative path")
    if ".." in posix.parts:
        raise refuse("climbs out with '..'")
    path = model_path.parent / posix
    resolved = path.resolve()
    if not resolved.is_relative_to(base):
        raise refuse("resolves (through a symlink) outside the model's folder")
    if not resolved.is_file():
        raise InputError(
            f"{model_path.name}: external data file {location!r} is missing",
            hint="copy the data file(s) next to the .onnx file",
        )
    if os.stat(resolved).st_nlink > 1:
        raise refuse("is a hard link (it could alias a file outside the folder)")
    return resolved


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
