"""Tensor specs and signatures: the names, dtypes and shapes fwx pins.

A dimension is an ``int`` (fixed, >= 0) or a ``str`` symbol such as ``"N"`` or
``"seq"`` (dynamic). ``-1`` on input is accepted and turned into a generated
symbol, so two inputs that share a symbol share a size (ONNX dim_param style).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fwx.errors import InputError, UsageError

Dim = int | str

#: Canonical dtype names (NumPy's) and their KServe v2 datatype names.
KSERVE_DTYPES: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
    "bfloat16": "BF16",
    "bytes": "BYTES",
}
FROM_KSERVE: dict[str, str] = {v: k for k, v in KSERVE_DTYPES.items()}

_DTYPE_ALIASES = {
    "float": "float32",
    "fp32": "float32",
    "f32": "float32",
    "half": "float16",
    "fp16": "float16",
    "double": "float64",
    "fp64": "float64",
    "int": "int64",
    "long": "int64",
    "i64": "int64",
    "i32": "int32",
    "u8": "uint8",
    "string": "bytes",
    "object": "bytes",
    "str": "bytes",
}


def normalize_dtype(dtype: Any) -> str:
    """Map any dtype-like (str, numpy, torch, tf, KServe name) to a canonical NumPy name."""
    name = getattr(dtype, "name", None) or str(dtype)
    name = name.replace("torch.", "").replace("tf.", "").replace("<dtype: '", "").rstrip("'>")
    key = name.strip().lower()
    if name.upper() in FROM_KSERVE:
        return FROM_KSERVE[name.upper()]
    key = _DTYPE_ALIASES.get(key, key)
    if key not in KSERVE_DTYPES:
        raise InputError(f"unknown dtype {dtype!r}", hint=f"use one of: {', '.join(KSERVE_DTYPES)}")
    return key


@dataclass(frozen=True)
class TensorSpec:
    """One named tensor: its dtype (canonical NumPy name) and shape (ints or symbols)."""

    name: str
    dtype: str
    shape: tuple[Dim, ...]

    def __post_init__(self) -> None:
        if not self.name:
            raise UsageError("a tensor needs a non-empty name")
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        dims: list[Dim] = []
        for d in self.shape:
            if isinstance(d, bool) or not isinstance(d, (int, str)):
                raise UsageError(f"tensor {self.name!r}: dimension {d!r} is neither an int nor a symbol")
            if isinstance(d, int) and d < -1:
                raise UsageError(f"tensor {self.name!r}: dimension {d} is negative")
            dims.append(d)
        object.__setattr__(self, "shape", tuple(dims))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dynamic_axes(self) -> tuple[int, ...]:
        return tuple(i for i, d in enumerate(self.shape) if is_dynamic(d))

    def kserve_shape(self) -> list[int]:
        """Shape with -1 for every dynamic dimension (KServe/TF Serving metadata style)."""
        return [-1 if is_dynamic(d) else int(d) for d in self.shape]

    def fits(self, shape: Sequence[int]) -> bool:
        if len(shape) != len(self.shape):
            return False
        return all(is_dynamic(d) or d == s for d, s in zip(self.shape, shape, strict=True))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TensorSpec:
        return cls(str(data["name"]), str(data["dtype"]), tuple(data["shape"]))

    def __str__(self) -> str:
        return f"{self.name}:{self.dtype}{shape_text(self.shape, self.name)}"


def is_dynamic(d: Dim) -> bool:
    return isinstance(d, str) or d == -1


#: Symbols frameworks make up (torch.export's s40, tf2onnx's unk__12): not worth showing a user.
_GENERATED = re.compile(r"s\d+|unk__\d+|-1")


def dim_text(d: Dim, axis: int, name: str, shared: Mapping[str, str] | None = None) -> str:
    """The one spelling of a dim in user output: N for a dynamic first axis, NAME_dI for another
    dynamic axis unless the user named it (seq), the number otherwise; never -1 or s40. ``shared``
    spells a made-up symbol that several tensors share by its first tensor's name, and tells apart
    first axes that are different sizes."""
    if not is_dynamic(d):
        return str(d)
    if shared and str(d) in shared:
        return shared[str(d)]
    if axis == 0:
        return "N"
    return f"{name}_d{axis}" if _GENERATED.fullmatch(str(d)) else str(d)


def shape_text(shape: Sequence[Dim], name: str, shared: Mapping[str, str] | None = None) -> str:
    return "[" + ",".join(dim_text(d, i, name, shared) for i, d in enumerate(shape)) + "]"


@dataclass(frozen=True)
class Signature:
    """Ordered inputs and outputs of a model."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        for kind, specs in (("input", self.inputs), ("output", self.outputs)):
            names = [s.name for s in specs]
            dupes = {n for n in names if names.count(n) > 1}
            if dupes:
                raise UsageError(f"duplicate {kind} name(s): {', '.join(sorted(dupes))}")

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]

    def input(self, name: str) -> TensorSpec:
        for s in self.inputs:
            if s.name == name:
                return s
        raise KeyError(name)

    def output(self, name: str) -> TensorSpec:
        for s in self.outputs:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {"inputs": [s.to_json() for s in self.inputs], "outputs": [s.to_json() for s in self.outputs]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Signature:
        return cls(
            tuple(TensorSpec.from_json(s) for s in data.get("inputs", [])),
            tuple(TensorSpec.from_json(s) for s in data.get("outputs", [])),
        )

    def __str__(self) -> str:
        # a made-up symbol (s53) shared by input_ids and attention_mask reads input_ids_d1 in both:
        # spelled per tensor, a .pt2 that shares its sequence axis would look as if it did not
        # and two batch-like axes that are not the same size (CLIP's texts and images) are not both N
        leading = {s.shape[0] for s in self.inputs if s.rank and isinstance(s.shape[0], str) and s.shape[0] != "-1"}
        shared: dict[str, str] = {}
        for spec in (*self.inputs, *self.outputs):
            for i, d in enumerate(spec.shape):
                if not isinstance(d, str) or d == "-1":
                    continue
                if i and _GENERATED.fullmatch(d):
                    shared.setdefault(d, f"{spec.name}_d{i}")
                elif not i and len(leading) > 1:
                    shared.setdefault(d, f"{spec.name}_d0" if _GENERATED.fullmatch(d) else d)

        def text(specs: tuple[TensorSpec, ...]) -> str:
            return ", ".join(f"{s.name}:{s.dtype}{shape_text(s.shape, s.name, shared)}" for s in specs)

        return f"({text(self.inputs)}) -> ({text(self.outputs)})"


_SPEC_RE = re.compile(r"^\s*([A-Za-z_][\w.:/-]*?)\s*:\s*([A-Za-z0-9_]+)\s*\[([^\]]*)\]\s*$")


def parse_tensor_spec(text: str, *, default_symbol_prefix: str = "d") -> TensorSpec:
    """Parse ``NAME:DTYPE[DIMS]`` such as ``image:float32[N,3,224,224]``.

    A symbol or ``-1`` marks a dynamic dimension; ``-1`` gets a generated symbol.
    """
    m = _SPEC_RE.match(text)
    if not m:
        raise UsageError(
            f"cannot parse tensor spec {text!r}",
            hint="write NAME:DTYPE[DIMS], e.g. image:float32[N,3,224,224] (a symbol or -1 is dynamic)",
        )
    name, dtype, dims_text = m.groups()
    dims: list[Dim] = []
    for i, raw in enumerate(x.strip() for x in dims_text.split(",") if x.strip()):
        if re.fullmatch(r"-?\d+", raw):
            v = int(raw)
            if v < -1:
                raise UsageError(f"tensor spec {text!r}: dimension {v} is negative")
            dims.append(f"{name}_{default_symbol_prefix}{i}" if v == -1 else v)
        elif re.fullmatch(r"[A-Za-z_]\w*", raw):
            dims.append(raw)
        else:
            raise UsageError(f"tensor spec {text!r}: dimension {raw!r} is neither an integer nor a symbol")
    return TensorSpec(name, dtype, tuple(dims))


def concrete_shape(spec: TensorSpec, sizes: Mapping[str, int] | None = None, default: int = 1) -> tuple[int, ...]:
    """Pick a concrete shape for a spec: symbols from ``sizes`` (else ``default``)."""
    sizes = sizes or {}
    out: list[int] = []
    for d in spec.shape:
        if isinstance(d, str):
            out.append(int(sizes.get(d, default)))
        elif d == -1:
            out.append(default)
        else:
            out.append(int(d))
    return tuple(out)


def names_or_default(names: Iterable[str] | None, count: int, prefix: str) -> list[str]:
    """User-given names, or ``prefix_0..`` when none were given (or too few)."""
    given = list(names or [])
    return given + [f"{prefix}_{i}" for i in range(len(given), count)]


#: The batch axis of every tensor is called ``N`` so artifacts of all formats agree on its name.
BATCH = "N"


def spec_from_dims(name: str, dtype: object, dims: Sequence[int | str | None]) -> TensorSpec:
    """A spec from framework dims where ``None``/``-1``/a symbol means dynamic (axis 0 becomes ``N``)."""
    out: list[Dim] = []
    for i, d in enumerate(dims):
        if d is None or d == -1 or isinstance(d, str):
            out.append(
                BATCH if i == 0 else (d if isinstance(d, str) and d and not d.startswith("unk") else f"{name}_d{i}")
            )
        else:
            out.append(int(d))
    return TensorSpec(name, normalize_dtype(dtype), tuple(out))


def static_signature(sig: Signature, feeds: Mapping[str, Any]) -> Signature:
    """``sig`` with every dynamic dim fixed to its size in ``feeds`` (``--static-shapes``).

    Sizes are read per symbol from the inputs, so an output axis driven by an
    input symbol (the batch) is fixed too; a symbol no input carries stays dynamic.
    """
    sizes: dict[str, int] = {}
    fixed: dict[str, tuple[Dim, ...]] = {}
    for spec in sig.inputs:
        arr = feeds.get(spec.name)
        if arr is None or arr.ndim != spec.rank:
            continue
        fixed[spec.name] = tuple(int(n) if is_dynamic(d) else d for d, n in zip(spec.shape, arr.shape, strict=True))
        for d, n in zip(spec.shape, arr.shape, strict=True):
            if isinstance(d, str):
                sizes.setdefault(d, int(n))

    def fix(spec: TensorSpec) -> TensorSpec:
        return TensorSpec(
            spec.name, spec.dtype, tuple(sizes.get(d, d) if isinstance(d, str) else d for d in spec.shape)
        )

    inputs = tuple(TensorSpec(s.name, s.dtype, fixed[s.name]) if s.name in fixed else fix(s) for s in sig.inputs)
    return Signature(inputs, tuple(fix(s) for s in sig.outputs))


def hop_signature(sig: Signature, static: bool, feeds: Mapping[str, Any]) -> Signature:
    """The signature an edge writes: the pin, or with ``--static-shapes`` the pin fixed at the sample sizes."""
    return static_signature(sig, feeds) if static else sig
