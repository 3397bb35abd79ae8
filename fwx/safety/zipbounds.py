"""Zip archives read within bounds: what each member declares is what it may inflate to, and no more.

A zip says twice how big each member is (central directory and local header)
and the reader trusts whichever it reads first: miniz (torch's reader)
allocates the central directory's size up front, Python's ``zipfile`` stops at
it. So before a byte is inflated: the entry count is read from the end record
(a million-entry directory is refused before it is parsed), both records of
every member must agree, members may not share bytes (the overlapping-entry
bomb), names are unique even ignoring case (miniz looks names up without case,
so two spellings would let the scan read one member and torch the other),
only stored and deflated members pass, and the declared sizes of everything
that will be inflated, nested archives included, must fit one budget
(``FWX_MAX_INFLATE_MB``, else four times the file or 256 MiB, whichever is
larger). Reading a member then inflates at most its declared size plus one
byte and checks its CRC. A JSON config member (``config.json`` of a ``.keras``)
has its own, smaller cap (``FWX_MAX_CONFIG_MB``, else 16 MiB): parsing JSON
costs tens of times its size. Every zip fwx reads goes through here: ``.pt2``
(``fwx.safety.pt2``), ``.keras`` (``fwx.sources.readers``), torch.save zips
(``hold_zip_file`` before torch opens them) and the pickles of Hugging Face
weight archives (``held``).
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass

MAX_MEMBERS = 100_000
MAX_DEPTH = 2  # a .pt2 (or .keras) holding torch.save zips; nothing torch reads nests deeper
_MIB = 1 << 20
_FLOOR = 256 * _MIB
_EOCD = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_LOCAL = b"PK\x03\x04"
_CHUNK = 1 << 20


class ZipBoundsError(ValueError):
    """The archive breaks a bound; the message names the member and the bound."""


class ZipCorruptError(ZipBoundsError):
    """Not a zip at all, or truncated: a broken file rather than a hostile one."""


def inflate_budget(file_size: int) -> int:
    """Bytes all members together may inflate to: ``FWX_MAX_INFLATE_MB`` if set, else max(4x file, 256 MiB)."""
    env = os.environ.get("FWX_MAX_INFLATE_MB", "").strip()
    if env:
        try:
            return max(0, int(float(env) * _MIB))
        except ValueError as exc:
            raise ZipBoundsError(f"FWX_MAX_INFLATE_MB={env!r} is not a number of MiB") from exc
    return max(4 * file_size, _FLOOR)


def config_limit() -> int:
    """Bytes one JSON config member may inflate to: ``FWX_MAX_CONFIG_MB`` if set, else 16 MiB.

    A model's config is kilobytes to a few MiB; parsing JSON takes tens of times its size in memory, so a
    64 MiB config.json that deflates to 65 KB fits the archive's inflate budget yet costs gigabytes.
    """
    env = os.environ.get("FWX_MAX_CONFIG_MB", "").strip()
    if env:
        try:
            return max(0, int(float(env) * _MIB))
        except ValueError as exc:
            raise ZipBoundsError(f"FWX_MAX_CONFIG_MB={env!r} is not a number of MiB") from exc
    return 16 * _MIB


class Budget:
    """Bytes left to inflate, shared by an archive and the archives nested in it."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.left = total

    def take(self, n: int, what: str) -> None:
        if n > self.left:
            raise ZipBoundsError(
                f"{what} declare {n / _MIB:.1f} MiB inflated, past the {self.total / _MIB:.0f} MiB inflate budget "
                "(raise FWX_MAX_INFLATE_MB if the model is really that large)"
            )
        self.left -= n


@dataclass(frozen=True)
class Member:
    name: str
    start: int  # first byte of the member's data
    compress_size: int
    file_size: int
    method: int
    crc: int


