"""Scan a ``.pt2`` archive as data, following its own structure to every member torch will deserialize.

Derived from ``torch.export.pt2_archive._package.load_pt2`` (torch 2.13):
all records live under one root folder (the first member's); each
``models/<m>.json`` is a program (parsed as JSON, its graph held to
``pt2_graph``), and for each program torch reads ``data/sample_inputs/<m>.pt``
(``torch.load``, retried with ``weights_only=False``), the legacy
``data/weights/<m>.pt`` and ``data/constants/<m>.pt`` if present, else the
``*_config.json`` files, whose entries name members torch ``torch.load``s
(``use_pickle``), reads as raw tensor bytes (``use_pickle: false``), loads as
TorchScript (``custom_obj_*``) or ``pickle.loads`` (``opaque_obj_*``). A 2.7
archive (top-level ``version``) is read by ``zipfile`` instead and its
``serialized_*`` members are ``torch.load``ed. Every member torch
deserializes, whatever its name, must be a clean ``weights_only`` pickle
(``pickles.weights_only_problems``) or a ``torch.save`` zip whose only pickle
is; TorchScript objects and AOTInductor native code are refused. Members torch
never reads are not deserialized and are left alone. The zip itself is first
held to ``zipbounds`` (sizes, overlaps, names, the inflate budget).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from fwx.safety.pickles import LEGACY_PICKLES, PickleScanError, torch_safe_globals, weights_only_problems
from fwx.safety.zipbounds import MAX_DEPTH, BoundedZip, Budget, ZipBoundsError, ZipCorruptError, inflate_budget

_ZIP_HEAD = b"PK\x03\x04"
_NATIVE_SUFFIXES = (".so", ".dll", ".dylib", ".pyd", ".o", ".cubin")
#: The records a ``torch.save`` zip holds (under its root folder); ``data/<key>`` are raw storages.
_TORCH_SAVE_TEXT = frozenset(
    {"byteorder", "version", ".data/version", ".data/serialization_id", ".format_version", ".storage_alignment"}
)
_LEGACY_PAYLOADS = (
    "serialized_state_dict.pt",
    "serialized_state_dict.json",
    "serialized_constants.pt",
    "serialized_constants.json",
    "serialized_example_inputs.pt",
)


@dataclass
class Pt2Findings:
    """Why an archive is unsafe: ``member -> reason`` (empty when it is plain data); ``bounds`` if too big."""

    problems: dict[str, str] = field(default_factory=dict)
    bounds: str | None = None

    def summary(self, limit: int = 3) -> str:
        items = list(self.problems.items())
        shown = "; ".join(f"{m}: {why}" for m, why in items[:limit])
        return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


@dataclass
class _Plan:
    """What torch does with each member: ``load`` (torch.load), ``pickle`` (pickle.loads), ``graph``."""

    strict: dict[str, str] = field(default_factory=dict)  # member -> "load" | "pickle"
    graphs: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


def scan_archive(data: bytes, *, allowed: frozenset[str] | None = None) -> Pt2Findings:
    """Check every member torch would deserialize from the ``.pt2`` archive ``data``."""
    out = Pt2Findings()
    try:
        zf = BoundedZip(data, Budget(inflate_budget(len(data))))
        plan = _plan(zf)
        out.problems.update(plan.refused)
        safe = allowed if allowed is not None else torch_safe_globals()
        for name, how in plan.strict.items():
            _hold(zf, name, how, safe, out, 0)
        for name in plan.graphs:
            _graph(zf, name, out)
    except ZipCorruptError as exc:
        raise PickleScanError(str(exc)) from exc
    except ZipBoundsError as exc:
        out.bounds = str(exc)
    return out


def _plan(zf: BoundedZip) -> _Plan:
    names = zf.names
    root = names[0].split("/", 1)[0] if names and "/" in names[0] else ""
    if root and all(n.startswith(root + "/") for n in names) and zf.find(f"{root}/archive_format"):
        plan = _pt2_plan(zf, root)
    elif "version" in names and "serialized_exported_program.json" in names:
        plan = _Plan({n: "load" for n in _LEGACY_PAYLOADS if n in names}, ["serialized_exported_program.json"])
    else:
        raise ZipCorruptError("archive: not laid out as torch.export.save writes a .pt2 (no <root>/archive_format)")
    for name in names:  # code by construction, wherever it sits and whether or not a config names it
        base = name.rsplit("/", 1)[-1]
        if base.startswith("custom_obj"):
            plan.refused[name] = "a TorchScript object (loading it runs its code)"
        elif base.endswith(_NATIVE_SUFFIXES) or "/aotinductor/" in f"/{name}":
            plan.refused[name] = "native code (AOTInductor package)"
    for name in plan.refused:
        plan.strict.pop(name, None)
    return plan


def _pt2_plan(zf: BoundedZip, root: str) -> _Plan:
    plan = _Plan()
    for name in zf.names:
        rel = name[len(root) + 1 :]
        if not rel.startswith("models/"):
            continue
        model = rel[len("models/") : -len(".json")]  # torch slices the name exactly so
        plan.graphs.append(name)
        for legacy in (f"data/sample_inputs/{model}.pt", f"data/weights/{model}.pt", f"data/constants/{model}.pt"):
            _mark(zf, root, legacy, "load", plan)
        _config(zf, root, "data/weights/", f"data/weights/{model}_weights_config.json", plan)
        _config(zf, root, "data/constants/", f"data/constants/{model}_constants_config.json", plan)
    return plan


def _mark(zf: BoundedZip, root: str, rel: str, how: str, plan: _Plan) -> None:
    member = zf.find(f"{root}/{rel}")
    if member is not None and plan.strict.get(member) != "load":
        plan.strict[member] = how


def _config(zf: BoundedZip, root: str, folder: str, rel: str, plan: _Plan) -> None:
    member = zf.find(f"{root}/{rel}")
    if member is None:
        return
    try:
        config = json.loads(zf.read(member).decode("utf-8")).get("config", {})
    except (ValueError, AttributeError) as exc:
        plan.refused[member] = f"not the JSON payload config torch reads ({exc})"
        return
    for meta in config.values() if isinstance(config, dict) else [None]:
        path_name = meta.get("path_name") if isinstance(meta, dict) else None
        if not isinstance(path_name, str):
            plan.refused[member] = "an entry without a path_name"
            continue
        target = os.path.join(folder, path_name)  # exactly how torch builds the record name
        if folder == "data/constants/" and path_name.startswith("opaque_obj_"):
            _mark(zf, root, target, "pickle", plan)
        elif meta is not None and meta.get("use_pickle") is not False:  # torch tests truthiness: be stricter
            _mark(zf, root, target, "load", plan)


def _hold(zf: BoundedZip, name: str, how: str, allowed: frozenset[str], out: Pt2Findings, depth: int) -> None:
    """Hold one member torch deserializes to the ``weights_only`` rules."""
    blob = zf.read(name)
    shown = zf.where + name
    if how == "load" and blob.startswith(_ZIP_HEAD):
        _torch_save_zip(zf, blob, shown, allowed, out, depth)
        return
    if how == "load" and not blob:
        return  # torch reads an empty artifact as {}
    try:
        bad = weights_only_problems(blob, allowed, count=LEGACY_PICKLES if how == "load" else 1)
    except PickleScanError as exc:
        out.problems[shown] = f"not a pickle fwx can read as data ({exc})"
        return
    if bad:
        out.problems[shown] = _pickle_reason(bad)


def _pickle_reason(bad: list[str]) -> str:
    names = [b for b in bad if not b.startswith("opcode ")]
    ops = [b[len("opcode ") :] for b in bad if b.startswith("opcode ")]
    parts = []
    if names:
        parts.append("imports " + ", ".join(names[:5]) + (" …" if len(names) > 5 else ""))
    if ops:
        parts.append("uses opcodes " + ", ".join(ops[:5]) + " that torch's weights_only load refuses")
    return "a pickle that " + " and ".join(parts)


def _torch_save_zip(
    outer: BoundedZip, blob: bytes, shown: str, allowed: frozenset[str], out: Pt2Findings, depth: int
) -> None:
    """A ``torch.save`` zip inside the archive: only its records, and its one pickle held to the rules."""
    if depth + 1 >= MAX_DEPTH:
        raise ZipBoundsError(f"{shown}: zip archives nested deeper than {MAX_DEPTH}")
    inner = BoundedZip(blob, outer.budget, where=shown + "!/")
    names = inner.names
    root = names[0].split("/", 1)[0] if names and "/" in names[0] else ""
    for name in names:
        rel = name[len(root) + 1 :] if root and name.startswith(root + "/") else None
        if rel is None or not (rel in _TORCH_SAVE_TEXT or rel == "data.pkl" or _storage(rel)):
            out.problems[inner.where + name] = "not a record torch.save writes (TorchScript code, or a stray member)"
    pickle_name = inner.find(f"{root}/data.pkl") if root else None
    if pickle_name is None:
        out.problems[shown] = "a torch.save zip without data.pkl"
        return
    _hold(inner, pickle_name, "pickle", allowed, out, depth + 1)


def _storage(rel: str) -> bool:
    return rel.startswith("data/") and "/" not in rel[len("data/") :] and len(rel) > len("data/")


def _graph(zf: BoundedZip, name: str, out: Pt2Findings) -> None:
    from fwx.safety.pt2_graph import graph_problems

    try:
        doc = json.loads(zf.read(name).decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        out.problems[name] = f"not the JSON program torch reads ({str(exc)[:80]})"
        return
    found = graph_problems(doc)
    if found:
        out.problems[name] = "; ".join(found[:3]) + (f" (and {len(found) - 3} more)" if len(found) > 3 else "")


def read_checked(path: Path) -> tuple[bytes, Pt2Findings]:
    """The archive's bytes (read once, so what was scanned is what torch loads) and its findings."""
    data = Path(path).read_bytes()
    if not data.startswith(_ZIP_HEAD):
        raise PickleScanError("not a zip archive")
    return data, scan_archive(data)
