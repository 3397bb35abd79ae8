"""A Hugging Face folder read as data: its config, its weights, its tokenizer files, checked before use.

The rules are the ones every other source follows: nothing is downloaded, no
code from the folder runs (a config with ``auto_map`` names Python files to
import: refused unless ``--trust-model-code``), a link that leaves the folder
is refused (the bytes read must be the folder's own), weights come from
safetensors (data only) or from a ``pytorch_model.bin`` whose pickle is walked
by ``fwx.safety.pickles`` first and then read with ``weights_only=True`` from
the very bytes that were walked.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fwx.errors import InputError, UnsafeModelError, first_line
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.safety.hf_names import ASSETS, CODE_MAPS, plain_name, shard_names

TRUST_HINT = "pass --trust-model-code only if you trust where this folder came from"
CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
BIN = "pytorch_model.bin"
ASSET_NAMES = ASSETS  # the files a client needs beside the artifacts (fwx.safety.hf_fileset)
_MAX_JSON = 64 * 2**20


def check_folder(folder: Path, *, trust: bool) -> dict[str, Any]:
    """The folder's config, after refusing links out of it and (unless trusted) code it would import."""
    root = folder.resolve()
    blobs = _cache_blobs(folder)
    for path in _walk(folder):
        if path.is_symlink() and not _inside(path.resolve(), root) and not _a_blob(path, blobs):
            raise UnsafeModelError(
                f"{path} is a link to {os.readlink(path)}, outside the model folder",
                hint="copy the real files into the folder (cp -rL); fwx reads only the folder's own files",
            )
    config = read_json(folder / CONFIG)
    if not isinstance(config, dict):
        raise InputError(f"{folder / CONFIG} is not a JSON object", hint="save the model with save_pretrained")
    if not trust:
        for name in CODE_MAPS:
            data = config if name == CONFIG else _optional_json(folder / name)
            if isinstance(data, dict) and data.get("auto_map"):
                names = ", ".join(sorted(str(v) for v in _values(data["auto_map"])))[:200]
                raise UnsafeModelError(
                    f"{folder / name} has auto_map: loading it imports code from the folder ({names})",
                    hint=TRUST_HINT,
                )
    return config


def _cache_blobs(folder: Path) -> Path | None:
    from fwx.sources.hf_hub import blobs_of

    blobs = blobs_of(folder)
    return blobs.resolve() if blobs is not None and blobs.is_dir() else None


def _a_blob(path: Path, blobs: Path | None) -> bool:
    """A Hugging Face cache snapshot's link to a file of its own model's ``blobs/`` (how the hub stores files)."""
    if blobs is None:
        return False
    target = path.resolve()
    return target.parent == blobs and target.is_file() and not target.is_symlink()


def _walk(folder: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in (*dirnames, *filenames):
            yield Path(dirpath) / name


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _values(obj: Any) -> Iterator[Any]:
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _values(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _values(v)
    elif obj is not None:
        yield obj


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise InputError(f"{path} is missing", hint="a Hugging Face folder has the config.json save_pretrained writes")
    if path.stat().st_size > _MAX_JSON:
        raise InputError(f"{path} is larger than {_MAX_JSON >> 20} MiB, not a config", hint="check the folder")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # nesting deeper than Python's stack
        raise InputError(f"{path} is not valid JSON: {first_line(exc)}", hint="save the model again") from exc


def _optional_json(path: Path) -> Any:
    return read_json(path) if path.is_file() else None


def assets(folder: Path) -> dict[str, Path]:
    """The tokenizer / preprocessor / config files present, by name (copied beside the artifacts)."""
    return {name: folder / name for name in ASSET_NAMES if (folder / name).is_file()}


def weight_files(folder: Path) -> list[Path]:
    """The folder's weight files: safetensors first (one file or the shards its index names), else the .bin."""
    for single, index in ((SAFETENSORS, f"{SAFETENSORS}.index.json"), (BIN, f"{BIN}.index.json")):
        if (folder / single).is_file():
            return [folder / single]
        if (folder / index).is_file():
            shards = shard_names(read_json(folder / index))
            if not shards or not all(map(plain_name, shards)):
                raise InputError(f"{folder / index} names no shards in the folder", hint="save the model again")
            for shard in shards:
                if not (folder / shard).is_file():
                    raise InputError(
                        f"{folder / shard} is missing: {folder / index} lists it",
                        hint="copy or download every shard the index names (or save the model again)",
                    )
            return [folder / s for s in shards]
    raise InputError(
        f"{folder} has a config.json but no {SAFETENSORS} or {BIN}", hint="save the model with save_pretrained"
    )


def load_state(files: list[Path], *, trust: bool) -> dict[str, Any]:
    """Every tensor of the weight files, read from bytes checked first."""
    state: dict[str, Any] = {}
    for path in files:
        state.update(load_weights(path, trust=trust))
    return state


def load_weights(path: Path, *, trust: bool) -> dict[str, Any]:
    """One weight file: safetensors as data; a pickle walked, refused naming its globals, then loaded weights-only."""
    data = path.read_bytes()
    if path.suffix == ".safetensors":
        st = require("safetensors.torch", "reading safetensors weights")
        try:
            return dict(st.load(data))
        except Exception as exc:  # noqa: BLE001 - a corrupt header raises anything
            raise InputError(f"cannot read {path} as safetensors: {first_line(exc)}", hint="save it again") from exc
    torch = require("torch", "reading PyTorch weights")
    needed = pickle_globals_outside_torch(data, path)
    if needed and not trust:
        raise UnsafeModelError(
            f"{path} is a pickle that would import and run code: {', '.join(needed[:5])}",
            hint=TRUST_HINT + ", or save the model with safetensors (save_pretrained's default)",
        )
    try:
        with quiet():
            obj = torch.load(io.BytesIO(data), weights_only=not needed, map_location="cpu")
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"cannot read {path} as PyTorch weights: {first_line(exc)}", hint="save it again") from exc
    if not isinstance(obj, dict):
        raise InputError(f"{path} holds a {type(obj).__name__}, not a state_dict", hint="save the model again")
    return obj


def pickle_globals_outside_torch(data: bytes, path: Path) -> list[str]:
    """Globals the pickle(s) in ``data`` name beyond what ``torch.load(weights_only=True)`` accepts."""
    from fwx.safety.pickles import PickleScanError, torch_safe_globals, unsafe_globals

    allowed = torch_safe_globals()
    try:
        if data[:4] == b"PK\x03\x04":
            from fwx.safety.zipbounds import held_members

            blobs = held_members(data, path, ".pkl")  # the inflate budget, as for every zip fwx reads
        else:
            blobs = [data]
        found: list[str] = []
        for blob in blobs:
            found += [g for g in unsafe_globals(blob, allowed) if g not in found]
    except (PickleScanError, zipfile.BadZipFile) as exc:
        raise InputError(
            f"cannot read {path} as PyTorch weights: {exc}", hint="the file is probably truncated"
        ) from exc
    return found
