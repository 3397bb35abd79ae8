"""Read model files as data and refuse the ones that would run code or touch the host.

The bottom floor of the gate: this package imports only ``fwx.errors``,
``fwx.formats``, ``fwx.frameworks`` (quiet imports), the standard library and (lazily) the framework's own proto
or FlatBuffer readers, and it never executes a model. Every runtime calls
``check_model`` before its native loader (``fwx.runtimes.base.Runtime.load``),
and ``.pt2`` archives go through ``pt2_bytes``, whose scanned bytes are what
torch then reads. ``--trust-model-code`` skips these checks.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fwx.errors import CORRUPT_HINT, InputError, UnsafeModelError, first_line
from fwx.formats import Format
from fwx.frameworks import require
from fwx.safety.zipbounds import BOUNDS_HINT as BOUNDS_HINT

TRUST_HINT = "pass --trust-model-code only if you trust where this file came from"


def _more(items: list[str], limit: int = 3) -> str:
    return "; ".join(items[:limit]) + (f" (and {len(items) - limit} more)" if len(items) > limit else "")


def pt2_bytes(path: Path, *, trust: bool) -> bytes:
    """The bytes of a ``.pt2`` archive, refused (unless trusted) if any member would run code on load.

    The zip bounds (declared sizes, the inflate budget) hold even when trusted: they guard memory, not code.
    """
    from fwx.safety.pickles import PickleScanError
    from fwx.safety.pt2 import read_checked
    from fwx.safety.zipbounds import BoundedZip, Budget, ZipBoundsError, ZipCorruptError, inflate_budget

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path} is not a file", hint="pass a .pt2 file written by torch.export.save")
    try:
        if trust:
            data = path.read_bytes()
            BoundedZip(data, Budget(inflate_budget(len(data))))
            return data
        data, findings = read_checked(path)
    except (PickleScanError, ZipCorruptError) as exc:
        raise InputError(f"cannot read {path} as a .pt2 archive: {exc}", hint="the file is probably truncated") from exc
    except ZipBoundsError as exc:
        raise UnsafeModelError(f"{path}: {exc}", hint=BOUNDS_HINT) from exc
    except OSError as exc:
        raise InputError(f"cannot read {path}: {first_line(exc)}") from exc
    if findings.bounds:
        raise UnsafeModelError(f"{path}: {findings.bounds}", hint=BOUNDS_HINT)
    if findings.problems:
        raise UnsafeModelError(
            f"{path} would run code or touch the host when loaded: {findings.summary()}", hint=TRUST_HINT
        )
    return data


def pt2_findings(path: Path) -> list[str]:
    """``member: reason`` for every unsafe member of a ``.pt2`` (for ``fwx inspect``'s notes)."""
    from fwx.safety.pickles import PickleScanError
    from fwx.safety.pt2 import read_checked

    try:
        _, findings = read_checked(Path(path))
    except (PickleScanError, OSError) as exc:
        return [f"unreadable archive: {exc}"]
    bounds = [findings.bounds] if findings.bounds else []
    return bounds + [f"{m}: {why}" for m, why in findings.problems.items()]


def _linked_files(folder: Path) -> list[str]:
    """Entries of a model folder that are symlinks or hard-linked files (walked without following links)."""
    found: list[str] = []
    todo = [folder]
    while todo:
        with os.scandir(todo.pop()) as entries:
            for e in entries:
                st = e.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    found.append(f"{Path(e.path).relative_to(folder)} is a symbolic link")
                elif stat.S_ISDIR(st.st_mode):
                    todo.append(Path(e.path))
                elif st.st_nlink > 1:
                    found.append(f"{Path(e.path).relative_to(folder)} has {st.st_nlink} hard links")
    return found


def _read_nofollow(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def check_savedmodel(path: Path) -> None:
    from fwx.safety.tfgraph import scan_saved_model

    pb = Path(path) / "saved_model.pb"
    if not pb.is_file():  # refused here, never passed: a saved_model.pbtxt beside it is not scanned
        raise InputError(
            f"{path} is not a SavedModel folder: it has no saved_model.pb",
            hint="point at the folder tf.saved_model.save or model.export() wrote",
        )
    linked = _linked_files(Path(path))
    if linked:
        raise UnsafeModelError(
            f"{path}: {_more(linked)}; a link can point the loader at any file on the host",
            hint="copy the real files into the SavedModel folder",
        )
    # the proto class only; nothing is loaded or run (require() keeps TF's import banners quiet)
    saved_model_pb2 = require("tensorflow.core.protobuf.saved_model_pb2", "reading SavedModels")
    sm = saved_model_pb2.SavedModel()
    try:
        sm.ParseFromString(_read_nofollow(pb))
    except Exception as exc:  # noqa: BLE001 - protobuf DecodeError
        raise InputError(
            f"cannot load {path} as savedmodel: {first_line(exc)}",
            hint="saved_model.pb is probably truncated or corrupt; re-export it",
        ) from exc
    found = [str(f) for f in scan_saved_model(sm)]
    if found:
        raise UnsafeModelError(f"{path} reaches outside the tensor world: {_more(found)}", hint=TRUST_HINT)


def check_onnx(path: Path) -> None:
    onnx = require("onnx", "reading ONNX models")

    from fwx.safety.onnx_ops import nonstandard_ops

    if not Path(path).is_file():
        return
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf DecodeError and friends
        raise InputError(
            f"cannot load {path} as onnx: {first_line(exc)}", hint="the file may be truncated or corrupt; re-export it"
        ) from exc
    found = nonstandard_ops(model)
    if found:
        raise UnsafeModelError(
            f"{path} uses ops outside the standard ONNX domains, which need a custom-op library: {_more(found)}",
            hint=TRUST_HINT,
        )


def check_tflite(path: Path) -> None:
    from fwx.safety.tflite_ops import FlatBufferError, custom_ops

    if not Path(path).is_file():
        return
    try:
        found = custom_ops(Path(path).read_bytes())
    except FlatBufferError as exc:
        # an op list this reader cannot follow is refused, never passed: LiteRT's own reader may follow it
        raise InputError(
            f"{path} is not a valid TFLite model: {exc}",
            hint=CORRUPT_HINT,
        ) from exc
    if found:
        raise UnsafeModelError(
            f"{path} needs custom op(s) {_more(sorted(set(found)))}: they are code from outside the TFLite runtime",
            hint=TRUST_HINT,
        )


_CHECKS = {Format.SAVEDMODEL: check_savedmodel, Format.ONNX: check_onnx, Format.TFLITE: check_tflite}


def check_model(fmt: Format, path: str | Path, *, trust: bool) -> None:
    """Refuse (``UnsafeModelError``) a model whose file would reach outside the tensor world, unless trusted.

    ``.pt2`` is checked by ``pt2_bytes`` inside its one loader instead, so the
    bytes scanned are the bytes loaded.
    """
    check = _CHECKS.get(fmt)
    if check is not None and not trust:
        check(Path(path))
