"""Tracers for TensorFlow: a SavedModel's ops and a Keras model's layers (see ``fwx.validators.tracers``).

A SavedModel signature is frozen (variables become constants, function calls
are inlined), imported into a wrapped function and pruned to fetch the output
of every op, in the order the graph created them (inputs before users). A
Keras functional model is re-wired to return every layer's output; the
layer's name is what converters keep (``functional_1/c1_1/Relu``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.runtimes.base import Runtime
from fwx.validators.locate_match import Probe
from fwx.validators.tracers import Trace

#: Ops whose outputs say nothing about where values go wrong.
_SKIP = frozenset({"Const", "Placeholder", "NoOp", "Identity", "IdentityN", "VarHandleOp", "ReadVariableOp"})


class SavedModelTracer:
    def __init__(self, path: Path, signature_name: str) -> None:
        tf = require("tensorflow", "tracing SavedModels")
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

        with quiet():
            self._loaded = tf.saved_model.load(str(path))  # kept: the function's variables die with it
            fn = self._loaded.signatures[signature_name]
            frozen = convert_variables_to_constants_v2(fn)
        graph_def = frozen.graph.as_graph_def()
        kw_specs: dict[str, Any] = dict(fn.structured_input_signature[1])
        self._feeds = {(getattr(s, "name", None) or k): f"{k}:0" for k, s in kw_specs.items()}
        ops = [op for op in frozen.graph.get_operations() if op.type not in _SKIP]
        fetch = [
            (op, out)
            for op in ops
            for out in op.outputs
            if out.dtype.is_floating or out.dtype.is_integer or out.dtype == tf.bool
        ]
        self.probes = [Probe(out.name, op.name, op.type, inputs=tuple(t.name for t in op.inputs)) for op, out in fetch]
        wrapped = tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(graph_def, name=""), [])
        get = wrapped.graph.get_tensor_by_name
        self._order = list(self._feeds)
        self._fn = wrapped.prune(
            feeds=[get(self._feeds[n]) for n in self._order], fetches=[get(out.name) for _, out in fetch]
        )

    def trace(self, feed: dict[str, np.ndarray]) -> Trace:
        import tensorflow as tf

        values = self._fn(*[tf.convert_to_tensor(feed[n]) for n in self._order])
        return [(p, np.asarray(v)) for p, v in zip(self.probes, values, strict=True)]


class KerasTracer:
    """Every top-level layer's output (a layer used twice, or a subclassed model, exposes none)."""

    def __init__(self, rt: Runtime) -> None:
        keras = require("keras", "tracing Keras models")
        model: Any = getattr(rt, "_model")  # noqa: B009 - the runtime's model, not part of its public API
        self._rt = rt
        outputs, self.probes = [], []
        for layer in model.layers:
            if type(layer).__name__ == "InputLayer":
                continue
            try:
                out = layer.output
            except (AttributeError, ValueError):  # called more than once, or never called symbolically
                continue
            if hasattr(out, "shape"):
                outputs.append(out)
                self.probes.append(Probe(layer.name, layer.name, type(layer).__name__, f"layer {layer.name}"))
        self._model = keras.Model(model.inputs, outputs)

    def trace(self, feed: dict[str, np.ndarray]) -> Trace:
        names = self._rt.signature().input_names
        arrays = [feed[n] for n in names]
        result = self._model(arrays, training=False)  # a list, as the model's inputs are
        values = result if isinstance(result, (list, tuple)) else [result]
        return [(p, np.asarray(v)) for p, v in zip(self.probes, values, strict=True)]
