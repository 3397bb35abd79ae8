"""``fwx export org/name``: a model id resolved in the local Hugging Face cache, offline, as transformers keeps it.

The cache is the one ``huggingface_hub`` writes: ``models--org--name/refs/main``
holds the commit the ``main`` branch pointed to when it was downloaded, and
``snapshots/<commit>/`` holds the model's files as links into ``../../blobs/``
(files named by their hash). Nothing is fetched: fwx reads the ref itself and
sets ``HF_HUB_OFFLINE`` so that no library it calls goes to the network; a model
that is not cached is one clear line. The snapshot folder is then an ordinary
source (read through the one loading boundary like any folder).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from fwx.errors import InputError, UnsafeModelError
from fwx.formats import is_hf_folder

#: ``org/name`` (an optional ``@revision``): the hub's spelling of a model id. A bare ``name`` is a local path.
_REPO_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96})(?:@(?P<rev>[\w./-]{1,128}))?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
#: A missing ``dir/model.onnx`` is a missing file, not a model id.
_FILE_SUFFIXES = (".pt", ".pth", ".pt2", ".onnx", ".tflite", ".keras", ".h5", ".safetensors", ".bin", ".zip")


def cache_dir() -> Path:
    """Where ``huggingface_hub`` keeps models: HF_HUB_CACHE, else HF_HOME/hub, else the XDG cache's."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "huggingface" / "hub"


def repo_id(source: str | Path) -> str | None:
    """``source`` as a model id when it is spelled like one and names no local path; else None."""
    text = str(source)
    if isinstance(source, Path) or Path(text).exists() or ":" in text or not _REPO_ID.match(text):
        return None
    return None if text.lower().endswith(_FILE_SUFFIXES) else text


def resolve(source: str) -> Path:
    """The cached snapshot folder of ``org/name[@revision]``; refuses, in one line, a model not cached."""
    match = _REPO_ID.match(source)
    if match is None:
        raise InputError(f"{source} is not a Hugging Face model id (org/name)", hint="pass a folder or org/name")
    os.environ["HF_HUB_OFFLINE"] = "1"  # whatever fwx calls from here on reads the cache only
    repo, rev = match["repo"], match["rev"] or "main"
    root = cache_dir()
    model = root / ("models--" + repo.replace("/", "--"))
    get = f"`hf download {repo}` (or huggingface-cli download)"
    if not model.is_dir():
        raise InputError(
            f"{repo} is not in the Hugging Face cache ({root}) and fwx never downloads",
            hint=f"fetch it first with {get}, set HF_HOME or HF_HUB_CACHE to the cache that has it, or pass its folder",
        )
    commit = rev if _COMMIT.match(rev) else _ref(model, rev)
    if commit is None or not (model / "snapshots" / commit).is_dir():
        raise InputError(
            f"{repo} is in the Hugging Face cache ({model}) but not at revision {rev}",
            hint=f"fetch that revision first with {get} --revision {rev}",
        )
    snapshot = model / "snapshots" / commit
    if snapshot.is_symlink():  # the hub links files into blobs/, never a revision folder elsewhere
        raise UnsafeModelError(
            f"{snapshot} is a link to {os.readlink(snapshot)}: a cached revision is a folder of the cache",
            hint=f"fetch the revision again with {get} --revision {rev}, or pass the folder itself",
        )
    if not is_hf_folder(snapshot):  # otherwise the loader finds a folder it may not read, and says only that
        raise InputError(
            f"{repo} at revision {rev} in the Hugging Face cache has no config.json and weights "
            "(model.safetensors or pytorch_model.bin, or an index and its shards) as plain files: "
            "an incomplete download",
            hint=f"fetch it again with {get} --revision {rev}",
        )
    return snapshot


def _ref(model: Path, rev: str) -> str | None:
    ref = model / "refs" / rev
    if ".." in Path(rev).parts or not ref.is_file() or ref.stat().st_size > 256:
        return None
    commit = ref.read_text(encoding="ascii", errors="replace").strip()
    return commit if _COMMIT.match(commit) else None


def name_of(source: str) -> str:
    """The model folder an export of ``org/name`` goes to without ``--name``: ``name``."""
    return source.split("@", 1)[0].rpartition("/")[2]


def blobs_of(folder: Path) -> Path | None:
    """The ``blobs/`` folder a cache snapshot's links may point into (None for any other folder)."""
    snapshots = folder.absolute().parent
    model = snapshots.parent
    if snapshots.name == "snapshots" and model.name.startswith("models--"):
        return model / "blobs"
    return None
