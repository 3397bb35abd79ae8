"""The formats fwx knows, and content-based detection of a path's format.

Detection reads a few bytes or a zip directory listing; it never deserialises a
model, so it is safe on untrusted files.
"""

from __future__ import annotations

import enum
import zipfile
from pathlib import Path

from fwx.errors import CORRUPT_HINT, InputError


class Format(str, enum.Enum):
    """A model format. ``PYTORCH`` and ``KERAS`` are sources; the rest are also targets."""

    PYTORCH = "pytorch"  # eager nn.Module: state_dict + class, factory, or pickled module
    TORCHSCRIPT = "torchscript"
    PT2 = "pt2"  # torch.export ExportedProgram
    KERAS = "keras"  # .keras or legacy .h5
    SAVEDMODEL = "savedmodel"
    ONNX = "onnx"
    TFLITE = "tflite"

    def __str__(self) -> str:
        return self.value


#: Formats ``fwx export --to`` can produce, in the order ``--to all`` writes them.
TARGETS: tuple[Format, ...] = (
    Format.TORCHSCRIPT,
    Format.PT2,
    Format.SAVEDMODEL,
    Format.ONNX,
    Format.TFLITE,
)

#: File or folder name of each artifact inside a model version folder.
#: Image layouts, spelled lower-case everywhere (fwx.json included); displays may upper-case them.
NCHW = "nchw"
NHWC = "nhwc"
LAYOUTS = (NCHW, NHWC)


def normalize_layout(value: str | None) -> str | None:
    """A layout in fwx's one spelling (``"NCHW"`` from an older fwx.json reads as ``"nchw"``)."""
    return value.lower() if value else None


ARTIFACT_NAMES: dict[Format, str] = {
    Format.TORCHSCRIPT: "model.torchscript.pt",
    Format.PT2: "model.pt2",
    Format.SAVEDMODEL: "model.savedmodel",
    Format.ONNX: "model.onnx",
    Format.TFLITE: "model.tflite",
    Format.KERAS: "model.keras",
}

#: Which framework each format belongs to (for manifests and extras).
FRAMEWORK: dict[Format, str] = {
    Format.PYTORCH: "torch",
    Format.TORCHSCRIPT: "torch",
    Format.PT2: "torch",
    Format.KERAS: "keras",
    Format.SAVEDMODEL: "tensorflow",
    Format.ONNX: "onnx",
    Format.TFLITE: "tflite",
}

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def parse_format(name: str) -> Format:
    """Parse a user-supplied format name, accepting common aliases."""
    aliases = {
        "ts": Format.TORCHSCRIPT,
        "jit": Format.TORCHSCRIPT,
        "torch": Format.PYTORCH,
        "exportedprogram": Format.PT2,
        "sm": Format.SAVEDMODEL,
        "tf": Format.SAVEDMODEL,
        "lite": Format.TFLITE,
        "h5": Format.KERAS,
    }
    key = name.strip().lower()
    if key in aliases:
        return aliases[key]
    try:
        return Format(key)
    except ValueError:
        known = ", ".join(f.value for f in Format)
        raise InputError(f"unknown format {name!r}", hint=f"use one of: {known}") from None


def _zip_names(path: Path) -> list[str]:
    try:
        with zipfile.ZipFile(path) as zf:
            return zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(
            f"{path} looks like a zip archive but cannot be read: {exc}",
            hint=CORRUPT_HINT,
        ) from exc


def _detect_zip(path: Path, names: list[str]) -> Format:
    base = {n.split("/", 1)[1] if "/" in n else n for n in names}
    if "config.json" in base and any(n.endswith(".weights.h5") for n in base) or "metadata.json" in names:
        return Format.KERAS
    if (
        any(n.endswith("serialized_exported_program.json") or n.endswith("models/model.json") for n in names)
        or "archive_format" in base
        and any("/models/" in n for n in names)
    ):
        return Format.PT2
    if any(n.endswith("constants.pkl") for n in names) and any("/code/" in n for n in names):
        return Format.TORCHSCRIPT
    if any(n.endswith("data.pkl") for n in names):
        return Format.PYTORCH
    raise InputError(
        f"{path} is a zip archive of no model format fwx knows",
        hint="pass a TorchScript, .pt2, .pt/.pth checkpoint, .keras, SavedModel, .onnx or .tflite",
    )


#: A Hugging Face ``save_pretrained`` folder: its config and one of the weight files transformers writes.
_HF_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def is_hf_folder(path: str | Path) -> bool:
    """A Hugging Face model folder (a PyTorch source whose module transformers rebuilds from config.json)."""
    p = Path(path)
    return p.is_dir() and (p / "config.json").is_file() and any((p / n).is_file() for n in _HF_WEIGHTS)


def detect_format(path: str | Path) -> Format:
    """Tell a model's format from its content (and, for ambiguous cases, its name).

    Raises ``InputError`` for a missing path, an empty or unknown file.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p} does not exist", hint="check the path")
    if p.is_dir():
        if (p / "saved_model.pb").is_file() or (p / "saved_model.pbtxt").is_file():
            return Format.SAVEDMODEL
        if is_hf_folder(p):
            return Format.PYTORCH
        raise InputError(
            f"{p} is a folder but neither a SavedModel (no saved_model.pb) nor a Hugging Face folder "
            "(config.json + model.safetensors)",
            hint="pass a SavedModel folder, a save_pretrained folder or a model file",
        )
    with p.open("rb") as fh:
        head = fh.read(64)
    if not head:
        raise InputError(f"{p} is empty", hint="the file is truncated; export it again")
    if head[4:8] == b"TFL3":
        return Format.TFLITE
    if head.startswith(_HDF5_MAGIC):
        return Format.KERAS
    if head.startswith(b"PK\x03\x04"):
        return _detect_zip(p, _zip_names(p))
    if p.suffix.lower() == ".safetensors" and head[8:9] == b"{":
        return Format.PYTORCH  # a state_dict as data: 8-byte header length, then the JSON header
    if head[:2] in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05"):
        return Format.PYTORCH  # legacy (non-zip) torch.save pickle
    if p.suffix.lower() == ".onnx" or _looks_like_onnx(head):
        return Format.ONNX
    raise InputError(
        f"cannot tell the format of {p}",
        hint="fwx reads TorchScript, .pt2, .pt/.pth, .keras/.h5, SavedModel folders, .onnx and .tflite",
    )


def _looks_like_onnx(head: bytes) -> bool:
    # ModelProto starts with field 1 (ir_version, varint) -> tag byte 0x08,
    # and the ir_version is small (3..12 today).
    return len(head) > 2 and head[0] == 0x08 and 1 <= head[1] <= 32
