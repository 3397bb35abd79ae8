"""``fwx.json``: the manifest of one model version, the single source of truth.

The exporter writes it last; the server and the validators read it. Checksums
cover every byte of every artifact so a half-copied or tampered version is
refused. The schema is versioned; readers refuse newer major versions.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fwx.decimal_text import is_digits
from fwx.errors import ChecksumError, FwxError, InputError
from fwx.formats import Format, normalize_layout
from fwx.signature import Signature

SCHEMA_VERSION = 1
MANIFEST_NAME = "fwx.json"


@dataclass
class Hop:
    """One conversion step: which tool turned which format into which."""

    source: str
    target: str
    tool: str
    tool_version: str = ""
    seconds: float = 0.0


@dataclass
class ArtifactEntry:
    """One format inside a model version."""

    format: str
    path: str  # relative to the version folder
    sha256: str = ""
    size_bytes: int = 0
    precision: str = "fp32"
    opset: int | None = None
    layout: str | None = None  # "nchw" | "nhwc"; None when no spatial input
    signature: dict[str, Any] = field(default_factory=dict)  # as read back from the artifact
    hops: list[dict[str, Any]] = field(default_factory=list)
    tool_versions: dict[str, str] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)
    quantization: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"  # "ok" | "failed" (kept with --keep-failed)
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # more files of this artifact (ONNX external data) -> sha256
    #: tensor name -> the name inside the artifact, where its format forces another spelling (SavedModel keys)
    names: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.layout = normalize_layout(self.layout)

    @property
    def fmt(self) -> Format:
        return Format(self.format)

    def sig(self) -> Signature:
        return Signature.from_json(self.signature)


@dataclass
class SourceInfo:
    path: str
    sha256: str
    format: str
    framework: str
    framework_version: str = ""
    #: A loose file's companions fwx read (an ONNX file's external data), name -> sha256; written when any.
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class Manifest:
    name: str
    version: int
    source: SourceInfo
    signature: dict[str, Any]  # the pinned signature
    artifacts: dict[str, ArtifactEntry] = field(default_factory=dict)
    command: str = ""
    created: str = ""
    fwx_version: str = ""
    schema_version: int = SCHEMA_VERSION
    skipped: dict[str, str] = field(default_factory=dict)  # --to all: format -> why it was not exported
    #: --to all: format -> {"error", "plan", "validation"} for an artifact made but not published (wrong numbers)
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)
    # how the export drew validation inputs (token-id ranges, lookup keys), for ``fwx validate`` to draw the same
    samples: dict[str, Any] = field(default_factory=dict)
    # files a client needs beside the artifacts (a Hugging Face folder's tokenizer and config) -> sha256
    assets: dict[str, str] = field(default_factory=dict)
    # a Hugging Face folder's task as exported (``text-generation-with-past``, ``NAME:part``); the server reads it
    task: str = ""

    def sig(self) -> Signature:
        return Signature.from_json(self.signature)

    def warmup_sizes(self) -> dict[str, int]:
        """The first recorded size of each dim the model admits only some sizes of (``samples.sizes``)."""
        sizes = self.samples.get("sizes") or {}
        return {str(k): int(v[0]) for k, v in sizes.items() if isinstance(v, list) and v and int(v[0]) > 0}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if not data["source"]["files"]:
            del data["source"]["files"]  # most sources are one file or folder: their fwx.json stays as it was
        data["artifacts"] = {k: asdict(v) for k, v in self.artifacts.items()}
        for entry in data["artifacts"].values():  # fields added later are written only when used,
            for key in ("files", "names"):  # so fwx versions that predate them still read the file
                if not entry[key]:
                    del entry[key]
        for key in ("skipped", "failed", "samples", "assets", "task"):
            if not data[key]:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        sv = int(data.get("schema_version", 0))
        if sv < 1 or sv > SCHEMA_VERSION:
            raise InputError(
                f"fwx.json schema version {sv} is not supported by this fwx (reads up to {SCHEMA_VERSION})",
                hint="upgrade fwx or re-export the model",
            )
        arts = {k: ArtifactEntry(**v) for k, v in data.get("artifacts", {}).items()}
        return cls(
            name=data["name"],
            version=int(data["version"]),
            source=SourceInfo(**data["source"]),
            signature=data["signature"],
            artifacts=arts,
            command=data.get("command", ""),
            created=data.get("created", ""),
            fwx_version=data.get("fwx_version", ""),
            schema_version=sv,
            skipped=dict(data.get("skipped") or {}),
            failed=dict(data.get("failed") or {}),
            samples=dict(data.get("samples") or {}),
            assets=dict(data.get("assets") or {}),
            task=str(data.get("task") or ""),
        )

    def write(self, folder: Path) -> Path:
        path = folder / MANIFEST_NAME
        text = json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"
        with path.open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        return path

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        """Read and check ``folder/fwx.json``: any malformed field is one ``InputError`` line naming it."""
        path = Path(folder) / MANIFEST_NAME
        data = _load_json(path, Path(folder))
        sv = data.get("schema_version", 0) if isinstance(data, dict) else 0
        if isinstance(sv, int) and sv > SCHEMA_VERSION:
            return cls.from_json(data)  # raises the "newer fwx.json" error
        from fwx.safety.manifest_schema import check

        check(data, str(path))
        _check_location(data, Path(folder), path)
        try:
            manifest = cls.from_json(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path} is missing or has malformed field {exc}") from exc
        # Build every signature now, so a bad dtype or duplicate name fails here with its field named.
        for field_name, sig in [
            ("signature", data["signature"]),
            *((f"artifacts/{k}/signature", a.signature) for k, a in manifest.artifacts.items()),
        ]:
            try:
                if sig:
                    Signature.from_json(sig)
            except (FwxError, KeyError, TypeError, ValueError) as exc:
                why = exc.message if isinstance(exc, FwxError) else str(exc)
                raise InputError(
                    f"{path}: field {field_name} is invalid: {why}",
                    hint="the manifest is corrupt or was edited by hand; re-export the model",
                ) from exc
        return manifest

    def verify(self, folder: Path) -> None:
        """Raise ``ChecksumError`` if any artifact differs from its recorded sha256."""
        for key, entry in self.artifacts.items():
            for rel, digest in [(entry.path, entry.sha256), *entry.files.items()]:
                _verify_file(Path(folder), key, rel, digest)
        for rel, digest in self.assets.items():
            _verify_file(Path(folder), "assets", rel, digest)


#: fwx.json is small; a bigger file is not one fwx wrote.
MAX_MANIFEST_BYTES = 16 * 2**20


def _load_json(path: Path, folder: Path) -> Any:
    """The parsed JSON, refusing a symlinked manifest (it could point outside the repository)."""
    if path.is_symlink():
        raise InputError(
            f"{path} is a symbolic link; fwx reads only a real fwx.json file",
            hint="copy the file into the version folder instead of linking it",
        )
    try:
        size = path.stat().st_size
        if size > MAX_MANIFEST_BYTES:
            raise InputError(
                f"{path} is {size} bytes (a fwx.json is at most {MAX_MANIFEST_BYTES})",
                hint="the manifest is corrupt; re-export the model",
            )
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"{folder} has no {MANIFEST_NAME}", hint="point at a version folder written by fwx export"
        ) from None
    except RecursionError:
        raise InputError(
            f"{path} is nested too deeply to be a fwx.json", hint="the manifest is corrupt; re-export the model"
        ) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path} is not valid JSON: {str(exc)[:200]}") from exc


def _check_location(data: dict[str, Any], folder: Path, path: Path) -> None:
    """Inside a repository (``<model>/<N>/``) the manifest must describe version N.

    The model name is not compared: model folders may be renamed (the server
    serves the folder's name), and the schema already keeps ``name`` to a safe
    pattern. A version number that disagrees with its folder is a hand copy
    that bypassed ``fwx export``'s atomic publish.
    """
    if not (is_digits(folder.name) and folder.name[0] != "0"):
        return  # a loose copy of a version folder: nothing to compare with
    if data["version"] != int(folder.name):
        raise InputError(
            f"{path}: field version is {data['version']} but the folder is version {folder.name}",
            hint="the version folder was renamed or copied; re-export the model or fix the version",
        )


def _verify_file(folder: Path, key: str, rel: str, digest: str) -> None:
    p = (folder / rel).resolve()
    if not p.is_relative_to(folder.resolve()):
        raise ChecksumError(f"artifact {key!r} points outside its version folder: {rel}")
    if not p.exists():
        raise ChecksumError(f"artifact {key!r} is missing: {rel}")
    actual = sha256_path(p)
    if actual != digest:
        raise ChecksumError(
            f"checksum mismatch for {key} ({rel}): fwx.json says {digest[:12]}…, file is {actual[:12]}…",
            hint="the artifact was modified or half-copied; re-export it",
        )


def sha256_path(path: Path, chunk: int = 1 << 20) -> str:
    """sha256 of a file, or of a folder (relative paths and contents, in sorted order)."""
    h = hashlib.sha256()
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        if path.is_dir():
            h.update(f.relative_to(path).as_posix().encode() + b"\0")
        with f.open("rb") as fh:
            while block := fh.read(chunk):
                h.update(block)
    return h.hexdigest()


def size_of(path: Path) -> int:
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
