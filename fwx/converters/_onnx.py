"""ONNX helpers shared by the tf2onnx edges: unsupported-op detection and symbol naming.

tf2onnx converts with ``continue_on_error``: an op it cannot map stays in the
graph as a TensorFlow op and the file is written anyway. Every node is therefore
checked against the ONNX schema at the target opset, and the conversion is
retried at higher opsets to tell the user the lowest one that works.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fwx.converters._freeze import freeze_into
from fwx.converters._keras3_gru import before as keras3_gru_first
from fwx.converters._lookup_ops import LookupFreezer
from fwx.converters._tf import tf_specs
from fwx.converters.base import ConvertOptions, ConvertResult, SourceModel
from fwx.errors import ExportError, UnsupportedOpsError, first_line
from fwx.frameworks import require, version_of
from fwx.quiet import quiet
from fwx.signature import Signature, is_dynamic

#: Default ONNX opset for every fwx ONNX edge: the TorchScript-based exporter
#: writes it exactly (and fast), and runtimes older than onnx 1.13 read it.
DEFAULT_OPSET = 17
MAX_OPSET = 21
_STD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


def unsupported_nodes(model: Any, opset: int) -> list[str]:
    """Op types in ``model`` that have no schema at ``opset`` (or live in a non-standard domain)."""
    onnx = require("onnx", "checking ONNX models")
    versions = {o.domain or "": o.version for o in model.opset_import}
    bad: set[str] = set()
    for node in model.graph.node:
        domain = node.domain or ""
        if domain not in _STD_DOMAINS:
            bad.add(f"{domain}.{node.op_type}")
            continue
        limit = opset if domain in ("", "ai.onnx") else versions.get(domain, 1)
        try:
            onnx.defs.get_schema(node.op_type, max_inclusive_version=limit, domain=domain)
        except onnx.defs.SchemaError:
            bad.add(node.op_type)
    return sorted(bad)


def pin_symbols(model: Any, sig: Signature) -> bool:
    """Write the pinned symbols over anonymous dims (``unk__3``) of graph inputs/outputs, and the pinned
    sizes over symbols the pin fixes (the legacy exporter names LRASPP's 3 classes ``Resizeout_dim_1``),
    in place; True if a dim changed. Servers publish these shapes as the model's metadata."""
    changed = False
    specs = {s.name: s for s in (*sig.inputs, *sig.outputs)}
    for vi in (*model.graph.input, *model.graph.output):
        spec = specs.get(vi.name)
        if spec is None or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) != spec.rank:
            continue
        for d, want in zip(dims, spec.shape, strict=True):
            if is_dynamic(want) and not d.HasField("dim_value") and d.dim_param != str(want):
                d.dim_param = str(want)
                changed = True
            elif not is_dynamic(want) and not d.HasField("dim_value"):
                d.dim_value = int(want)
                changed = True
    return changed


def _erfc_handler(ctx: Any, node: Any, name: str, args: Any) -> None:
    """``Erfc(x)`` as ``1 - Erf(x)``: tf2onnx has no Erfc handler, and Keras' exact GELU lowers to it.

    ``tf.nn.gelu(approximate=False)`` is ``0.5 * x * erfc(-x / sqrt(2))``; the
    cancellation in ``1 - erf`` only matters where GELU's output is ~0 anyway.
    The node is rewritten in place as a ``Sub`` so its outputs keep their names.
    """
    import numpy as np
    from tf2onnx import utils

    x = node.input[0]
    erf = ctx.make_node("Erf", [x], op_name_scope=node.name)
    one = ctx.make_const(
        utils.make_name(f"{node.name}_one"), np.array(1, dtype=utils.map_onnx_to_numpy_type(ctx.get_dtype(x)))
    )
    node.type = "Sub"
    ctx.replace_inputs(node, [one.output[0], erf.output[0]])


