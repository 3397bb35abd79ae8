"""Where an ONNX model's external data may live: its own folder, by plain relative paths.

An ``.onnx`` file may keep its weights in other files named by each tensor's
``location``. A crafted location reads (or, on save, writes) outside the
model's folder: CVE-2022-25882, CVE-2024-27318 (``a/../../x``), symlinks and
hard links (onnx docs/security.md). The one check, used by the private snapshot
(which copies the files it names) and by the loader (``fwx.sources.onnx_external``).

A loose ``.onnx`` file's folder is not the model: it is wherever the user
downloaded it (a home folder, with ``.ssh/`` and ``.env`` beside it). So the
snapshot of a loose file reads only what its author evidently shipped
(``plain`` and ``covered``): files of the same folder under plain, non-hidden
names, each made entirely of the tensors that name it (bytes no tensor names
must be zero: the alignment padding onnx and torch.onnx write). A key or a
config file is never exactly a run of tensors plus zeros unless the model's
author declared one tensor per byte of it, and the name rule keeps every
dot-file and subfolder out even then. A hidden component is refused by every
check, trusted or not.
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
    if any(p.startswith(".") and p != "." for p in posix.parts):
        raise refuse("names a hidden file or folder (a dot-file is never model data)")
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


def _refuse_loose(model: Path, location: str, why: str) -> InputError:
    return InputError(
        f"{model.name}: external data location {location!r} {why}: a loose .onnx file reads only plain files "
        "beside it that hold nothing but its tensors",
        hint="keep the data files next to the .onnx file under plain names, or name their folder "
        "with --external-data-dir",
    )


def plain(model: Path, location: str) -> None:
    """Refuse a location that is not a plain, non-hidden name in the model's own folder."""
    if not location or "/" in location or "\\" in location:
        raise _refuse_loose(model, location, "is not a file name in the model's folder")
    if location.startswith("."):
        raise _refuse_loose(model, location, "names a hidden file")


def covered(model: Path, folder: Path, spans: dict[str, list[tuple[int, int | None, int | None]]]) -> None:
    """Refuse a data file (already copied into ``folder``) that holds bytes no tensor's shape accounts for.

    Each tensor reads exactly the bytes its dtype and shape hold (a declared ``length`` must agree), and
    bytes between them must be zero: so a file passes only if the model's author knew its exact size
    and layout, which a writer does and a model fishing for a neighbour it has never seen does not.
    """
    for location, ranges in spans.items():
        path = folder / location
        size = path.stat().st_size
        ends = []
        for start, length, held in ranges:
            if held is None or (length is not None and length != held):
                why = f"declares {length} bytes where its tensor's shape holds {held}"
                raise _refuse_loose(model, location, why if held is not None else "names a tensor of no fixed size")
            ends.append((start, start + held))
        ends.sort()
        gaps, pos = [], 0
        for start, end in ends:
            if start < 0 or end > size or end < start:
                raise _refuse_loose(model, location, f"names bytes {start}..{end} of a {size}-byte file")
            if start > pos:
                gaps.append((pos, start))
            pos = max(pos, end)
        if pos < size:
            gaps.append((pos, size))
        with open(path, "rb") as fh:
            for start, end in gaps:
                fh.seek(start)
                left = end - start
                while left:
                    block = fh.read(min(left, 1 << 20))
                    if not block or block.count(0) != len(block):
                        raise _refuse_loose(model, location, f"holds bytes {start}..{end} that no tensor names")
                    left -= len(block)
