"""Where an ONNX model's external data may live: its own folder, by plain relative paths.

An ``.onnx`` file may keep its weights in other files named by each tensor's
``location``. A crafted location reads (or, on save, writes) outside the
model's folder: CVE-2022-25882, CVE-2024-27318 (``a/../../x``), symlinks and
hard links (onnx docs/security.md). The one check, used by the private snapshot
(which copies the files it names) and by the loader (``fwx.sources.onnx_external``).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from fwx.errors import InputError


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