def _bucketize_handler(ctx: Any, node: Any, name: str, args: Any) -> None:
    """``Bucketize(x, boundaries)`` (Keras ``Discretization``) as the number of boundaries ``<= x``:
    ``ReduceSum(Cast(x[..., None] >= boundaries), -1)``. TF's buckets are ``[b_i, b_{i+1})``, so a value equal
    to a boundary falls in the bucket above it, which ``>=`` counts."""
    import numpy as np
    from tf2onnx import utils

    bounds = np.array(node.get_attr_value("boundaries"), dtype=np.float32)
    x = node.input[0]
    if ctx.get_dtype(x) != utils.map_numpy_to_onnx_dtype(np.float32):
        x = ctx.make_node("Cast", [x], attr={"to": utils.map_numpy_to_onnx_dtype(np.float32)}).output[0]
    axis = ctx.make_const(utils.make_name(f"{node.name}_axis"), np.array([-1], dtype=np.int64)).output[0]
    col = ctx.make_node("Unsqueeze", [x, axis]).output[0]
    table = ctx.make_const(utils.make_name(f"{node.name}_bounds"), bounds).output[0]
    above = ctx.make_node("GreaterOrEqual", [col, table]).output[0]
    ones = ctx.make_node("Cast", [above], attr={"to": utils.map_numpy_to_onnx_dtype(np.int32)}).output[0]
    node.type = "ReduceSum"
    ctx.replace_inputs(node, [ones, axis])
    for key in list(node.attr):
        del node.attr[key]
    node.set_attr("keepdims", 0)


def _bincount_size(ctx: Any, name: str) -> int | None:
    """The ``size`` of a ``DenseBincount``: a constant, or Keras' ``min(maxlength, max(minlength, ...))`` with
    ``minlength == maxlength`` (``CategoryEncoding(num_tokens)``), which is that constant whatever the data."""
    node = ctx.get_node_by_output(name)
    if node.is_const():
        return int(node.get_tensor_value())
    if node.type not in ("Minimum", "Min"):  # TF's name, or ONNX's once tf2onnx has mapped it
        return None
    consts = [ctx.get_node_by_output(i) for i in node.input]
    top = [int(c.get_tensor_value()) for c in consts if c.is_const()]
    inner = [c for c in consts if c.type in ("Maximum", "Max")]
    if len(top) != 1 or len(inner) != 1:
        return None
    low = [int(c.get_tensor_value()) for c in map(ctx.get_node_by_output, inner[0].input) if c.is_const()]
    return top[0] if low == top else None


def _bincount_handler(ctx: Any, node: Any, name: str, args: Any) -> None:
    """``DenseBincount`` (Keras ``CategoryEncoding`` multi_hot/count, the last step of a lookup layer's
    ``output_mode="multi_hot"``) as ``Reduce(Cast(x[..., None] == arange(size)), -2)``: tf2onnx writes it with
    ``Unique``/``Compress``, which no ONNX translator and no TFLite builtin takes."""
    import numpy as np
    from tf2onnx import utils

    size = _bincount_size(ctx, node.input[1])
    weights = ctx.get_node_by_output(node.input[2])
    if size is None or not (weights.is_const() and weights.get_tensor_value(as_list=False).size == 0):
        raise ValueError(f"DenseBincount {node.name}: needs a constant size and no weights")
    out_type = ctx.get_dtype(node.output[0])
    i64 = utils.map_numpy_to_onnx_dtype(np.int64)
    x = ctx.make_node("Cast", [node.input[0]], attr={"to": i64}).output[0]
    last = ctx.make_const(utils.make_name(f"{node.name}_last"), np.array([-1], dtype=np.int64)).output[0]
    col = ctx.make_node("Unsqueeze", [x, last]).output[0]
    tokens = ctx.make_const(utils.make_name(f"{node.name}_tokens"), np.arange(size, dtype=np.int64)).output[0]
    hits = ctx.make_node("Cast", [ctx.make_node("Equal", [col, tokens]).output[0]], attr={"to": out_type}).output[0]
    axis = ctx.make_const(utils.make_name(f"{node.name}_axis"), np.array([-2], dtype=np.int64)).output[0]
    binary = bool(node.get_attr_value("binary_output"))
    ctx.remove_node(node.name)
    if binary and ctx.opset < 18:  # ReduceMax takes its axes as an attribute before opset 18
        ctx.make_node("ReduceMax", [hits], attr={"axes": [-2], "keepdims": 0}, outputs=[node.output[0]], name=name)
    else:
        ctx.make_node(
            "ReduceMax" if binary else "ReduceSum",
            [hits, axis],
            attr={"keepdims": 0},
            outputs=[node.output[0]],
            name=name,
        )


#: TF ops tf2onnx cannot map by itself, handled here (``custom_op_handlers``: per call, no global registry).
CUSTOM_HANDLERS: dict[str, tuple[Any, list[Any]]] = {
    "Erfc": (_erfc_handler, []),
    "Bucketize": (_bucketize_handler, []),
    "DenseBincount": (_bincount_handler, []),
}


