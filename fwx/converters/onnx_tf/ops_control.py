"""Control flow: ``If``.

A scripted TorchScript model with ``if x.shape[0] > 2`` and Hugging Face
Optimum's merged decoders (one graph, ``use_cache_branch`` choosing between
two bodies) export an ONNX ``If``. A condition known at conversion runs one
branch inline; otherwise both branches become a ``tf.cond`` (TFLite's IF).
A branch reads the values around it directly, as ONNX scoping allows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf.context import NodeCtx
from fwx.converters.onnx_tf.model import Graph
from fwx.converters.onnx_tf.table import op


def _run(c: NodeCtx, graph: Graph) -> list[Any]:
    """The branch's outputs: folded NumPy values where everything is known, else tensors in ONNX layout."""
    env = c.env.child(graph.initializers)
    assert env.run_nodes is not None
    env.run_nodes(graph.nodes, env)
    return [
        env.values[o.name] if isinstance(env.values[o.name], np.ndarray) else env.tensor(o.name) for o in graph.outputs
    ]


@op("If")
def _if(c: NodeCtx) -> Any:
    then_g, else_g = c.node.graphs["then_branch"], c.node.graphs["else_branch"]
    cond = c.value(0)
    if isinstance(cond, np.ndarray):
        return _run(c, then_g if bool(np.asarray(cond).reshape(-1)[0]) else else_g)

    def branch(graph: Graph) -> Any:
        return lambda: [tf.convert_to_tensor(v) for v in _run(c, graph)]

    pred = tf.reshape(tf.cast(c.t(0), tf.bool), [])
    return list(tf.cond(pred, branch(then_g), branch(else_g)))