def declared_count(data: bytes) -> int:
    """Entries the end-of-central-directory record declares (zip64 aware), read before anything is parsed."""
    at = data.rfind(_EOCD, max(0, len(data) - 65_557))
    if at < 0 or len(data) < at + 22:
        raise ZipCorruptError("no end-of-central-directory record (not a zip archive, or truncated)")
    count = struct.unpack_from("<H", data, at + 10)[0]
    if count == 0xFFFF and at >= 20 and data[at - 20 : at - 16] == _ZIP64_LOCATOR:
        rec = struct.unpack_from("<Q", data, at - 12)[0]
        if rec + 40 <= len(data):
            count = struct.unpack_from("<Q", data, rec + 32)[0]
    return int(count)


class BoundedZip:
    """A zip archive in memory whose structure was checked; ``read`` inflates one member within bounds."""

    def __init__(self, data: bytes, budget: Budget, where: str = "") -> None:
        self.data = data
        self.where = where
        self.budget = budget
        count = declared_count(data)
        if count > MAX_MEMBERS:
            raise ZipBoundsError(f"{where or 'archive'}: {count} members (limit {MAX_MEMBERS})")
        try:
            infos = zipfile.ZipFile(_Reader(data)).infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise ZipCorruptError(f"{where or 'archive'}: not a readable zip archive ({exc})") from exc
        self.members = self._check(infos)
        self.names = list(self.members)
        # charged before anything is inflated: a reader may inflate every member (zipfile-based loaders do)
        budget.take(sum(m.file_size for m in self.members.values()), f"{where or 'archive'}: all members together")
        self._by_folded = {n.casefold(): n for n in self.names}

    def _check(self, infos: list[zipfile.ZipInfo]) -> dict[str, Member]:
        members: dict[str, Member] = {}
        folded: set[str] = set()
        spans: list[tuple[int, int, str]] = []
        for info in infos:
            name = self.where + info.filename
            if info.filename.casefold() in folded:
                raise ZipBoundsError(f"{name}: a second member of that name (names must be unique, ignoring case)")
            folded.add(info.filename.casefold())
            member = self._member(info, name)
            spans.append((info.header_offset, member.start + member.compress_size, name))
            members[info.filename] = member
        spans.sort()
        for (_, end, first), (start, _, second) in zip(spans, spans[1:], strict=False):
            if start < end:
                raise ZipBoundsError(f"{second}: its bytes overlap {first} (an overlapping-member zip bomb)")
        return members

    def _member(self, info: zipfile.ZipInfo, name: str) -> Member:
        if info.flag_bits & 0x1:
            raise ZipBoundsError(f"{name}: encrypted member")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ZipBoundsError(f"{name}: compression method {info.compress_type} (only stored and deflate)")
        off = info.header_offset
        head = self.data[off : off + 30]
        if len(head) < 30 or head[:4] != _LOCAL:
            raise ZipCorruptError(f"{name}: no local header where the central directory points")
        _, _, flags, method, _, _, crc, csize, usize, nlen, xlen = struct.unpack("<4sHHHHHIIIHH", head)
        local_name = self.data[off + 30 : off + 30 + nlen]
        if local_name.decode("utf-8" if flags & 0x800 else "cp437", "replace") != info.filename:
            raise ZipBoundsError(f"{name}: local header names {local_name[:60]!r}")
        if method != info.compress_type:
            raise ZipBoundsError(f"{name}: local and central compression methods differ")
        declared_here = not flags & 0x8 and 0xFFFFFFFF not in (csize, usize)  # else a data descriptor follows
        if declared_here and (csize, usize, crc) != (info.compress_size, info.file_size, info.CRC):
            raise ZipBoundsError(f"{name}: local header sizes differ from the central directory's")
        start = off + 30 + nlen + xlen
        if start + info.compress_size > len(self.data):
            raise ZipCorruptError(f"{name}: data runs past the end of the archive")
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise ZipBoundsError(f"{name}: stored member whose sizes differ")
        return Member(name, start, info.compress_size, info.file_size, info.compress_type, info.CRC)

    def find(self, name: str) -> str | None:
        """The member ``name`` resolves to as miniz looks names up (ignoring case), or None."""
        return self._by_folded.get(name.casefold())

    def read(self, name: str) -> bytes:
        """Inflate one member (its declared size was charged to the budget), never past that size."""
        m = self.members[name]
        raw = memoryview(self.data)[m.start : m.start + m.compress_size]
        if m.method == zipfile.ZIP_STORED:
            out = bytes(raw)
        else:
            out = _inflate(raw, m)
        if zlib.crc32(out) != m.crc:
            raise ZipCorruptError(f"{m.name}: CRC mismatch (corrupt, or not the bytes the directory declares)")
        return out

    def read_config(self, name: str) -> bytes:
        """Inflate a JSON config member, refused before inflating when it declares more than ``config_limit``."""
        m = self.members[name]
        limit = config_limit()
        if m.file_size > limit:
            raise ZipBoundsError(
                f"{m.name} declares {m.file_size / _MIB:.1f} MiB, past the {limit / _MIB:.0f} MiB limit for a "
                "config (raise FWX_MAX_CONFIG_MB if it is really that large)"
            )
        return self.read(name)