def tf2onnx_convert(
    fn: Any, sig: Signature, src: SourceModel, out: Path, opts: ConvertOptions, keras_model: Any = None
) -> ConvertResult:
    """Convert a named ``tf.function`` taking ``sig`` at ``--opset`` (default 17); refuse ops the opset lacks.

    The function's preprocessing state goes into the graph: hash-table lookups (Keras
    ``IntegerLookup``/``StringLookup``, named after ``keras_model``'s layers) become ONNX ops
    (``_lookup``), and captured constants (``Normalization``) initializers (``_freeze``).
    """
    onnx = require("onnx", "writing ONNX models")
    tf2onnx = require("tf2onnx", "converting TensorFlow models to ONNX")
    opset = opts.opset or DEFAULT_OPSET
    lookups = LookupFreezer(fn, keras_model)
    model, bad = _convert(tf2onnx, fn, sig, opset, lookups)
    if bad and lookups.problems:
        raise ExportError(lookups.problems[0], hint="the SavedModel export holds the table as it is")
    if bad:
        raise _lowest_opset(tf2onnx, fn, sig, opset, bad, lookups)
    pin_symbols(model, sig)
    onnx.save(model, str(out))
    result = ConvertResult(out, sig, tool="tf2onnx", tool_version=version_of("tf2onnx"), layout=src.layout, opset=opset)
    note = lookups.note()
    if note:
        result.notes.append(note)
    return freeze_into(result, fn, sig, set(lookups.tables))


#: Function attributes that stop grappler from inlining a call. Keras 3 runs a grouped convolution
#: (ConvNeXt's depthwise ``Conv2D(groups=C)``) in a ``jit_compile`` function, because TF's CPU kernel has
#: no groups; tf2onnx then sees a ``StatefulPartitionedCall`` it cannot convert. ONNX ``Conv`` has groups.
_NO_INLINE = ("_noinline", "_XlaMustCompile")


def _inlining(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """tf2onnx's ``fix_freezing_errors_part2`` with ``_NO_INLINE`` stripped first: it sits between freezing
    and grappler, the one place the frozen GraphDef passes through, so grappler then inlines those calls."""

    def fix(graph_def: Any) -> Any:
        for attrs in [f.attr for f in graph_def.library.function] + [n.attr for n in graph_def.node]:
            for key in _NO_INLINE:
                if key in attrs:
                    del attrs[key]
        return original(graph_def)

    return fix


@contextlib.contextmanager
def tf2onnx_hooks(tf2onnx: Any) -> Iterator[None]:
    """For one conversion, two tf2onnx module functions wrapped (and restored after): XLA-marked calls
    inlined (``_inlining``) and Keras 3's GRU cell matched before tf2onnx's GRU rewriter (``_keras3_gru``)."""
    swaps: list[tuple[Any, str, Callable[[Any], Any]]] = [
        (tf2onnx.tf_loader, "fix_freezing_errors_part2", _inlining),
        (tf2onnx.tfonnx, "rewrite_gru_tf2", keras3_gru_first),
    ]
    originals = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    for (module, name, wrap), (_, _, original) in zip(swaps, originals, strict=True):
        setattr(module, name, wrap(original))
    try:
        yield
    finally:
        for module, name, original in originals:
            setattr(module, name, original)


def _convert(tf2onnx: Any, fn: Any, sig: Signature, opset: int, lookups: LookupFreezer) -> tuple[Any, list[str]]:
    lookups.reset()
    handlers = {**CUSTOM_HANDLERS, **lookups.handlers}
    try:
        with quiet(), tf2onnx_hooks(tf2onnx):
            model, _ = tf2onnx.convert.from_function(
                fn, input_signature=tf_specs(sig), opset=opset, custom_op_handlers=handlers
            )
    except Exception as exc:  # noqa: BLE001 - tf2onnx raises anything
        raise ExportError(
            f"tf2onnx (opset {opset}) failed: {first_line(exc)}",
            hint="try a higher --opset, or check the model runs on the pinned inputs",
        ) from exc
    return model, unsupported_nodes(model, opset)


def _lowest_opset(
    tf2onnx: Any, fn: Any, sig: Signature, opset: int, bad: list[str], lookups: LookupFreezer
) -> UnsupportedOpsError:
    for higher in range(opset + 1, MAX_OPSET + 1):
        try:
            _, still = _convert(tf2onnx, fn, sig, higher, lookups)
        except ExportError:
            continue
        if not still:
            return UnsupportedOpsError(
                f"ONNX opset {opset}",
                bad,
                hint=f"the lowest opset that converts this model is {higher}: pass --opset {higher}",
            )
    return UnsupportedOpsError(
        f"ONNX opset {opset}", bad, hint=f"tf2onnx cannot map them at any opset up to {MAX_OPSET}"
    )
