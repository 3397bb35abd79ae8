"""The ONNX model's signature, and the inputs the translator traces and verifies with.

Sizes for dynamic dims are chosen >= 2 and distinct from each other, because
torch.export specialises a dim whose sample size is 0 or 1 and may tie two
dims that happen to be equal. Integer inputs that index a table (token ids
into an embedding) get values inside that table.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from fwx.converters.onnx_torch.translate import graph_inputs
from fwx.errors import InputError
from fwx.signature import Dim, Signature, TensorSpec


def _spec(vi: onnx.ValueInfoProto, need_shape: bool) -> TensorSpec:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise InputError(f"ONNX value {vi.name!r} is not a tensor", hint="only tensor inputs/outputs are supported")
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    if not tt.HasField("shape"):
        if need_shape:
            raise InputError(
                f"ONNX input {vi.name!r} declares no shape", hint="re-export the ONNX model with input shapes"
            )
        return TensorSpec(vi.name, dtype.name, ())
    dims: list[Dim] = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or f"{vi.name}_d{i}")
    return TensorSpec(vi.name, dtype.name, tuple(dims))


def onnx_signature(model: onnx.ModelProto) -> Signature:
    return Signature(
        tuple(_spec(i, True) for i in graph_inputs(model)), tuple(_spec(o, False) for o in model.graph.output)
    )


def symbols(sig: Signature) -> list[str]:
    """Dynamic input dims in order of first appearance."""
    out: list[str] = []
    for spec in sig.inputs:
        for d in spec.shape:
            if isinstance(d, str) and d not in out:
                out.append(d)
    return out


def default_sizes(sig: Signature, scale: int = 1) -> dict[str, int]:
    """Distinct sizes >= 2: 2 for a leading (batch) dim, 3, 4, ... times ``scale`` for the rest."""
    leading = {spec.shape[0] for spec in sig.inputs if spec.shape and isinstance(spec.shape[0], str)}
    sizes: dict[str, int] = {}
    nxt = 3
    for sym in symbols(sig):
        if sym in leading and 2 not in sizes.values():
            sizes[sym] = 2
        else:
            sizes[sym] = nxt * scale
            nxt += 1
    return sizes


def sizes_of(sig: Signature, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for spec in sig.inputs:
        shape = np.shape(arrays[spec.name])
        if len(shape) != spec.rank:
            raise InputError(
                f"sample input {spec.name!r} has rank {len(shape)}, the ONNX model wants {spec.rank}",
                hint=f"give {spec}",
            )
        for d, s in zip(spec.shape, shape, strict=True):
            if isinstance(d, str):
                sizes.setdefault(d, int(s))
    return sizes


def index_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """Inputs used (directly or through Cast) as Gather indices into a constant table: their bound."""
    tables = {t.name: list(t.dims) for t in model.graph.initializer}
    alias = {i.name: i.name for i in graph_inputs(model)}
    bounds: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type in ("Cast", "Identity") and node.input and node.input[0] in alias:
            alias[node.output[0]] = alias[node.input[0]]
        elif node.op_type == "Gather" and len(node.input) > 1 and node.input[1] in alias and node.input[0] in tables:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            dims = tables[node.input[0]]
            size = int(dims[axis])
            name = alias[node.input[1]]
            bounds[name] = min(bounds.get(name, size), size)
    return bounds


def make_inputs(
    sig: Signature, sizes: Mapping[str, int], bounds: Mapping[str, int], seed: int = 0
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in sig.inputs:
        shape = tuple(int(sizes[d]) if isinstance(d, str) else int(d) for d in spec.shape)
        dt = np.dtype(spec.dtype)
        if dt.kind == "f":
            out[spec.name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            out[spec.name] = rng.random(shape) > 0.5
        else:
            high = bounds.get(spec.name, 2)
            out[spec.name] = rng.integers(0, max(high, 1), size=shape).astype(dt)
    return out


def tile_to(sig: Signature, feeds: Mapping[str, np.ndarray], sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """``feeds`` repeated (or cut) along each dynamic axis to ``sizes``: other sizes with the same values.

    Used when the user gave the sample: its values are in the range the model
    expects (pixels for a model with preprocessing layers), which standard
    normal noise is not; a deep random network far outside that range turns
    float rounding into large, meaningless disagreements.
    """
    out: dict[str, np.ndarray] = {}
    for spec in sig.inputs:
        arr = np.asarray(feeds[spec.name])
        for axis, d in enumerate(spec.shape):
            if isinstance(d, str) and arr.shape[axis] != int(sizes[d]) and arr.shape[axis] > 0:
                n = int(sizes[d])
                arr = np.concatenate([arr] * -(-n // arr.shape[axis]), axis=axis).take(range(n), axis=axis)
        out[spec.name] = np.ascontiguousarray(arr)
    return out


def pinned(sig: Signature, sizes: Mapping[str, int]) -> Signature:
    """The signature with every dynamic input dim fixed at ``sizes`` (``--static-shapes``)."""

    def fix(spec: TensorSpec) -> TensorSpec:
        dims = tuple(int(sizes[d]) if isinstance(d, str) and d in sizes else d for d in spec.shape)
        return TensorSpec(spec.name, spec.dtype, dims)

    outs = tuple(fix(o) for o in sig.outputs)
    return Signature(tuple(fix(i) for i in sig.inputs), outs)
