"""A Hugging Face folder's own file set: the files its structure names, and nothing else.

A ``save_pretrained`` folder (or a hub cache revision) is often a working
folder too: a ``.git/``, a ``.env``, notes, checkpoints of other runs. Copying
it whole would carry them into the private snapshot, where the loader (and any
model code trusted to run) could read them. So only what transformers reads is
copied: ``config.json``; the weights (one file, or the index and exactly the
shards its ``weight_map`` names: safetensors first, as ``hf_files.weight_files``
chooses); the tokenizer, preprocessor, generation and chat-template files by
their known names; and, when a config's ``auto_map`` names code modules, those
top-level ``.py`` files (they import each other; imported only under ``--trust-model-code``). Everything
else at the top is listed as left out, a folder as ``name/``.

The index is parsed from the private copy, never from the user's folder, so
the shards copied are the ones the copied index names.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from fwx.errors import InputError
from fwx.safety import fdcopy
from fwx.safety.beneath import DIR_FLAGS
from fwx.safety.hf_names import CODE_MAPS, CONFIG, KNOWN, plain_name, shard_names

#: (single file, its sharded index), in the order ``fwx.sources.hf_files.weight_files`` prefers them.
WEIGHTS = (
    ("model.safetensors", "model.safetensors.index.json"),
    ("pytorch_model.bin", "pytorch_model.bin.index.json"),
)
#: A folder of extra chat templates (``additional_chat_templates/<name>.jinja``) transformers reads.
TEMPLATES = "additional_chat_templates"
_MAX_JSON = 64 * 2**20


def is_hf(names: dict[str, bool]) -> bool:
    """A Hugging Face folder: a ``config.json`` and no SavedModel or fwx version (those are copied whole)."""
    return (
        CONFIG in names
        and not names[CONFIG]
        and not {"saved_model.pb", "saved_model.pbtxt", "fwx.json"} & set(names)
        and any(w in names for pair in WEIGHTS for w in pair)
    )


def entries(fd: int) -> dict[str, bool]:
    """The entries of the folder ``fd``, by name: True for a folder (a link counts as a file)."""
    with os.scandir(fd) as found:
        names = [e.name for e in found]
    if len(names) > fdcopy.MAX_ENTRIES:
        raise InputError(
            f"a model folder holds more than {fdcopy.MAX_ENTRIES} files", hint="pass the model's own folder"
        )
    return {n: stat.S_ISDIR(os.stat(n, dir_fd=fd, follow_symlinks=False).st_mode) for n in names}


def copy(folder: fdcopy.Folder, names: dict[str, bool], dest: Path) -> tuple[str, ...]:
    """Copy the folder's own file set into ``dest``; returns what was left out, sorted (folders as ``name/``)."""
    dest.mkdir(mode=0o700)
    taken: set[str] = set()

    def take(name: str) -> None:
        if name in names and not names[name] and name not in taken:
            folder.copy(folder.open_file(folder.fd, (), name), dest / name, folder.label / name)
            taken.add(name)

    for name in sorted(KNOWN & set(names)):
        take(name)
    for single, index in WEIGHTS:
        if single in names:
            take(single)
            break
        if index in names:
            take(index)
            for shard in _shards(dest / index):
                take(shard)
            break
    for module in _code_modules(dest, names):
        take(module)
    if names.get(TEMPLATES):
        taken.add(_templates(folder, dest) + "/")
    folder.check_links()
    return tuple(sorted({(n + "/" if d else n) for n, d in names.items()} - taken))


def _shards(index: Path) -> list[str]:
    """The plain file names an index's ``weight_map`` names (a path with a folder or a dot file is not one)."""
    return [s for s in shard_names(_json(index)) if plain_name(s)]


def _code_modules(dest: Path, names: dict[str, bool]) -> list[str]:
    """The top-level ``.py`` files when an ``auto_map`` names modules of the folder (they import each other)."""
    for name in CODE_MAPS:
        data = _json(dest / name) if (dest / name).is_file() else None
        refs = _strings(data.get("auto_map")) if isinstance(data, dict) else []
        if any("--" not in ref for ref in refs):  # ``org/repo--mod.Class`` is another repository's code
            return sorted(n for n, d in names.items() if not d and n.endswith(".py") and not n.startswith("."))
    return []


def _templates(folder: fdcopy.Folder, dest: Path) -> str:
    """The ``.jinja`` files of ``additional_chat_templates/`` (nothing deeper)."""
    sub = os.open(TEMPLATES, DIR_FLAGS, dir_fd=folder.fd)
    try:
        (dest / TEMPLATES).mkdir(mode=0o700)
        for name, is_dir in sorted(entries(sub).items()):
            if not is_dir and name.endswith(".jinja") and not name.startswith("."):
                fd = folder.open_file(sub, (TEMPLATES,), name)
                folder.copy(fd, dest / TEMPLATES / name, folder.label / TEMPLATES / name)
    finally:
        os.close(sub)
    return TEMPLATES


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list | tuple):
        return [s for v in obj for s in _strings(v)]
    return [obj] if isinstance(obj, str) else []


def _json(path: Path) -> Any:
    if path.stat().st_size > _MAX_JSON:
        return None  # the loader says what is wrong with it
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
