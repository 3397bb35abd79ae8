"""Scan a ``.pt2`` archive (and ``torch.save`` zips) as data before torch opens it.

``torch.export.load`` unpickles several members with ``weights_only=False``
(pickled weights and constants, ``opaque_obj*``), retries ``sample_inputs``
with ``weights_only=False`` when the safe load fails, loads ``custom_obj*``
as TorchScript objects, and the legacy layout holds more ``.pt`` blobs. So
every member is checked here: nested zips are walked, every pickle must name
only globals on torch's ``weights_only`` allow-list, and members that are code
by construction (TorchScript objects, AOTInductor native libraries) are
refused outright. Raw tensor bytes named by a ``*_config.json`` with
``use_pickle: false`` (and by no pickled entry) count only if they parse as a
pickle; every other member that is not text must be a zip or a pickle of any
protocol (0 and 1 have no header) that this walk can read.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from fwx.safety.pickles import PickleScanError, looks_like_pickle, torch_safe_globals, unsafe_globals

_ZIP_HEAD = b"PK\x03\x04"
_NATIVE_SUFFIXES = (".so", ".dll", ".dylib", ".pyd", ".o", ".cubin")
_MAX_DEPTH = 3
_MAX_MEMBERS = 100_000


@dataclass
class Pt2Findings:
    """Why an archive is unsafe: ``member -> reason`` (empty when it is plain data)."""

    problems: dict[str, str] = field(default_factory=dict)

    def summary(self, limit: int = 3) -> str:
        items = list(self.problems.items())
        shown = "; ".join(f"{m}: {why}" for m, why in items[:limit])
        return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


def scan_archive(data: bytes, *, allowed: frozenset[str] | None = None) -> Pt2Findings:
    """Check every member of the zip archive ``data`` (recursing into nested ``torch.save`` zips)."""
    findings = Pt2Findings()
    _scan_zip(data, "", allowed if allowed is not None else torch_safe_globals(), findings, 0)
    return findings


#: Members torch reads as text or JSON, never unpickles.
_TEXT_BASENAMES = frozenset(
    {
        "archive_format",
        "archive_version",
        "byteorder",
        "version",
        "serialization_id",
        ".format_version",
        ".storage_alignment",
    }
)


def _is_text(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base in _TEXT_BASENAMES or base.endswith((".json", ".txt")) or "/extra/" in f"/{name}"


def _payloads(zf: zipfile.ZipFile, names: list[str]) -> tuple[set[str], set[str]]:
    """Members the ``*_config.json`` files declare raw tensor bytes, and those they declare pickled."""
    raw: set[str] = set()
    pickled: set[str] = set()
    for name in names:
        if not name.endswith("_config.json"):
            continue
        try:
            config = json.loads(zf.read(name)).get("config", {})
        except (ValueError, AttributeError, zipfile.BadZipFile, OSError):
            continue
        folder = name.rsplit("/", 1)[0]
        for meta in config.values() if isinstance(config, dict) else ():
            if isinstance(meta, dict) and isinstance(meta.get("path_name"), str):
                (raw if meta.get("use_pickle") is False else pickled).add(f"{folder}/{meta['path_name']}")
    return raw - pickled, pickled  # a member declared both ways is unpickled by torch: scan it


def _scan_zip(data: bytes, prefix: str, allowed: frozenset[str], out: Pt2Findings, depth: int) -> None:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise PickleScanError(f"not a readable zip archive ({exc})") from exc
    if len(names) > _MAX_MEMBERS:
        out.problems[prefix or "archive"] = f"{len(names)} members (limit {_MAX_MEMBERS})"
        return
    raw, _ = _payloads(zf, names)
    for name in names:
        member = prefix + name
        base = name.rsplit("/", 1)[-1]
        if name.endswith("/") or _is_text(name) or (depth > 0 and not name.endswith(".pkl")):
            continue  # inside a torch.save zip only *.pkl is unpickled; the rest is storage bytes
        if base.startswith("custom_obj"):
            out.problems[member] = "a TorchScript object (loading it runs its code)"
            continue
        if base.endswith(_NATIVE_SUFFIXES) or "/aotinductor/" in f"/{name}":
            out.problems[member] = "native code (AOTInductor package)"
            continue
        try:
            blob = zf.read(name)
        except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as exc:
            out.problems[member] = f"unreadable ({exc})"
            continue
        _scan_blob(blob, member, allowed, out, depth, lenient=name in raw)


def _scan_blob(
    blob: bytes, member: str, allowed: frozenset[str], out: Pt2Findings, depth: int, *, lenient: bool
) -> None:
    """Walk one member. ``lenient``: declared raw tensor bytes, which only count if they ARE a pickle."""
    if blob.startswith(_ZIP_HEAD) and not member.endswith(".pkl"):
        if depth >= _MAX_DEPTH:
            out.problems[member] = f"zip archives nested deeper than {_MAX_DEPTH}"
            return
        try:
            _scan_zip(blob, member + "!/", allowed, out, depth + 1)
        except PickleScanError as exc:
            if not lenient:
                out.problems[member] = str(exc)
        return
    if lenient and not looks_like_pickle(blob):
        return
    try:
        bad = unsafe_globals(blob, allowed)
    except PickleScanError as exc:
        if not lenient:
            out.problems[member] = f"not a pickle fwx can read as data ({exc})"
        return
    if bad:
        shown = ", ".join(bad[:5]) + (" …" if len(bad) > 5 else "")
        out.problems[member] = f"a pickle that imports {shown}"


def read_checked(path: Path) -> tuple[bytes, Pt2Findings]:
    """The archive's bytes (read once, so what was scanned is what torch loads) and its findings."""
    data = Path(path).read_bytes()
    if not data.startswith(_ZIP_HEAD):
        raise PickleScanError("not a zip archive")
    return data, scan_archive(data)