def open_bounded(data: bytes | mmap.mmap, where: str = "") -> BoundedZip:
    """``data`` checked as a zip under its own inflate budget (``inflate_budget`` of its size)."""
    return BoundedZip(data, Budget(inflate_budget(len(data))), where)  # type: ignore[arg-type]


BOUNDS_HINT = "a zip that inflates past what it declares, or past FWX_MAX_INFLATE_MB, is refused even when trusted"


def held_members(data: bytes, shown: object, suffix: str) -> list[bytes]:
    """The members whose names end with ``suffix``, inflated within the bounds; for a command, a broken
    archive is an InputError and a broken bound an UnsafeModelError (one line each)."""
    from fwx.errors import InputError, UnsafeModelError

    try:
        zf = open_bounded(data)
        return [zf.read(n) for n in zf.names if n.endswith(suffix)]
    except ZipCorruptError as exc:
        raise InputError(f"cannot read {shown}: {exc}", hint="the file is probably truncated or corrupt") from exc
    except ZipBoundsError as exc:
        raise UnsafeModelError(f"{shown}: {exc}", hint=BOUNDS_HINT) from exc


def hold_zip_file(path: str | os.PathLike[str]) -> None:
    """A file a framework opens itself (a torch.save ``.pt``) keeps the same bounds if it is a zip, checked
    without reading it into memory; anything else (a legacy pickle) is left to the framework."""
    from fwx.errors import UnsafeModelError

    with open(path, "rb") as fh:
        if fh.read(4) != _LOCAL:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
            try:
                open_bounded(view)
            except ZipCorruptError:
                return  # broken rather than hostile: the framework's own error says so
            except ZipBoundsError as exc:
                raise UnsafeModelError(f"{path}: {exc}", hint=BOUNDS_HINT) from exc


def _inflate(raw: memoryview, m: Member) -> bytes:
    d = zlib.decompressobj(-15)
    parts: list[bytes] = []
    got = 0
    for i in range(0, len(raw), _CHUNK):
        chunk = bytes(raw[i : i + _CHUNK])
        while chunk:
            part = d.decompress(chunk, m.file_size - got + 1)  # never more than one byte past the declared size
            got += len(part)
            if got > m.file_size:
                raise ZipBoundsError(f"{m.name}: inflates past its declared {m.file_size} bytes")
            if not part and len(d.unconsumed_tail) == len(chunk):
                raise ZipCorruptError(f"{m.name}: deflate stream makes no progress")
            parts.append(part)
            chunk = d.unconsumed_tail
    parts.append(d.flush())  # all input consumed: only zlib's last buffered bytes remain
    got += len(parts[-1])
    if got != m.file_size:
        raise ZipCorruptError(f"{m.name}: inflates to {got} bytes, not the {m.file_size} it declares")
    return b"".join(parts)


class _Reader:
    """A read-only file over bytes for ``zipfile`` (io.BytesIO would copy the whole archive)."""

    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._pos = 0

    def seek(self, pos: int, whence: int = 0) -> int:
        base = (0, self._pos, len(self._view))[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._view) if n is None or n < 0 else min(len(self._view), self._pos + n)
        out = bytes(self._view[self._pos : end])
        self._pos = end
        return out

    def seekable(self) -> bool:
        return True
