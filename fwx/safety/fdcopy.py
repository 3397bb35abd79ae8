"""Copy a model's files descriptor by descriptor: no path is looked up twice, no symlink is followed by name.

A folder is walked from the descriptor of the folder the user named: each entry
is listed from its parent's descriptor and opened relative to it with
``O_NOFOLLOW`` (``O_DIRECTORY`` for folders), so a folder swapped for a symlink
mid-walk makes the open fail instead of leading it outside. A symlink between a
model's own files is resolved by its text, lexically, and the target opened
beneath the top descriptor with every symlink refused (``fwx.safety.beneath``).

The Hugging Face hub cache keeps a revision as ``models--org--name/snapshots/<rev>/``
whose files are relative links into ``../../blobs/``: such a link is followed
only when its text lands on a plain file of that same ``models--*`` folder's
``blobs/``, opened beneath the ``models--*`` descriptor.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from fwx.errors import InputError, UnsafeModelError
from fwx.safety.beneath import DIR_FLAGS, FILE_FLAGS, is_link_refusal, open_beneath

_CHUNK = 1 << 20
_KERNEL_CHUNK = 1 << 30
#: A model folder with more entries than this is not a model (a home directory passed by mistake).
MAX_ENTRIES = 100_000


@dataclass
class Folder:
    """An open folder the user named: its descriptor, and the hub ``models--*`` descriptor above it if any."""

    label: Path  # the user's spelling, for messages
    fd: int
    hub_fd: int | None = None
    hub_rel: tuple[str, ...] = ()  # the folder's components beneath the models--* folder
    seen: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # inode -> [copies, st_nlink]
    count: int = 0

    @classmethod
    def open(cls, folder: Path) -> Folder:
        """Open ``folder`` (its own spelling is the user's choice: a link there is followed once, here)."""
        hub = hub_parts(folder)
        try:
            if hub is None:
                return cls(folder, os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            hub_fd = os.open(hub[0], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise InputError(f"cannot read {folder}: {exc.strerror}", hint="check the path") from exc
        try:
            return cls(folder, open_beneath(hub_fd, "/".join(hub[1]), DIR_FLAGS), hub_fd, hub[1])
        except OSError as exc:
            os.close(hub_fd)
            raise _link(folder, folder) if is_link_refusal(exc) else _unreadable(folder, exc) from exc

    def close(self) -> None:
        os.close(self.fd)
        if self.hub_fd is not None:
            os.close(self.hub_fd)

    def open_file(self, dirfd: int, rel: tuple[str, ...], name: str) -> int:
        """A descriptor for the regular-file entry ``name`` of folder ``dirfd`` (at ``rel``), links resolved safely."""
        label = self.label.joinpath(*rel, name)
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                return self._follow(dirfd, rel, name, label)
            return os.open(name, FILE_FLAGS, dir_fd=dirfd)
        except OSError as exc:
            raise _link(label, self.label) if is_link_refusal(exc) else _unreadable(label, exc) from exc

    def _follow(self, dirfd: int, rel: tuple[str, ...], name: str, label: Path) -> int:
        text = os.readlink(name, dir_fd=dirfd)
        if text.startswith("/"):  # an absolute link: read against where the top (or models--*) folder is
            hub = hub_parts(self.label)
            anchor = os.path.realpath(self.label if hub is None else hub[0])
            target = _normalise((), os.path.relpath(os.path.normpath(text), anchor))
        else:
            target = _normalise((*self.hub_rel, *rel), text)
        if target is not None and self.hub_fd is not None:
            if len(target) == 2 and target[0] == "blobs":
                return open_beneath(self.hub_fd, "/".join(target), FILE_FLAGS)
            inside = target[: len(self.hub_rel)] == self.hub_rel and len(target) > len(self.hub_rel)
            target = target[len(self.hub_rel) :] if inside else None
        if not target:
            raise _link(label, self.label)
        return open_beneath(self.fd, "/".join(target), FILE_FLAGS)

    def copy(self, fd: int, dest: Path, label: Path, *, alone: bool = False) -> os.stat_result:
        """Copy the open file ``fd`` to ``dest`` (mode 0600); ``alone``: refuse it if it has other hard links."""
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # checked before fdopen, which refuses a folder with an OSError
            os.close(fd)
            raise UnsafeModelError(f"{label} is not a regular file", hint="a model folder holds plain files only")
        with os.fdopen(fd, "rb") as fh:
            if alone and st.st_nlink > 1:
                raise _hard_link(label, st.st_ino, st.st_nlink)
            _room_for(label, st.st_size, dest.parent)
            with open(dest, "xb") as out:
                os.fchmod(out.fileno(), 0o600)
                try:
                    _copy_bytes(fh, out)
                except OSError as exc:
                    if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                        raise
                    raise _no_room(label, st.st_size, exc.strerror) from exc
        self.seen.setdefault((st.st_dev, st.st_ino), [0, st.st_nlink])[0] += 1
        return st

    def copy_tree(self, dest: Path) -> None:
        """Copy every entry beneath this folder into ``dest``; a hard link to a file outside is refused."""
        self._copy_dir(self.fd, (), dest)
        self.check_links()

    def check_links(self) -> None:
        """Refuse a copied file with a hard link this copy did not take (it can be any file on the file system)."""
        for (_, ino), (inside, nlink) in self.seen.items():
            if nlink > inside:
                raise _hard_link(self.label, ino, nlink)

    def _copy_dir(self, dirfd: int, rel: tuple[str, ...], dest: Path) -> None:
        dest.mkdir(mode=0o700)
        with os.scandir(dirfd) as entries:
            names = sorted(e.name for e in entries)
        for name in names:
            self.count += 1
            if self.count > MAX_ENTRIES:
                raise InputError(
                    f"{self.label} holds more than {MAX_ENTRIES} files", hint="pass the model's own folder"
                )
            try:
                is_dir = stat.S_ISDIR(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
                sub = os.open(name, DIR_FLAGS, dir_fd=dirfd) if is_dir else -1
            except OSError as exc:
                label = self.label.joinpath(*rel, name)
                raise _link(label, self.label) if is_link_refusal(exc) else _unreadable(label, exc) from exc
            if sub < 0:
                self.copy(self.open_file(dirfd, rel, name), dest / name, self.label.joinpath(*rel, name))
                continue
            try:
                self._copy_dir(sub, (*rel, name), dest / name)
            finally:
                os.close(sub)


def _room_for(label: Path, size: int, where: Path) -> None:
    """Refuse a file bigger than the space left where its copy goes, before a byte is written: a sparse
    file's apparent size costs its author nothing on disk, and would fill the temp folder's file system."""
    try:
        vfs = os.statvfs(where)
    except OSError:
        return
    free = vfs.f_bavail * vfs.f_frsize
    if size > free:
        raise _no_room(label, size, f"only {free / 2**30:.1f} GiB are free there")


def _no_room(label: Path, size: int, why: str | None) -> InputError:
    return InputError(
        f"cannot copy {label} ({size / 2**30:.1f} GiB) into fwx's private temp folder: {why}",
        hint="free space there or point TMPDIR at a larger file system; a model file that large is "
        "likely sparse (a file that claims more bytes than it holds)",
    )


def _copy_bytes(src: BinaryIO, dst: BinaryIO) -> None:
    """Every byte of ``src`` into ``dst``: in the kernel (``copy_file_range``, a reflink where the file system
    shares extents) where it can, else through this process, 1 MiB at a time."""
    try:
        while os.copy_file_range(src.fileno(), dst.fileno(), _KERNEL_CHUNK):
            pass
        return
    except OSError as exc:  # another file system, an old kernel, a seccomp profile: copy it here
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM):
            raise
    # both descriptors' offsets stand after what the kernel copied (nothing is buffered yet): go on from there
    while block := src.read(_CHUNK):
        dst.write(block)


def hub_parts(folder: Path) -> tuple[Path, tuple[str, ...]] | None:
    """``(models--org--name folder, ("snapshots", rev, ...))`` when ``folder`` is in a hub cache revision."""
    parts = Path(os.path.abspath(folder)).parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots" and parts[i - 1].startswith("models--"):
            return Path(*parts[:i]), parts[i:]
    return None


def _normalise(base: tuple[str, ...], text: str) -> tuple[str, ...] | None:
    """``text`` (a link's target) read from folder ``base``, lexically; None if absolute or climbing above."""
    if not text or text.startswith("/"):
        return None
    out = list(base)
    for part in text.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(part)
    return tuple(out)


def _unreadable(path: Path, exc: OSError) -> InputError:
    return InputError(f"cannot read {path}: {exc.strerror}", hint="check the file's permissions")


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
