"""A private copy of a model: the bytes fwx checks are the bytes the framework loads.

Checking a path and then handing the same path to a framework is a race: the
file can change in between (``saved_model.pb`` swapped after the scan ran
``WriteFile``). So an untrusted model is copied once into a directory only this
user can enter (mode 0700), descriptor by descriptor (``fwx.safety.fdcopy``:
every component opened relative to its parent with ``O_NOFOLLOW``, never a path
looked up twice); a symlink out, a file with more than one hard link (it can be
any file on the same file system), a device, FIFO or socket is refused; the copy
is scanned, hashed and loaded, and the user's path is never read again.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fwx.errors import InputError
from fwx.formats import Format
from fwx.safety import fdcopy, hf_fileset
from fwx.safety.beneath import open_beneath

MAX_ENTRIES = fdcopy.MAX_ENTRIES


@dataclass(frozen=True)
class Snapshot:
    """``path`` is the private copy (same base name as the original), ``original`` what the user named."""

    path: Path
    original: Path
    root: Path  # the private folder holding it; remove it with ``discard``
    companions: tuple[str, ...] = ()  # a loose file's external data files, by the names it gives them
    format: Format | None = None  # detected once, on the copy; None when undetectable (the loader says why)
    left_out: tuple[str, ...] = ()  # a Hugging Face folder's entries not in its own file set (folders as name/)

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def display(self, text: str) -> str:
        """``text`` with the private path spelled as the user's, for messages."""
        return text.replace(str(self.path), str(self.original))


def private_dir(parent: Path | None = None, prefix: str = "fwx-snapshot-") -> Path:
    """A fresh directory only this user can enter (``mkdtemp`` creates it 0700)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def take(path: str | Path, parent: Path | None = None, *, external_data: Path | None = None) -> Snapshot:
    """Copy the file or folder ``path`` into a fresh private directory, refusing links out.

    A loose ``.onnx`` file brings only the external data files its author evidently shipped
    (``fwx.safety.onnx_locations.shipped``); ``external_data`` names a folder to read them from instead.
    """
    original = Path(path)
    try:
        st = os.lstat(original)
    except OSError as exc:
        raise InputError(f"cannot read {original}: {exc.strerror}", hint="check the path") from exc
    if stat.S_ISLNK(st.st_mode) and fdcopy.hub_parts(original.parent) is None:
        # the path the user typed may be a link; its target is what they mean, checked like any file
        original = original.resolve()
    root = private_dir(parent)
    dest = root / (original.name or "model")
    companions: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    try:
        if original.is_dir():
            folder = fdcopy.Folder.open(original)
            try:
                left_out = _copy_folder(folder, dest)
            finally:
                folder.close()
            fmt = _detect(dest)
        else:
            fmt, companions = _copy_loose(original, dest, external_data)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return Snapshot(dest, Path(path), root, companions, fmt, left_out)


def _copy_folder(folder: fdcopy.Folder, dest: Path) -> tuple[str, ...]:
    """A Hugging Face folder: its own file set (``hf_fileset``), the rest left out; any other folder: whole."""
    names = hf_fileset.entries(folder.fd)
    if hf_fileset.is_hf(names):
        return hf_fileset.copy(folder, names, dest)
    folder.copy_tree(dest)
    return ()


def _detect(copy: Path) -> Format | None:
    """The copy's format, detected this once for every later reader (fwx.sources.boundary.format_of)."""
    from fwx.formats import detect_format

    try:
        return detect_format(copy)
    except (InputError, OSError):
        return None


def _copy_loose(named: Path, dest: Path, external_data: Path | None) -> tuple[Format | None, tuple[str, ...]]:
    """Copy one model file, then the external data files it names; returns its format and their names."""
    from fwx.safety import onnx_locations

    folder = fdcopy.Folder.open(named.parent)
    try:
        folder.copy(folder.open_file(folder.fd, (), named.name), dest, named, alone=True)
        fmt = _detect(dest)
        spans = _external_data(dest) if fmt is Format.ONNX else {}
        if not spans:
            return fmt, ()
        if external_data is not None:
            return fmt, _copy_from(Path(external_data), dest, spans)
        for location in spans:
            onnx_locations.plain(named, location)
            if folder.hub_fd is None:  # the clear message; the copy below is fd-relative either way
                onnx_locations.check_location(named, location)
            if (dest.parent / location).exists():
                continue  # the model names itself: the coverage rule judges it
            folder.copy(folder.open_file(folder.fd, (), location), dest.parent / location, named, alone=True)
        onnx_locations.covered(named, dest.parent, spans)
    finally:
        folder.close()
    return fmt, tuple(sorted(spans))


def _copy_from(where: Path, dest: Path, spans: dict[str, list[tuple[int, int | None, int | None]]]) -> tuple[str, ...]:
    """External data read from a folder the user named for it: any relative path beneath it, no links."""
    folder = fdcopy.Folder.open(where)
    try:
        for location in spans:
            target = dest.parent / PurePosixPath(location.replace("\\", "/"))
            try:
                fd = open_beneath(folder.fd, location)
            except OSError as exc:
                raise InputError(
                    f"{dest.name}: external data file {location!r} cannot be read beneath {where}: {exc.strerror}",
                    hint="check --external-data-dir",
                ) from exc
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            folder.copy(fd, target, where / location, alone=True)
    finally:
        folder.close()
    return tuple(sorted(spans))


