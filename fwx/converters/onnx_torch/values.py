"""What the translator knows about each ONNX tensor while it builds the graph.

Three kinds, from most to least known at build time:

- ``Const``: the value is known (initializers, Constant nodes, and anything
  folded from them). Becomes a registered buffer when a runtime op needs it.
- ``Sym``: a small int vector (or scalar) whose items are Python ints or
  int-valued fx nodes such as ``x.size(1) * 2``. Shape, and what is computed
  from it, lives here. Keeping these as ints rather than tensors is what lets
  reshape sizes stay symbolic under ``torch.jit.script`` and ``torch.export``.
  A Sym may be viewed as a small grid (``grid``): the torch exporters turn
  ``F.pad``'s list into ONNX pads by Reshape ``[-1, 2]``, Slice (reversed),
  Transpose and Reshape ``[-1]``, which move items without computing them.
- ``Dyn``: a runtime tensor (an fx node). It carries its value on the sample
  input, which handlers may read for rank and dtype only, never for sizes
  (sizes read from the sample would be baked into the graph).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import torch
import torch.fx as fx


@dataclass(frozen=True, eq=False)
class SInt:
    """An int known only at run time: an fx node, plus its value on the sample."""

    node: fx.Node
    example: int


Item = int | SInt


@dataclass(frozen=True, eq=False)
class Const:
    value: torch.Tensor


@dataclass(frozen=True, eq=False)
class Sym:
    items: tuple[Item, ...]
    scalar: bool = False
    dtype: torch.dtype = torch.int64
    grid: tuple[int, ...] | None = None  # the items' shape (row-major) when it has 2+ axes; None: 1-D or scalar

    @property
    def dims(self) -> tuple[int, ...]:
        if self.grid is not None:
            return self.grid
        return () if self.scalar else (len(self.items),)


@dataclass(frozen=True, eq=False)
class Dyn:
    node: fx.Node
    example: torch.Tensor


Value = Const | Sym | Dyn

TORCH_DTYPES: dict[int, torch.dtype] = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.INT16: torch.int16,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.BOOL: torch.bool,
}

INT_DTYPES = frozenset({torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8})


def torch_dtype(onnx_type: int) -> torch.dtype:
    from fwx.errors import UnsupportedOpsError

    if onnx_type not in TORCH_DTYPES:
        name = onnx.TensorProto.DataType.Name(onnx_type)
        raise UnsupportedOpsError(
            "TorchScript/ExportedProgram",
            [f"tensor type {name}"],
            hint="cast the tensor to a supported type in the ONNX graph",
        )
    return TORCH_DTYPES[onnx_type]


def dtype_of(v: Value) -> torch.dtype:
    if isinstance(v, Const):
        return v.value.dtype
    if isinstance(v, Sym):
        return v.dtype
    return v.example.dtype


def make_sym(
    items: list[Item] | tuple[Item, ...],
    scalar: bool = False,
    dtype: torch.dtype = torch.int64,
    dims: tuple[int, ...] | None = None,
) -> Const | Sym:
    """A Sym, or a Const when every item turned out to be known; ``dims`` views the items as that shape."""
    if dims is not None:
        scalar = len(dims) == 0
    grid = dims if dims is not None and len(dims) >= 2 else None
    if all(isinstance(i, int) for i in items):
        ints = [int(i) for i in items]  # type: ignore[arg-type]
        t = torch.tensor(ints[0] if scalar else ints, dtype=dtype)
        return Const(t.reshape(grid) if grid is not None else t)
    return Sym(tuple(items), scalar, dtype, grid)


def moved(x: Sym, move: Callable[[np.ndarray], np.ndarray]) -> Const | Sym:
    """``x`` with its items moved as ``move`` moves an index array of ``x``'s shape (Reshape, Slice,
    Transpose, Gather, Squeeze): items are only picked, never computed, so sizes stay sizes."""
    idx = np.asarray(move(np.arange(len(x.items)).reshape(x.dims)))
    items = [x.items[int(i)] for i in idx.reshape(-1)]
    return make_sym(items, dtype=x.dtype, dims=tuple(int(d) for d in idx.shape))


def as_items(v: Value | None, limit: int = 64) -> tuple[list[Item], bool] | None:
    """Items and scalar flag of a 1-D or scalar Sym, or of a small integer Const; None for anything else
    (a grid Sym too: handlers that take items mean a vector)."""
    if isinstance(v, Sym):
        return None if v.grid is not None else (list(v.items), v.scalar)
    if isinstance(v, Const) and v.value.dtype in INT_DTYPES and v.value.dim() <= 1 and v.value.numel() <= limit:
        return [int(x) for x in v.value.reshape(-1).tolist()], v.value.dim() == 0
    return None
