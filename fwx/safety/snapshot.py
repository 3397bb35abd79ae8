"""A private copy of a model: the bytes fwx checks are the bytes the framework loads.

Checking a path and then handing the same path to a framework is a race: the
file can change in between (``saved_model.pb`` swapped after the scan ran
``WriteFile``). So an untrusted model is copied once into a directory only this
user can enter (mode 0700), every file opened with ``O_NOFOLLOW``; a symlink, a
file with more than one hard link (it can be any file on the same file system),
a device, FIFO or socket is refused; the copy is scanned, hashed and loaded, and
the user's path is never read again.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fwx.errors import InputError, UnsafeModelError

_CHUNK = 1 << 20
#: A model folder with more entries than this is not a model (a home directory passed by mistake).
MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class Snapshot:
    """``path`` is the private copy (same base name as the original), ``original`` what the user named."""

    path: Path
    original: Path
    root: Path  # the private folder holding it; remove it with ``discard``

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def display(self, text: str) -> str:
        """``text`` with the private path spelled as the user's, for messages."""
        return text.replace(str(self.path), str(self.original))


def private_dir(parent: Path | None = None, prefix: str = "fwx-snapshot-") -> Path:
    """A fresh directory only this user can enter (``mkdtemp`` creates it 0700)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def take(path: str | Path, parent: Path | None = None) -> Snapshot:
    """Copy the file or folder ``path`` into a fresh private directory, refusing links out."""
    original = Path(path)
    try:
        st = os.lstat(original)
    except OSError as exc:
        raise InputError(f"cannot read {original}: {exc.strerror}", hint="check the path") from exc
    if stat.S_ISLNK(st.st_mode):
        # the path the user typed may be a link; its target is what they mean, checked like any file
        original = original.resolve()
    root = private_dir(parent)
    dest = root / (original.name or "model")
    try:
        if original.is_dir():
            _copy_tree(original, dest)
        else:
            _copy_file(original, dest, original.parent)
            for location in _external_data(dest):
                _copy_companion(original, dest, location)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return Snapshot(dest, Path(path), root)


#: Lists the external data files an ONNX model names, read from the private copy in a child process: the
#: onnx package imports numpy, whose thread pool must not start before the sandbox (fwx.safety.landlock).
_LOCATIONS = """
import json, sys
import onnx
from onnx.external_data_helper import _get_all_tensors
m = onnx.load(sys.argv[1], load_external_data=False)
locs = {e.value for t in _get_all_tensors(m) if t.data_location == onnx.TensorProto.EXTERNAL
        for e in t.external_data if e.key == "location"}
print(json.dumps(sorted(locs)))
"""


def _external_data(copy: Path) -> list[str]:
    """The files an ONNX model keeps its weights in (``location`` entries), relative to its folder."""
    import mmap
    import subprocess
    import sys

    from fwx.formats import Format, detect_format

    try:
        if detect_format(copy) is not Format.ONNX or copy.stat().st_size == 0:
            return []
        with open(copy, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if mm.find(b"location") < 0:
                return []  # weights inline: nothing else to copy
    except (OSError, ValueError, InputError):
        return []
    proc = subprocess.run(  # noqa: S603 - our own interpreter reading our own private copy
        [sys.executable, "-c", _LOCATIONS, str(copy)], capture_output=True, text=True, check=False
    )
    import json

    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else []
    except (ValueError, IndexError):
        return []  # the loader reads the file and says what is wrong with it
    return [str(loc) for loc in found if isinstance(loc, str)]


def _copy_companion(model: Path, copy: Path, location: str) -> None:
    """Copy one external data file beside the model's private copy; one that leaves the folder is refused."""
    from fwx.safety.onnx_locations import check_location

    src = check_location(model, location)
    dest = copy.parent / PurePosixPath(location.replace("\\", "/"))
    if dest.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _copy_file(src, dest)


def _copy_tree(src: Path, dest: Path) -> None:
    dest.mkdir(mode=0o700)
    top = src.resolve()
    links: dict[tuple[int, int], list[int]] = {}  # inode -> [links seen inside, st_nlink]
    count = 0
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel = Path(dirpath).relative_to(src)
        for name in dirnames:
            here = Path(dirpath) / name
            if os.path.islink(here):
                raise _link(here, src)
            (dest / rel / name).mkdir(mode=0o700)
        for name in filenames:
            count += 1
            if count > MAX_ENTRIES:
                raise InputError(f"{src} holds more than {MAX_ENTRIES} files", hint="pass the model's own folder")
            here = Path(dirpath) / name
            if os.path.islink(here):
                # a link between the model's own files is fine; one that leaves the folder is not
                target = here.resolve()
                if not target.is_relative_to(top) or os.path.islink(target):
                    raise _link(here, src)
                here = target
            key, nlink = _copy_file(here, dest / rel / name)
            seen = links.setdefault(key, [0, nlink])
            seen[0] += 1
    for (_, ino), (inside, nlink) in links.items():
        if nlink > inside:
            raise _hard_link(src, ino, nlink)


def _copy_file(src: Path, dest: Path, top: Path | None = None) -> tuple[tuple[int, int], int]:
    """Copy one regular file without following links; returns its (device, inode) and link count."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if os.path.islink(src):
            raise _link(src, top or src.parent) from exc
        raise InputError(f"cannot read {src}: {exc.strerror}", hint="check the file's permissions") from exc
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeModelError(f"{src} is not a regular file", hint="a model folder holds plain files only")
        if top is not None and st.st_nlink > 1:
            raise _hard_link(src, st.st_ino, st.st_nlink)
        with open(dest, "xb") as out:
            os.fchmod(out.fileno(), 0o600)
            while block := fh.read(_CHUNK):
                out.write(block)
    return (st.st_dev, st.st_ino), st.st_nlink


def _hard_link(path: Path, inode: int, nlink: int) -> UnsafeModelError:
    return UnsafeModelError(
        f"{path} holds a file with {nlink} hard links (inode {inode}), not all inside it: "
        "a hard link can name any file on the same file system",
        hint="copy the file (cp, not ln) into the model folder",
    )


def _link(path: Path, top: Path) -> UnsafeModelError:
    return UnsafeModelError(
        f"{path} is a symbolic link inside {top}: a model is loaded only from its own files",
        hint="replace the link by a copy of the file it points to",
    )


#: Snapshots this process took, by the resolved path the user named: one copy per model per process.
_TAKEN: dict[Path, Snapshot] = {}


def register(path: str | Path, parent: Path | None = None) -> Snapshot:
    """The snapshot of ``path`` (taken now, or the one taken earlier in this process)."""
    key = Path(path).resolve()
    snap = _TAKEN.get(key)
    if snap is None or not snap.path.exists():
        snap = _TAKEN[key] = take(path, parent)
        if len(_TAKEN) == 1:
            import atexit

            atexit.register(discard_all)
    return snap


def loadable(path: str | Path, *, trust: bool) -> Path:
    """What to hand the framework for ``path``: its private snapshot, or the path itself when trusted."""
    path = Path(path)
    if trust or is_snapshot(path):
        return path
    return register(path).path


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
