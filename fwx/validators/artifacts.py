"""Find, verify and load the artifacts ``fwx validate`` was pointed at.

A version folder contributes every ``ok`` artifact in its fwx.json, after the
checksums matched (a mismatch is an error: nothing is loaded). Loose files are
detected by content. A loose TorchScript file is code from an unknown origin,
so it needs ``--trust-model-code``; inside a verified version folder it does not.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fwx.errors import InputError, UnsafeModelError, UsageError, ValidationError
from fwx.formats import Format
from fwx.manifest import MANIFEST_NAME, Manifest
from fwx.runtimes.base import Runtime, load_runtime
from fwx.signature import Signature
from fwx.sources.boundary import format_of, loadable
from fwx.validators.policy import precision_class

PRECISION_RANK = {"fp32": 0, "bf16": 1, "fp16": 2, "int8": 3}


@dataclass
class Artifact:
    key: str
    format: Format
    path: Path
    precision: str = "fp32"
    layout: str | None = None
    signature: Signature | None = None  # recorded in fwx.json (None for loose files)
    verified: bool = False  # listed in a checksummed fwx.json
    runtime: Runtime | None = None


@dataclass
class Collection:
    artifacts: list[Artifact] = field(default_factory=list)
    manifest: Manifest | None = None
    folder: Path | None = None
    notes: list[str] = field(default_factory=list)


def collect(paths: Sequence[str | Path]) -> Collection:
    """Artifacts of one version folder and/or loose files (keys are unique)."""
    col = Collection()
    for raw in paths:
        p = loadable(raw)  # its admitted private copy (the loader's already is one): never the user's path
        if p.is_dir() and (p / MANIFEST_NAME).is_file():
            if col.manifest is not None:
                raise UsageError("pass at most one model version folder", hint="validate versions one at a time")
            _add_version(col, p)
        else:
            fmt = format_of(p)  # detected at the boundary when the loader admitted it
            key = p.name if p.name not in {a.key for a in col.artifacts} else str(p)
            col.artifacts.append(Artifact(key, fmt, p, precision=_guess_precision(p)))
    if not col.artifacts:
        raise InputError("nothing to validate", hint="pass a version folder with fwx.json or artifact files")
    return col


def _add_version(col: Collection, folder: Path) -> None:
    manifest = Manifest.read(folder)
    manifest.verify(folder)  # ChecksumError (exit 1) before anything is loaded
    col.manifest, col.folder = manifest, folder
    for key, entry in manifest.artifacts.items():
        if entry.status != "ok":
            col.notes.append(f"skipped {key}: its export status is {entry.status!r}")
            continue
        col.artifacts.append(
            Artifact(
                key,
                entry.fmt,
                folder / entry.path,
                precision=entry.precision,
                layout=entry.layout,
                signature=entry.sig() if entry.signature else None,
                verified=True,
            )
        )
        if entry.quantization:  # the receipt of a quantised artifact: calibration, size, accuracy cost
            from fwx.quantize.report import summary

            col.notes.append(f"{key}: {summary(entry.quantization)}")
            from fwx.quantize.cpu import differs

            q = entry.quantization
            if (line := differs(q.get("cpu"), q.get("weight_bits"))) is not None:
                col.notes.append(f"{key}: {line} (these results are that check)")


def _guess_precision(path: Path) -> str:
    """Loose files carry no manifest; names like ``model.int8.tflite`` are the only hint."""
    name = path.name.lower()
    for tag in ("int8", "fp16", "bf16"):
        if tag in name:
            return tag
    return "fp32"


def by_precision(artifacts: Sequence[Artifact]) -> list[Artifact]:
    """Highest precision first; ties keep the given order."""
    return sorted(artifacts, key=lambda a: PRECISION_RANK[precision_class(a.precision)])


def load(art: Artifact, *, device: str, hint: Signature | None, trust: bool) -> Runtime:
    """Load one artifact with its runtime (``InputError``/``MissingDependencyError`` on failure)."""
    if art.format is Format.TORCHSCRIPT and not (art.verified or trust):
        raise UnsafeModelError(
            f"{art.path} is a TorchScript file outside a checksummed fwx.json; loading it runs its code",
            hint="validate its version folder, or pass --trust-model-code if you trust the file",
        )
    kw: dict[str, Any] = {"precision": art.precision}
    rt = load_runtime(
        art.format, art.path, device=device, signature_hint=art.signature or hint, trust_model_code=trust, **kw
    )  # a matching checksum proves origin, not safety
    art.runtime = rt
    return rt


def load_all(col: Collection, *, device: str, pinned: Signature | None, trust: bool) -> Signature:
    """Load every artifact; return the pinned signature (fwx.json's, else the first one read back)."""
    needs_hint = [a for a in col.artifacts if a.format is Format.TORCHSCRIPT and a.signature is None]
    for art in [a for a in col.artifacts if a not in needs_hint]:
        rt = load(art, device=device, hint=pinned, trust=trust)
        pinned = pinned or rt.signature()
    if needs_hint and pinned is None:
        raise UsageError(
            "a TorchScript file stores no signature, and nothing else given has one",
            hint="validate its version folder, or pass another format of the same model with it",
        )
    for art in needs_hint:
        load(art, device=device, hint=pinned, trust=trust)
    assert pinned is not None
    check_compatible(col.artifacts, pinned)
    return pinned


def check_compatible(artifacts: Sequence[Artifact], pinned: Signature) -> None:
    """Refuse before measuring when artifacts cannot be the same model (input/output counts or ranks)."""
    from fwx.validators.layout import shape_to

    for art in artifacts:
        assert art.runtime is not None
        sig = art.runtime.signature()
        if len(sig.inputs) != len(pinned.inputs) or (sig.outputs and len(sig.outputs) != len(pinned.outputs)):
            raise ValidationError(
                f"incompatible signatures: {art.key} is {sig}, expected {pinned}",
                hint="pass artifacts of the same model",
            )
        for mine, ref in zip(sig.inputs, pinned.inputs, strict=True):
            if mine.shape and len(shape_to(mine.shape, art.layout, None)) != len(ref.shape):
                raise ValidationError(
                    f"incompatible signatures: {art.key} input {mine} vs pinned {ref}",
                    hint="pass artifacts of the same model",
                )


def close_all(col: Collection) -> None:
    for art in col.artifacts:
        if art.runtime is not None:
            art.runtime.close()


def gpu_visible() -> bool:
    """A cheap look for an NVIDIA GPU (driver tool or device node), before any framework import."""
    return shutil.which("nvidia-smi") is not None or Path("/dev/nvidiactl").exists()
