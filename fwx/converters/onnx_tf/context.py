"""Translation state and the per-node view handlers see.

A value is a NumPy array (a constant, so shape logic can fold), a ``tf.Tensor``
in ONNX layout, or a ``ChannelsLast`` tensor: a 4-D NCHW value kept as NHWC so
that chains of convolutions, normalisations and element-wise ops run in the
layout TF's CPU kernels (and TFLite) need, with no transposes between them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf.model import Node
from fwx.errors import ExportError

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
#: Float constants with at least this many elements are stored as SavedModel variables.
VARIABLE_MIN_ELEMENTS = 1024


@dataclass(frozen=True)
class ChannelsLast:
    """A rank-4 value whose ONNX meaning is NCHW, held as NHWC."""

    t: Any


@dataclass(frozen=True)
class Partial:
    """An integer scalar/vector (usually shape arithmetic) with some elements known now."""

    t: Any
    rank: int
    elems: list[int | None]


Value = Any  # np.ndarray | tf.Tensor | ChannelsLast


class WeightStore:
    """Large constants as ``tf.Variable``s tracked on the module, so the SavedModel keeps them in
    ``variables/`` (not in the graph proto, which is capped at 2 GiB). Keyed by content, so the
    second trace that ``tf.function`` makes reuses the variables of the first."""

    def __init__(self, module: tf.Module) -> None:
        self.module = module
        self.module.weights_list = []
        self._by_key: dict[tuple[str, tuple[int, ...], str], tf.Variable] = {}

    def variable(self, arr: np.ndarray) -> tf.Variable:
        key = (hashlib.sha1(np.ascontiguousarray(arr).tobytes()).hexdigest(), arr.shape, arr.dtype.str)
        var = self._by_key.get(key)
        if var is None:
            var = tf.Variable(arr, trainable=False, name=f"w{len(self._by_key)}")
            self._by_key[key] = var
            self.module.weights_list.append(var)
        return var

    @property
    def count(self) -> int:
        return len(self._by_key)


class Env:
    """Every value produced so far in one trace, plus layout caches and static shape knowledge."""

    def __init__(self, initializers: dict[str, np.ndarray], store: WeightStore | None, opset: int) -> None:
        self.values: dict[str, Value] = dict(initializers)
        self.store = store
        self.opset = opset
        self.folding = False
        #: Runs a sub-graph's nodes in an environment (set by the translator, which owns the op table, so
        #: that an ``If`` handler can run its branches without importing it).
        self.run_nodes: Callable[[list[Node], Env], None] | None = None
        #: Partly known integer vectors (outputs of Shape and friends): (rank 0/1, elements or None).
        self.known: dict[str, tuple[int, list[int | None]]] = {}
        self._nchw: dict[str, tf.Tensor] = {}
        self._nhwc: dict[str, tf.Tensor] = {}
        self._consts: dict[int, tuple[np.ndarray, tf.Tensor]] = {}

    def child(self, initializers: dict[str, np.ndarray]) -> Env:
        """A scope for a sub-graph: sees every value so far (outer tensors are captured), adds its own."""
        env = Env({}, self.store, self.opset)
        env.values = {**self.values, **initializers}
        env.known = dict(self.known)
        env.run_nodes = self.run_nodes
        return env

    def materialize(self, arr: np.ndarray) -> tf.Tensor:
        if self.folding:
            return tf.constant(arr)
        hit = self._consts.get(id(arr))
        if hit is not None:
            return hit[1]
        if self.store is not None and arr.size >= VARIABLE_MIN_ELEMENTS and arr.dtype.kind == "f":
            t = tf.convert_to_tensor(self.store.variable(arr))
        else:
            t = tf.constant(arr)
        self._consts[id(arr)] = (arr, t)
        return t

    def tensor(self, name: str) -> tf.Tensor:
        v = self.values[name]
        if isinstance(v, np.ndarray):
            return self.materialize(v)
        if isinstance(v, ChannelsLast):
            if name not in self._nchw:
                self._nchw[name] = _to_nchw(v.t)
            return self._nchw[name]
        return v

    def channels_last(self, name: str) -> tf.Tensor:
        v = self.values[name]
        if isinstance(v, ChannelsLast):
            return v.t
        if isinstance(v, np.ndarray):
            return self.materialize(np.ascontiguousarray(np.transpose(v, TO_NHWC)))
        if name not in self._nhwc:
            self._nhwc[name] = tf.transpose(v, TO_NHWC)
        return self._nhwc[name]


def _to_nchw(t: tf.Tensor) -> tf.Tensor:
    """NHWC -> NCHW; a free reshape when the moved axes are 1 (after global pooling, 1-channel maps)."""
    _, h, w, c = t.shape.as_list()
    if h == 1 and w == 1 and c is not None:
        return tf.reshape(t, [-1, c, 1, 1])
    if c == 1 and h is not None and w is not None:
        return tf.reshape(t, [-1, 1, h, w])
    return tf.transpose(t, TO_NCHW)


def np_scalar(v: np.ndarray) -> Any:
    return v.reshape(-1)[0].item()


class NodeCtx:
    """What a handler sees: its node's attributes and typed access to its inputs."""

    def __init__(self, node: Node, env: Env) -> None:
        self.node = node
        self.env = env
        self.opset = env.opset

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attrs.get(name, default)

    @property
    def n_inputs(self) -> int:
        return len(self.node.inputs)

    def has(self, i: int) -> bool:
        return i < len(self.node.inputs) and self.node.inputs[i] != ""

    def value(self, i: int) -> Value:
        return self.env.values[self.node.inputs[i]]

    def const(self, i: int) -> np.ndarray | None:
        """The input as a NumPy array when it is known at translation time."""
        if not self.has(i):
            return None
        v = self.value(i)
        return v if isinstance(v, np.ndarray) else None

    def static(self, i: int, what: str) -> np.ndarray:
        v = self.const(i)
        if v is None:
            self.fail(
                f"needs a constant {what} (input {i}), but it is computed at run time",
                hint="export the model with this value fixed, or fold constants (onnxsim)",
            )
        return v

    def t(self, i: int) -> tf.Tensor:
        return self.env.tensor(self.node.inputs[i])

    def ts(self) -> list[tf.Tensor]:
        return [self.t(i) for i in range(self.n_inputs) if self.has(i)]

    def cl(self, i: int) -> tf.Tensor:
        """The input in channels-last layout (rank 4 only)."""
        return self.env.channels_last(self.node.inputs[i])

    def is_cl(self, i: int) -> bool:
        return isinstance(self.value(i), ChannelsLast)

    def shape(self, i: int) -> list[int | None]:
        """Static ONNX-layout shape; ``None`` for dimensions known only at run time."""
        v = self.value(i)
        if isinstance(v, np.ndarray):
            return list(v.shape)
        if isinstance(v, ChannelsLast):
            s = v.t.shape.as_list()
            return [s[a] for a in TO_NCHW]
        if v.shape.rank is None:
            self.fail("needs an input of known rank")
        return list(v.shape.as_list())

    def rank(self, i: int) -> int:
        return len(self.shape(i))

    def dtype(self, i: int) -> tf.DType:
        v = self.value(i)
        if isinstance(v, np.ndarray):
            return tf.as_dtype(v.dtype)
        return (v.t if isinstance(v, ChannelsLast) else v).dtype

    def known(self, i: int) -> list[int | None] | None:
        """Elements of a small integer input that are known now (constants or tracked shapes)."""
        v = self.value(i)
        if isinstance(v, np.ndarray) and v.dtype.kind in "iu" and v.ndim <= 1:
            return [int(x) for x in v.reshape(-1)]
        entry = self.env.known.get(self.node.inputs[i])
        return list(entry[1]) if entry else None

    def axis(self, a: int, rank: int) -> int:
        if not -rank <= a < max(rank, 1):
            self.fail(f"axis {a} is out of range for rank {rank}")
        return a + rank if a < 0 else a

    def fail(self, msg: str, hint: str | None = None) -> NoReturn:
        raise ExportError(
            f"ONNX {self.node.label}: {msg}", hint=hint or "this model uses a form of the op fwx does not translate yet"
        )
