"""Calibration and eval data: where samples come from, checked, then streamed.

Accepted layouts (``--calibration-data`` / ``--eval-data``):

* ``data.npz`` keyed by input name, first axis = samples (``labels`` optional).
  Read member by member from the zip, one sample at a time: never all in memory.
* a folder with one ``<input>.npy`` per model input (first axis = samples, memory-mapped)
  and optionally ``labels.npy``;
* a folder of ``.npy`` files, one sample each (single-input models), or of ``.npz``
  files, one sample each keyed by input name;
* a folder of images (.jpg/.png/...), optionally in class subfolders (sorted
  names = label 0..K-1), with the preprocessing in ``fwx.quantize.preprocess``;
* ``random`` (calibration only): seeded standard-normal noise, with a loud warning.

A stored sample either has the model's batch axis of size 1 or lacks it; both fit.
When fewer samples are asked than exist, an evenly spaced subset is used so a
folder sorted by class still calibrates on every class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fwx.errors import InputError
from fwx.quantize.npyio import NpzRows, load_mmap, load_npy, npy_header, npz_array, npz_headers
from fwx.quantize.preprocess import IMAGE_SUFFIXES, Preprocess, open_image, parse, resolve
from fwx.signature import Signature, TensorSpec, concrete_shape

LABELS = "labels"
FORMATS_HINT = (
    "pass an .npz keyed by input name, a folder of .npy/.npz files, or a folder of images; see docs/quantize.md"
)


def pick(count: int, n: int) -> list[int]:
    """``n`` evenly spaced indices out of ``count`` (all of them when n >= count)."""
    if n >= count:
        return list(range(count))
    return sorted({int(i) for i in np.linspace(0, count - 1, n).round()})


def fit_sample(name: str, arr: np.ndarray, spec: TensorSpec, where: str) -> np.ndarray:
    """One stored sample -> one model input: add the batch axis if missing, cast within a dtype kind."""
    check_row(name, arr.dtype, arr.shape, spec, where)
    if arr.ndim + 1 == spec.rank:
        arr = arr[None]
    return np.ascontiguousarray(arr, dtype=spec.dtype) if arr.dtype != np.dtype(spec.dtype) else arr


def check_row(name: str, dtype: np.dtype, shape: Sequence[int], spec: TensorSpec, where: str) -> None:
    full = tuple(shape) if len(shape) == spec.rank else (1, *shape) if len(shape) + 1 == spec.rank else None
    if full is None or not spec.fits(full):
        want = [str(d) for d in spec.shape]
        raise InputError(
            f"{where}: samples of {name!r} have shape {list(shape)}, but the model takes {spec}",
            hint=f"store each sample as [{','.join(want[1:])}] (first axis = samples) or with a batch axis of 1",
        )
    if not dtype_fits(dtype, spec.dtype):
        raise InputError(
            f"{where}: {name!r} is {np.dtype(dtype).name}, but the model takes {spec.dtype}",
            hint=f"save it as {spec.dtype}, e.g. x.astype(np.{spec.dtype})",
        )


def dtype_fits(src: Any, dst: str) -> bool:
    """Same dtype, or a cast within the same kind (float64 -> float32, int64 -> int32)."""
    s, d = np.dtype(src), np.dtype(dst)
    if s == d:
        return True
    kinds = {"f": "f", "i": "iu", "u": "iu", "b": "b"}
    return d.kind in kinds.get(s.kind, "")


class Source(ABC):
    """A set of samples on disk (or generated). ``count`` is known before reading any pixel."""

    kind: str = ""

    def __init__(self, path: Path | None, purpose: str) -> None:
        self.path = path
        self.purpose = purpose
        self.count = 0

    def describe(self) -> str:
        return f"{self.purpose} data {self.path}"

    @abstractmethod
    def arrays(self, signature: Signature) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        """name -> (dtype, shape of one stored sample), read from headers only."""

    @abstractmethod
    def rows(self, signature: Signature, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        """The stored samples at ``indices`` (ascending), one dict at a time."""

    def labels(self) -> np.ndarray | None:
        return None

    def check(self, signature: Signature | None, n: int) -> None:
        """Names, shapes and dtypes against ``signature``; readability only without one."""
        if self.count == 0:
            raise InputError(f"{self.describe()} holds no samples", hint=FORMATS_HINT)
        if signature is None:
            return
        found = self.arrays(signature)
        wanted = signature.input_names
        missing = [k for k in wanted if k not in found]
        if missing:
            raise InputError(
                f"{self.describe()} has no samples for input(s) {', '.join(missing)} "
                f"(it has: {', '.join(found) or 'nothing'})",
                hint=f"key the arrays by the model's input names: {', '.join(wanted)}",
            )
        extra = [k for k in found if k not in wanted]
        if extra:
            raise InputError(
                f"{self.describe()} has arrays the model does not take: {', '.join(extra)}",
                hint=f"the model's inputs are: {', '.join(wanted)} (plus optional '{LABELS}')",
            )
        for name in wanted:
            dtype, shape = found[name]
            check_row(name, dtype, shape, signature.input(name), self.describe())

    def samples(self, signature: Signature, n: int) -> Iterator[dict[str, np.ndarray]]:
        """Up to ``n`` model-ready samples (batch axis of 1 where the model has one), streamed."""
        where = self.describe()
        for row in self.rows(signature, pick(self.count, n)):
            yield {k: fit_sample(k, row[k], signature.input(k), where) for k in signature.input_names}


class NpzSource(Source):
    kind = "npz"

    def __init__(self, path: Path, purpose: str) -> None:
        super().__init__(path, purpose)
        self.headers = npz_headers(path)
        inputs = {k: h for k, h in self.headers.items() if k != LABELS}
        counts = {k: h.shape[0] if h.shape else 0 for k, h in inputs.items()}
        if len(set(counts.values())) > 1:
            raise InputError(
                f"{self.describe()}: arrays hold different numbers of samples: "
                + ", ".join(f"{k}={v}" for k, v in counts.items()),
                hint="the first axis of every array counts samples; make them equal",
            )
        self.count = next(iter(counts.values()), 0)

    def arrays(self, signature: Signature) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        return {k: (h.dtype, h.shape[1:]) for k, h in self.headers.items() if k != LABELS}

    def rows(self, signature: Signature, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        assert self.path is not None
        with NpzRows(self.path, signature.input_names) as reader:
            yield from reader.rows(indices)

    def labels(self) -> np.ndarray | None:
        assert self.path is not None
        return npz_array(self.path, LABELS) if LABELS in self.headers else None


class PerInputNpySource(Source):
    """A folder with ``<input>.npy`` per input (first axis = samples), memory-mapped."""

    kind = "npy-per-input"

    def __init__(self, path: Path, purpose: str, files: dict[str, Path]) -> None:
        super().__init__(path, purpose)
        self.files = files
        self.maps = {k: load_mmap(p) for k, p in files.items()}
        counts = {k: m.shape[0] if m.ndim else 0 for k, m in self.maps.items() if k != LABELS}
        if len(set(counts.values())) > 1:
            raise InputError(
                f"{self.describe()}: files hold different numbers of samples: "
                + ", ".join(f"{k}.npy={v}" for k, v in counts.items()),
                hint="the first axis of every file counts samples; make them equal",
            )
        self.count = next(iter(counts.values()), 0)

    def arrays(self, signature: Signature) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        return {k: (m.dtype, tuple(m.shape[1:])) for k, m in self.maps.items() if k != LABELS}

    def rows(self, signature: Signature, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        for i in indices:
            yield {k: np.array(self.maps[k][i]) for k in signature.input_names}

    def labels(self) -> np.ndarray | None:
        return np.asarray(self.maps[LABELS]) if LABELS in self.maps else None


class PerSampleSource(Source):
    """A folder of ``.npy`` (single input) or ``.npz`` (keyed by input) files, one sample each."""

    kind = "per-sample"

    def __init__(self, path: Path, purpose: str, files: list[Path]) -> None:
        super().__init__(path, purpose)
        self.files = [f for f in files if f.stem != LABELS]
        self.count = len(self.files)
        self.labels_file = next((f for f in files if f.name == f"{LABELS}.npy"), None)

    def labels(self) -> np.ndarray | None:
        return load_npy(self.labels_file) if self.labels_file else None

    def _read_header(self, f: Path, signature: Signature) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        if f.suffix == ".npz":
            return {k: (h.dtype, h.shape) for k, h in npz_headers(f).items()}
        if len(signature.inputs) != 1:
            raise InputError(
                f"{self.describe()}: one .npy per sample only works for single-input models",
                hint="use one .npz per sample keyed by input name, or one <input>.npy per input",
            )
        h = npy_header(f)
        return {signature.input_names[0]: (h.dtype, h.shape)}

    def arrays(self, signature: Signature) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        return self._read_header(self.files[0], signature)

    def check(self, signature: Signature | None, n: int) -> None:
        """The first file as a whole, then the header of every file that will be read."""
        super().check(signature, n)
        if signature is None:
            return
        for i in pick(self.count, n):
            for name, (dtype, shape) in self._read_header(self.files[i], signature).items():
                if name in signature.input_names:
                    check_row(name, dtype, shape, signature.input(name), f"{self.describe()}/{self.files[i].name}")

    def rows(self, signature: Signature, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        for i in indices:
            f = self.files[i]
            if f.suffix == ".npz":
                yield {k: npz_array(f, k) for k in signature.input_names}
            else:
                yield {signature.input_names[0]: load_npy(f)}


class ImageSource(Source):
    """Image files, preprocessed to the model's single image input."""

    kind = "images"

    def __init__(self, path: Path, purpose: str, files: list[Path], preprocess: Any) -> None:
        super().__init__(path, purpose)
        self.files = files
        self.count = len(files)
        self.raw = parse(preprocess)
        self.classes = sorted({f.parent.name for f in files}) if all(f.parent != path for f in files) else None

    def resolved(self, signature: Signature) -> Preprocess:
        if len(signature.inputs) != 1:
            raise InputError(
                f"{self.describe()}: image folders only feed single-input models",
                hint="use an .npz keyed by input name for models with several inputs",
            )
        return resolve(self.raw, signature.inputs[0])

    def check(self, signature: Signature | None, n: int) -> None:
        super().check(signature, n)
        for i in pick(self.count, n):
            open_image(self.files[i])

    def arrays(self, signature: Signature) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        pre = self.resolved(signature)
        w, h = pre.size
        c = 3 if pre.mode != "L" else 1
        shape = {"nchw": (c, h, w), "nhwc": (h, w, c), "hw": (h, w)}[pre.layout]
        return {signature.input_names[0]: (np.dtype(pre.dtype), shape)}

    def rows(self, signature: Signature, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        pre = self.resolved(signature)
        for i in indices:
            yield {signature.input_names[0]: pre.apply(self.files[i])}

    def labels(self) -> np.ndarray | None:
        if self.classes is None:
            return None
        index = {c: i for i, c in enumerate(self.classes)}
        return np.asarray([index[f.parent.name] for f in self.files], dtype=np.int64)


class RandomSource(Source):
    """Seeded noise shaped like the signature: standard-normal floats, small non-negative ints.

    Standard normal because that is what the export validator feeds when it has no
    real samples either, so a smoke-test export calibrates and validates on one distribution.
    """

    kind = "random"

    def __init__(self, count: int, seed: int = 0) -> None:
        super().__init__(None, "calibration")
        self.count = count
        self.seed = seed

    def describe(self) -> str:
        return "random calibration data"

    def arrays(self, signature: Signature) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        return {s.name: (np.dtype(s.dtype), concrete_shape(s, default=1)) for s in signature.inputs}

    def rows(self, signature: Signature, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        rng = np.random.default_rng(self.seed)
        for _ in indices:
            yield {s.name: _noise(rng, s) for s in signature.inputs}


def _noise(rng: np.random.Generator, spec: TensorSpec) -> np.ndarray:
    shape = concrete_shape(spec, default=1)
    kind = np.dtype(spec.dtype).kind
    if kind == "f":
        return rng.standard_normal(shape, dtype=np.float32).astype(spec.dtype)
    if kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 10, size=shape).astype(spec.dtype)


def open_source(
    spec: str | Path,
    signature: Signature | None,
    preprocess: Any = None,
    *,
    purpose: str = "calibration",
    random_count: int = 0,
) -> Source:
    """Recognise the layout of ``spec`` (see the module docstring) without reading samples."""
    if str(spec).strip().lower() == "random":
        return RandomSource(random_count)
    path = Path(spec).expanduser()
    if not path.exists():
        raise InputError(f"{purpose} data {path} does not exist", hint=FORMATS_HINT)
    if path.is_file():
        if path.suffix.lower() != ".npz":
            raise InputError(f"{purpose} data {path} is not an .npz file or a folder", hint=FORMATS_HINT)
        return NpzSource(path, purpose)
    return _open_folder(path, signature, preprocess, purpose)


def _open_folder(path: Path, signature: Signature | None, preprocess: Any, purpose: str) -> Source:
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    arrays = [p for p in files if p.suffix.lower() in (".npy", ".npz") and p.parent == path]
    if images and arrays:
        raise InputError(f"{purpose} folder {path} mixes images and .npy/.npz files", hint="keep one kind per folder")
    if images:
        return ImageSource(path, purpose, images, preprocess)
    if not arrays:
        raise InputError(f"{purpose} folder {path} is empty (no .npy, .npz or image files)", hint=FORMATS_HINT)
    stems = {p.stem: p for p in arrays if p.suffix == ".npy"}
    if (
        signature is not None
        and all(n in stems for n in signature.input_names)
        and set(stems) <= {*signature.input_names, LABELS}
        and len(stems) == len(arrays)
    ):
        return PerInputNpySource(path, purpose, stems)
    return PerSampleSource(path, purpose, arrays)
