"""Header-only and row-streaming reads of .npy/.npz files.

``np.load(npz)[key]`` materialises the whole array; a calibration set of a few
thousand 224x224 images would then sit in memory at once. Here an .npz member
is read as a stream, one sample (row) at a time, straight from the zip.
Pickled (object) arrays are refused: loading data must never run code.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from fwx.errors import InputError, first_line

_SKIP_CHUNK = 16 << 20


@dataclass(frozen=True)
class Header:
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool


def _bad(path: Path, exc: BaseException | str) -> InputError:
    why = exc if isinstance(exc, str) else first_line(exc)
    return InputError(f"cannot read {path}: {why}", hint="the file is not a valid .npy/.npz (re-save it with numpy)")


def read_header(fp: IO[bytes], path: Path) -> Header:
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            shape, fortran, dtype = np.lib.format._read_array_header(fp, version)  # type: ignore[attr-defined]
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise _bad(path, exc) from exc
    if dtype.hasobject:
        raise InputError(
            f"{path} holds Python objects (a pickled array), which fwx will not load", hint="save plain numeric arrays"
        )
    return Header(tuple(int(d) for d in shape), dtype, bool(fortran))


def npy_header(path: Path) -> Header:
    try:
        with path.open("rb") as fp:
            return read_header(fp, path)
    except OSError as exc:
        raise _bad(path, exc) from exc


def _zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise _bad(path, exc) from exc


def npz_headers(path: Path) -> dict[str, Header]:
    """Array name -> header, for every ``<name>.npy`` member of an .npz."""
    out: dict[str, Header] = {}
    with _zip(path) as zf:
        for member in zf.namelist():
            if not member.endswith(".npy"):
                continue
            try:
                with zf.open(member) as fp:
                    out[member[:-4]] = read_header(fp, path)
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise _bad(path, exc) from exc
    return out


def npz_array(path: Path, name: str) -> np.ndarray:
    """One whole member (labels, or one per-sample file): small by construction."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return np.asarray(data[name])
    except (ValueError, OSError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        raise _bad(path, exc) from exc


def load_npy(path: Path) -> np.ndarray:
    try:
        return np.asarray(np.load(path, allow_pickle=False))
    except (ValueError, OSError, EOFError) as exc:
        raise _bad(path, exc) from exc


def load_mmap(path: Path) -> np.ndarray:
    try:
        arr: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
        return arr
    except (ValueError, OSError, EOFError) as exc:
        raise _bad(path, exc) from exc


def _read_exact(fp: IO[bytes], n: int, path: Path) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = fp.read(n - len(buf))
        if not chunk:
            raise _bad(path, "file ends before the last sample (truncated)")
        buf += chunk
    return bytes(buf)


class _MemberRows:
    """Forward-only row reader over one .npy member of a zip."""

    def __init__(self, zf: zipfile.ZipFile, name: str, path: Path) -> None:
        self.path = path
        self.fp = zf.open(f"{name}.npy")
        self.header = read_header(self.fp, path)
        self.row_shape = self.header.shape[1:]
        self.row_bytes = self.header.dtype.itemsize * math.prod(self.row_shape)
        self.pos = 0
        self.whole: np.ndarray | None = None
        if self.header.fortran:  # column-major rows are not contiguous: load once (rare; documented)
            self.whole = np.asarray(npz_array(path, name))

    def row(self, index: int) -> np.ndarray:
        if self.whole is not None:
            return np.array(self.whole[index])
        if index < self.pos:
            raise ValueError("rows must be read in ascending order")
        skip = (index - self.pos) * self.row_bytes
        while skip:
            step = min(skip, _SKIP_CHUNK)
            _read_exact(self.fp, step, self.path)
            skip -= step
        data = _read_exact(self.fp, self.row_bytes, self.path)
        self.pos = index + 1
        return np.frombuffer(data, dtype=self.header.dtype).reshape(self.row_shape).copy()


class NpzRows:
    """Stream samples ``indices`` (ascending) of the named arrays of an .npz, one dict per sample."""

    def __init__(self, path: Path, names: Sequence[str]) -> None:
        self.path = path
        self.names = list(names)
        self.zf: zipfile.ZipFile | None = None
        self.members: dict[str, _MemberRows] = {}

    def __enter__(self) -> NpzRows:
        self.zf = _zip(self.path)
        try:
            self.members = {n: _MemberRows(self.zf, n, self.path) for n in self.names}
        except KeyError as exc:
            self.zf.close()
            raise InputError(
                f"{self.path} has no array {exc}", hint="key the arrays by the model's input names"
            ) from exc
        return self

    def __exit__(self, *exc: Any) -> None:
        for m in self.members.values():
            m.fp.close()
        if self.zf is not None:
            self.zf.close()

    def rows(self, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        try:
            for i in indices:
                yield {n: m.row(i) for n, m in self.members.items()}
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise _bad(self.path, exc) from exc
