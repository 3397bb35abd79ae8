"""Output axes of a file source (ONNX) as the model behaves, not as its ``dim_param`` names say.

The legacy torch exporter names every axis listed in ``dynamic_axes``, also a
fixed hidden size (64), so the declared outputs claim a dynamic axis that is
always 64; an artifact that fixes it would then be rejected on read-back. The
model is run at two sizes of every input symbol: an output axis that does not
change is fixed to its size, one that changes takes the input symbol whose size
it follows (``N`` for the batch) or keeps its declared name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fwx.formats import Format
from fwx.quiet import quiet
from fwx.runtimes.base import load_runtime
from fwx.signature import Dim, Signature, TensorSpec, is_dynamic
from fwx.sources.load import LoadedSource
from fwx.sources.samples import InputConfig, make_feeds, probe_sizes


def resolve_outputs(
    src: LoadedSource,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    examples: Mapping[str, np.ndarray] | None = None,
    cfg: InputConfig | None = None,
) -> tuple[TensorSpec, ...]:
    """``outputs`` with each declared-dynamic axis settled by two runs; unchanged when the model cannot run."""
    if src.format is not Format.ONNX or src.path is None or not any(s.dynamic_axes for s in outputs):
        return tuple(outputs)
    sizes = probe_sizes(inputs, examples)
    if not sizes[0]:
        return tuple(outputs)
    try:
        with quiet(native=True):
            rt = load_runtime(Format.ONNX, src.path, signature_hint=Signature(tuple(inputs), tuple(outputs)))
            try:
                runs = [rt.infer(make_feeds(inputs, size, examples, seed=i, cfg=cfg)) for i, size in enumerate(sizes)]
            finally:
                rt.close()
    except Exception:  # noqa: BLE001 - a model fwx cannot run here keeps its declared axes; validation judges it
        return tuple(outputs)
    return tuple(settle(spec, runs[0].get(spec.name), runs[1].get(spec.name), sizes) for spec in outputs)


def settle(
    spec: TensorSpec, a: np.ndarray | None, b: np.ndarray | None, sizes: Sequence[Mapping[str, int]]
) -> TensorSpec:
    """``spec`` from two runs at ``sizes``: a declared-dynamic axis that did not change is fixed, one that
    changed takes the input symbol it follows (else keeps its name); ``spec`` as it is if a run lacks it."""
    if a is None or b is None or a.ndim != spec.rank or b.ndim != spec.rank:
        return spec
    dims: list[Dim] = []
    for axis, d in enumerate(spec.shape):
        na, nb = int(a.shape[axis]), int(b.shape[axis])
        if not is_dynamic(d):
            dims.append(d)
        elif na == nb:
            dims.append(na)
        else:
            follows = [sym for sym in sizes[0] if sizes[0][sym] == na and sizes[1].get(sym) == nb]
            dims.append(follows[0] if follows else d)
    return TensorSpec(spec.name, spec.dtype, tuple(dims))