#: Lists the external data an ONNX model names (location, offset, length per tensor), read from the
#: private copy in a child process: the onnx package imports numpy, whose thread pool must not start
#: before the sandbox (fwx.safety.landlock).
_LOCATIONS = """
import json, math, sys
import onnx
from onnx.external_data_helper import _get_all_tensors
T = onnx.TensorProto
HALF = {getattr(T, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(T, n)}
def held(t):
    n = math.prod(t.dims)
    if t.data_type in HALF:
        return (n + 1) // 2
    try:
        return None if t.data_type == T.STRING else n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except Exception:
        return None
def sparse(g):
    # onnx's helper skips sparse tensors; onnxruntime reads their external data all the same
    for st in g.sparse_initializer:
        yield from (st.values, st.indices)
    yield from nodes(g.node)
def nodes(ns):
    for n in ns:
        for a in n.attribute:
            for st in (a.sparse_tensor, *a.sparse_tensors):
                yield from (st.values, st.indices)
            for sub in (a.g, *a.graphs):
                yield from sparse(sub)
m = onnx.load(sys.argv[1], load_external_data=False)
out = []
tensors = [*_get_all_tensors(m), *sparse(m.graph)]
for f in m.functions:
    tensors.extend(nodes(f.node))
for t in tensors:
    if t.data_location == T.EXTERNAL:
        kv = {e.key: e.value for e in t.external_data}
        out.append([kv.get("location", ""), kv.get("offset"), kv.get("length"), held(t)])
print(json.dumps(out))
"""


def _external_data(copy: Path) -> dict[str, list[tuple[int, int | None, int | None]]]:
    """The files an ONNX model keeps its weights in, each with its tensors' (offset, length, bytes the shape
    holds) spans."""
    import json
    import mmap
    import subprocess
    import sys

    try:
        if copy.stat().st_size == 0:
            return {}
        with open(copy, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if mm.find(b"location") < 0:
                return {}  # weights inline: nothing else to copy
    except (OSError, ValueError, InputError):
        return {}
    proc = subprocess.run(  # noqa: S603 - our own interpreter reading our own private copy
        [sys.executable, "-c", _LOCATIONS, str(copy)], capture_output=True, text=True, check=False
    )
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else []
        spans: dict[str, list[tuple[int, int | None, int | None]]] = {}
        for loc, offset, length, held in found:
            span = (int(offset or 0), None if length is None else int(length), None if held is None else int(held))
            spans.setdefault(str(loc), []).append(span)
    except (ValueError, IndexError, TypeError):
        return {}  # the loader reads the file and says what is wrong with it
    return spans


#: Snapshots this process took, by the resolved path the user named: one copy per model per process.
_TAKEN: dict[Path, Snapshot] = {}


def register(
    path: str | Path, parent: Path | None = None, *, external_data: Path | None = None, fresh: bool = False
) -> Snapshot:
    """The snapshot of ``path`` (taken now, or the one taken earlier in this process unless ``fresh``)."""
    key = Path(path).resolve()
    snap = _TAKEN.get(key)
    if snap is not None and fresh:  # the model may have changed since: a new copy; the old one stays tracked
        _TAKEN[snap.path] = _TAKEN.pop(key)
        snap = None
    if snap is None or not snap.path.exists():
        snap = _TAKEN[key] = take(path, parent, external_data=external_data)
        if len(_TAKEN) == 1:
            import atexit

            atexit.register(discard_all)
    return snap


def taken(path: str | Path) -> Snapshot | None:
    """The snapshot whose private copy is ``path`` (None for any other path)."""
    p = Path(path)
    return next((s for s in _TAKEN.values() if s.path == p), None)


def companions(path: str | Path) -> dict[str, Path]:
    """The external data files taken with the loose file whose snapshot is ``path``, by name (their copies)."""
    p = Path(path)
    for snap in _TAKEN.values():
        if snap.path == p:
            return {name: snap.path.parent / name for name in snap.companions}
    return {}


def is_snapshot(path: Path) -> bool:
    p = Path(path).resolve()
    return any(p == s.path.resolve() or p.is_relative_to(s.path.resolve()) for s in _TAKEN.values())


def original(path: Path) -> Path:
    """The path the user named for a snapshot path (itself for any other path)."""
    p = Path(path).resolve()
    for snap in _TAKEN.values():
        top = snap.path.resolve()
        if p == top or p.is_relative_to(top):
            return Path(snap.original).resolve() / p.relative_to(top)
    return Path(path)


def display(text: str) -> str:
    """``text`` with every snapshot path spelled as the user's path (messages, tables)."""
    for snap in _TAKEN.values():
        text = snap.display(text)
    return text


def discard_all() -> None:
    for snap in list(_TAKEN.values()):
        snap.discard()
    _TAKEN.clear()
