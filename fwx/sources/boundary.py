"""The one way model bytes enter fwx: ``admit(path) -> Admitted``.

A model path the user names is copied once into a private snapshot
(descriptor-relative, ``fwx.safety.snapshot``; a Hugging Face folder only
its own file set, ``fwx.safety.hf_fileset``), its format is detected once, on
the copy, and the copy is hashed once. The loader admits every model its
command line names and hands the command the ``Admitted`` value itself
(``fwx.commands.sandboxing``); a library call admits its source the same
way (``loadable``), trusted or not. Everything after that (the loaders, the
planner, inspect, the validators) reads the copy and asks this module for the
model's format and hash: ``format_of`` and ``sha256_of`` answer from the
admitted value; only an artifact fwx wrote itself is read directly. Nothing
else calls the snapshot functions: a test walks the code and enforces it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from fwx.errors import InputError
from fwx.formats import Format, detect_format, is_hf_folder
from fwx.manifest import sha256_path
from fwx.safety import snapshot


@dataclass(frozen=True)
class Admitted:
    """One untrusted model as fwx holds it, after the boundary."""

    original: Path  # what the user named
    path: Path  # the private copy: the only bytes any framework reads
    format: Format | None  # detected once on the copy; None for a version folder (its fwx.json names formats)
    files: tuple[str, ...]  # every file copied, relative to the copy's folder (the format's own file set)
    companions: tuple[str, ...]  # a loose file's external data files, by the names it gives them
    sha256: str  # of ``path``, as fwx.json records the source
    root: Path  # the private folder holding the copy (what the loader's sandbox grants for reading)
    left_out: tuple[str, ...] = ()  # a Hugging Face folder's entries not in its own file set (folders as name/)

    def discard(self) -> None:
        """Remove the private copy (a server unloading a version); admitting the path again copies it anew."""
        _ADMITTED.pop(self.path, None)
        shutil.rmtree(self.root, ignore_errors=True)


#: Admitted models of this process, by the private copy's path.
_ADMITTED: dict[Path, Admitted] = {}


def admit(path: str | Path, *, external_data: Path | None = None, parent: Path | None = None) -> Admitted:
    """Snapshot ``path``, detect its format and hash it: the one typed value every command receives.

    A private copy handed on (the loader hands the command its copy) is admitted as it is, never copied again;
    a path the user named is copied afresh at each call (the model may have changed since an earlier one).
    """
    snap = snapshot.taken(path) or snapshot.register(path, parent, external_data=external_data, fresh=True)
    known = _ADMITTED.get(snap.path)
    if known is not None:
        return known
    top = snap.path if snap.path.is_dir() else snap.path.parent
    files = tuple(sorted(p.relative_to(top).as_posix() for p in top.rglob("*") if p.is_file()))
    value = Admitted(
        original=Path(path),
        path=snap.path,
        format=snap.format,
        files=files,
        companions=snap.companions,
        sha256=sha256_path(snap.path) if snap.format is not None else "",  # a version folder: its fwx.json has them
        root=snap.root,
        left_out=snap.left_out,
    )
    _ADMITTED[snap.path] = value
    return value


def loadable(path: str | Path) -> Path:
    """What a framework may read for ``path``: its admitted private copy (a path inside one is itself).

    Trusted or not, a model is read from one copy: the bytes hashed into fwx.json are the bytes loaded, and a
    Hugging Face folder brings the same file set either way (the cost is the copy the CLI takes anyway).
    """
    p = Path(path)
    if snapshot.is_snapshot(p):
        return p
    if not os.path.lexists(p):
        raise InputError(f"{p} does not exist", hint="check the path")
    if not names_a_model(p):
        return p  # a folder that is no model: refused by its names alone (detect_format), nothing copied
    return admit(p).path


def names_a_model(path: Path) -> bool:
    """A model file or folder, or a version folder (fwx.json): what a framework would load.

    Decided from names alone (the model is opened only on its copy): a file, a version folder, a SavedModel or
    a Hugging Face folder. A repository or model folder of versions is not one (it is listed, never loaded).
    """
    if (path / "fwx.json").is_file() or path.is_file():
        return True
    return (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file() or is_hf_folder(path)


def admitted(path: str | Path) -> Admitted | None:
    """The admitted value for a private copy's path (or for the path the user named), if any."""
    p = Path(path)
    found = _ADMITTED.get(p)
    if found is None and _ADMITTED:
        named = p.absolute()
        found = next((a for a in reversed(_ADMITTED.values()) if a.original.absolute() == named), None)  # newest
    if found is not None and not found.path.exists():  # its snapshot was discarded: admit it again
        _ADMITTED.pop(found.path, None)
        return None
    return found


def format_of(path: str | Path) -> Format:
    """The format of ``path``: the one detected at the boundary, else (a path nothing admitted) detected now."""
    found = admitted(path)
    if found is not None and found.format is not None:
        return found.format
    return detect_format(path)


def sha256_of(path: str | Path) -> str:
    """The sha256 of ``path``: the one taken at the boundary, else computed now."""
    found = admitted(path)
    return found.sha256 if found is not None else sha256_path(Path(path))
