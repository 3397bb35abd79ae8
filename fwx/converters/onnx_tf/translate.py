"""The driver: trace one ``tf.function`` by walking the sorted ONNX graph op by op.

Every dynamic ONNX dimension stays ``None`` in the input signature. Nodes
whose inputs are all constants run eagerly (``tf.init_scope``) and become
constants themselves, so weight transposes, shape arithmetic over static
dimensions and BatchNorm statistics cost nothing at run time.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf import model as onnx_model
from fwx.converters.onnx_tf.context import TO_NCHW, TO_NHWC, ChannelsLast, Env, NodeCtx, Partial, WeightStore
from fwx.converters.onnx_tf.fuse import fuse_gelu
from fwx.converters.onnx_tf.table import Handler, load_handlers
from fwx.errors import ExportError, FwxError, UnsupportedOpsError, first_line
from fwx.formats import NHWC
from fwx.signature import Signature, TensorSpec, is_dynamic

_STATIC_FOLD_MAX = 64
#: The newest default-domain opset whose op forms the test-suite covers.
TESTED_OPSET = 20


@dataclass
class Translation:
    """A traced model: call it on NumPy inputs, or save it as a SavedModel."""

    module: tf.Module
    function: Any  # ConcreteFunction: **{tf input name: tensor} -> {ONNX output name: tensor}
    signature: Signature  # as the SavedModel declares it (TF input names, ONNX output names)
    input_names: dict[str, str]  # ONNX input name -> TF signature name
    layout: str | None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    variables: int = 0

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = {self.input_names.get(k, k): tf.convert_to_tensor(v) for k, v in feeds.items()}
        return {k: v.numpy() for k, v in self.function(**args).items()}

    def save(self, out: Path, signature_key: str = "serving_default") -> None:
        tf.saved_model.save(self.module, str(out), signatures={signature_key: self.function})


def check_supported(proto: Any) -> None:
    """Raise ``UnsupportedOpsError`` naming every op the translator lacks, before any work."""
    missing = onnx_model.unsupported_ops(proto, load_handlers())
    if missing:
        raise UnsupportedOpsError(
            "fwx's ONNX->TensorFlow translator",
            missing,
            hint="re-export with ops from the supported list (docs/onnx_tf.md), "
            "or simplify the model (onnxsim) so they fold away",
        )


def _tf_dtype(dtype: str) -> tf.DType:
    """ONNX string tensors (fwx's ``bytes``) are ``tf.string``."""
    return tf.string if dtype in ("bytes", "object") else tf.as_dtype(dtype)


def _scope(node: onnx_model.Node) -> str:
    raw = re.sub(r"[^A-Za-z0-9_.\-]", "_", node.name or node.outputs[0]).lstrip("_.-")
    return raw if raw and raw[0].isalnum() else f"n{raw}"


def _to_numpy(v: Any) -> np.ndarray:
    if isinstance(v, ChannelsLast):
        v = tf.transpose(v.t, TO_NCHW)
    elif isinstance(v, Partial):
        v = v.t
    return np.asarray(v.numpy() if isinstance(v, tf.Tensor) else v)


def _settle(v: Any, env: Env, name: str) -> Any:
    """Store-ready value: fold what is now known, remember partial shape knowledge."""
    if isinstance(v, Partial):
        if all(e is not None for e in v.elems):
            arr = np.asarray(v.elems, v.t.dtype.as_numpy_dtype)
            return arr.reshape(()) if v.rank == 0 else arr
        env.known[name] = (v.rank, v.elems)
        return v.t
    if (
        isinstance(v, tf.Tensor)
        and v.dtype.is_integer
        and v.shape.is_fully_defined()
        and v.shape.num_elements() <= _STATIC_FOLD_MAX
    ):
        folded = tf.get_static_value(v)
        if folded is not None:
            return np.asarray(folded)
    return v


def _run_node(node: onnx_model.Node, env: Env, handler: Handler) -> None:
    ctx = NodeCtx(node, env)
    fold = all(isinstance(env.values[i], np.ndarray) for i in node.needs if i)
    try:
        with tf.name_scope(_scope(node)):
            if fold:
                with tf.init_scope():
                    env.folding = True
                    try:
                        outs = handler(ctx)
                        outs = [_to_numpy(o) for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
                    finally:
                        env.folding = False
            else:
                outs = handler(ctx)
    except FwxError:
        raise
    except Exception as exc:  # noqa: BLE001 - any TF error while building becomes one clear message
        raise ExportError(
            f"ONNX {node.label} could not be translated: {first_line(exc)}",
            hint="run with --debug for the traceback; please report the model",
        ) from exc
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    for name, v in zip(node.outputs, outs, strict=False):
        if name:
            env.values[name] = _settle(v, env, name)


def _inputs(
    graph: onnx_model.Graph, names: dict[str, str], nhwc: bool, shapes: dict[str, tuple[int, ...]]
) -> tuple[list[tf.TensorSpec], list[TensorSpec]]:
    """TF input signature (dynamic dims None) and the matching fwx specs (symbols kept)."""
    tf_specs, specs = [], []
    for s in graph.inputs:
        dims = list(shapes[s.name]) if s.name in shapes else list(s.shape)
        if nhwc and len(dims) == 4:
            dims = [dims[a] for a in TO_NHWC]
        tf_specs.append(
            tf.TensorSpec([None if is_dynamic(d) else int(d) for d in dims], _tf_dtype(s.dtype), name=names[s.name])
        )
        specs.append(TensorSpec(names[s.name], s.dtype, tuple(dims)))
    return tf_specs, specs


def _outputs(graph: onnx_model.Graph, traced: dict[str, Any]) -> list[TensorSpec]:
    """Output specs as the SavedModel will declare them: TF's static dims, ONNX's symbols for the rest.

    (ONNX files can declare a dim static that is not: the dynamo exporter writes an LSTM's time axis as a number.)
    """
    specs = []
    for o in graph.outputs:
        shape = traced[o.name].shape
        dims = o.shape
        if shape.rank is not None:
            names = o.shape if len(o.shape) == shape.rank and o.name not in graph.unshaped else (-1,) * shape.rank
            dims = tuple(
                int(d) if d is not None else (n if isinstance(n, str) else -1)
                for d, n in zip(shape.as_list(), names, strict=True)
            )
        specs.append(TensorSpec(o.name, o.dtype, dims))
    return specs


def translate(
    proto: Any, *, layout: str | None = None, static_shapes: dict[str, tuple[int, ...]] | None = None
) -> Translation:
    """Translate an ONNX ``ModelProto`` into a traced TF function on a ``tf.Module``.

    ``layout="nhwc"`` makes every 4-D input channels-last; ``static_shapes`` pins input shapes.
    """
    started = time.perf_counter()
    check_supported(proto)
    handlers = load_handlers()
    graph = onnx_model.parse(proto)
    notes: list[str] = []
    if graph.opset > TESTED_OPSET:
        notes.append(f"opset {graph.opset} is newer than the op forms fwx was tested with (<= {TESTED_OPSET})")
    if fuse_gelu(graph):
        notes.append("exact GELU (x*0.5*(1+erf(x/sqrt2))) fused into tf.nn.gelu")
    names = onnx_model.tf_input_names([s.name for s in graph.inputs])
    renamed = {k: v for k, v in names.items() if k != v}
    if renamed:
        notes.append("input names TF refuses were renamed: " + ", ".join(f"{k} -> {v}" for k, v in renamed.items()))
    nhwc = (layout or "").lower() == "nhwc"
    specs, in_specs = _inputs(graph, names, nhwc, static_shapes or {})
    module = tf.Module()
    store = WeightStore(module)
    outputs_seen: dict[str, Any] = {}

    def run_nodes(nodes: list[onnx_model.Node], env: Env) -> None:
        for node in nodes:
            _run_node(node, env, handlers[node.key])

    def body(*args: tf.Tensor) -> dict[str, tf.Tensor]:
        env = Env(graph.initializers, store, graph.opset)
        env.run_nodes = run_nodes
        for s, arg in zip(graph.inputs, args, strict=True):
            env.values[s.name] = ChannelsLast(arg) if nhwc and arg.shape.rank == 4 else arg
        run_nodes(graph.nodes, env)
        result = {}
        for o in graph.outputs:
            if o.name not in env.values:
                raise ExportError(
                    f"the ONNX graph output {o.name!r} is produced by no node",
                    hint="check the model with onnx.checker.check_model",
                )
            t = env.tensor(o.name)
            want = _tf_dtype(o.dtype)
            result[o.name] = tf.identity(t if t.dtype == want else tf.cast(t, want))
        outputs_seen.update(result)
        return result

    concrete = tf.function(body, input_signature=specs, autograph=False).get_concrete_function()
    sig = Signature(tuple(in_specs), tuple(_outputs(graph, outputs_seen)))
    return Translation(
        module, concrete, sig, names, NHWC if nhwc else None, notes, time.perf_counter() - started, store.count
    )
