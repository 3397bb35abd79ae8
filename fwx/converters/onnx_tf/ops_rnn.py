"""ONNX LSTM and GRU as one ``tf.while_loop`` over a dynamic time axis.

Why this shape: the input projection for every step and direction is one
matmul up front; the loop then does one recurrent matmul per step for all
directions at once (the reverse direction runs on time-reversed inputs).
Outputs are gathered by concatenation with a ``None`` time shape invariant,
not a TensorArray: TFLite lowers TensorLists only with a static element
shape, and the batch size is dynamic. The loop becomes a builtin WHILE.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf.context import NodeCtx
from fwx.converters.onnx_tf.table import op

_ACTS: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {"Sigmoid": tf.sigmoid, "Tanh": tf.tanh, "Relu": tf.nn.relu}
Step = Callable[[tf.Tensor, tuple[tf.Tensor, ...]], tuple[tf.Tensor, ...]]


class _Rnn:
    """What LSTM and GRU share: attributes, input projection, initial states, the loop, output layout."""

    def __init__(self, c: NodeCtx, gates: int, default_acts: list[str]) -> None:
        self.c = c
        if c.has(4):
            c.fail("sequence_lens is not supported; export with padded, equal-length sequences")
        self.hidden = int(c.attr("hidden_size"))
        self.direction = str(c.attr("direction", "forward"))
        self.layout = int(c.attr("layout", 0))
        self.w, self.r = c.static(1, "W"), c.static(2, "R")
        self.dirs = int(self.w.shape[0])
        acts = [str(a) for a in (c.attr("activations") or default_acts * self.dirs)]
        if acts[: len(default_acts)] * self.dirs != acts or any(a not in _ACTS for a in acts):
            c.fail(f"activations {acts} are not supported (Sigmoid/Tanh/Relu, same for every direction)")
        if c.attr("activation_alpha") or c.attr("activation_beta"):
            c.fail("activation_alpha/beta are not supported")
        self.acts = [_ACTS[a] for a in acts[: len(default_acts)]]
        self.clip = c.attr("clip")
        b = c.const(3)
        self.b = b if b is not None else np.zeros((self.dirs, 2 * gates * self.hidden), self.w.dtype)
        self.gates = gates
        x = c.t(0)
        self.x = tf.transpose(x, [1, 0, 2]) if self.layout else x  # [T, N, I]
        shape = tf.shape(self.x)
        self.steps, self.batch = shape[0], shape[1]

    def project(self, bias: np.ndarray) -> tf.Tensor:
        """x @ W^T + bias for all steps and directions: [T, D, N, G*H], reverse directions time-flipped."""
        size, g = int(self.w.shape[2]), self.gates * self.hidden
        wx = np.concatenate([self.w[d].T for d in range(self.dirs)], axis=1)
        flat = tf.matmul(tf.reshape(self.x, [-1, size]), self.c.env.materialize(np.ascontiguousarray(wx)))
        flat = flat + self.c.env.materialize(bias.reshape(-1).astype(self.w.dtype))
        proj = tf.transpose(tf.reshape(flat, tf.stack([self.steps, self.batch, self.dirs, g])), [0, 2, 1, 3])
        return self._flip(proj)

    def _flip(self, seq: tf.Tensor) -> tf.Tensor:
        if self.direction == "reverse":
            return tf.reverse(seq, [0])
        if self.direction == "bidirectional":
            return tf.concat([seq[:, :1], tf.reverse(seq[:, 1:], [0])], axis=1)
        return seq

    def initial(self, i: int) -> tf.Tensor:
        if self.c.has(i):
            s = self.c.t(i)
            return tf.transpose(s, [1, 0, 2]) if self.layout else s
        return tf.zeros(tf.stack([self.dirs, self.batch, self.hidden]), self.x.dtype)

    def recurrent(self, r: np.ndarray) -> Callable[[tf.Tensor], tf.Tensor]:
        """h [D, N, H] -> h @ R^T [D, N, G*H]; a plain matmul (TFLite FULLY_CONNECTED) for one direction."""
        rt = np.ascontiguousarray(np.transpose(r, (0, 2, 1)))
        if self.dirs == 1:
            r0 = self.c.env.materialize(np.ascontiguousarray(rt[0]))
            return lambda h: tf.expand_dims(tf.matmul(h[0], r0), 0)
        rd = self.c.env.materialize(rt)
        return lambda h: tf.matmul(h, rd)

    def gate(self, v: tf.Tensor) -> tf.Tensor:
        return tf.clip_by_value(v, -float(self.clip), float(self.clip)) if self.clip is not None else v

    def run(self, proj: tf.Tensor, states: tuple[tf.Tensor, ...], step: Step) -> list[tf.Tensor]:
        """Loop ``step(proj[t], states) -> states`` (states[0] is h); return Y, then the final states."""
        hid = tf.TensorShape([self.dirs, None, self.hidden])
        acc0 = tf.zeros(tf.stack([0, self.dirs, self.batch, self.hidden]), self.x.dtype)

        def body(t: tf.Tensor, acc: tf.Tensor, *s: tf.Tensor) -> tuple[tf.Tensor, ...]:
            new = step(proj[t], tuple(s))
            return (t + 1, tf.concat([acc, tf.expand_dims(new[0], 0)], 0), *new)

        out = tf.while_loop(
            lambda t, *_: t < self.steps,
            body,
            (tf.constant(0), acc0, *states),
            shape_invariants=(
                tf.TensorShape([]),
                tf.TensorShape([None, self.dirs, None, self.hidden]),
                *[hid] * len(states),
            ),
        )
        y = self._flip(out[1])
        finals = list(out[2:])
        if self.layout:
            return [tf.transpose(y, [2, 0, 1, 3]), *[tf.transpose(s, [1, 0, 2]) for s in finals]]
        return [y, *finals]


@op("LSTM")
def _lstm(c: NodeCtx) -> list[tf.Tensor]:
    rnn = _Rnn(c, 4, ["Sigmoid", "Tanh", "Tanh"])
    hsz = rnn.hidden
    f_act, g_act, h_act = rnn.acts
    proj = rnn.project(rnn.b[:, : 4 * hsz] + rnn.b[:, 4 * hsz :])
    rmat = rnn.recurrent(rnn.r)
    peep = c.const(7)
    p_i, p_o, p_f = (
        (c.env.materialize(peep[:, None, k * hsz : (k + 1) * hsz]) for k in range(3))
        if peep is not None
        else (None, None, None)
    )
    coupled = bool(int(c.attr("input_forget", 0)))

    def step(xw: tf.Tensor, s: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, ...]:
        h, cell = s
        i, o, f, g = tf.split(xw + rmat(h), 4, axis=-1)
        if p_i is not None:
            i, f = i + p_i * cell, f + p_f * cell
        i = f_act(rnn.gate(i))
        f = 1.0 - i if coupled else f_act(rnn.gate(f))
        cell = f * cell + i * g_act(rnn.gate(g))
        if p_o is not None:
            o = o + p_o * cell
        return f_act(rnn.gate(o)) * h_act(cell), cell

    return rnn.run(proj, (rnn.initial(5), rnn.initial(6)), step)


@op("GRU")
def _gru(c: NodeCtx) -> list[tf.Tensor]:
    rnn = _Rnn(c, 3, ["Sigmoid", "Tanh"])
    hsz = rnn.hidden
    f_act, g_act = rnn.acts
    wb, rb = rnn.b[:, : 3 * hsz], rnn.b[:, 3 * hsz :]
    before_reset = bool(int(c.attr("linear_before_reset", 0)))
    # z and r take both biases up front; the candidate's recurrent bias depends on linear_before_reset.
    proj = rnn.project(wb + np.concatenate([rb[:, : 2 * hsz], np.zeros_like(rb[:, 2 * hsz :])], axis=1))
    rmat_zr = rnn.recurrent(rnn.r[:, : 2 * hsz])
    rmat_h = rnn.recurrent(rnn.r[:, 2 * hsz :])
    rbh = c.env.materialize(np.ascontiguousarray(rb[:, None, 2 * hsz :]))

    def step(xw: tf.Tensor, s: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, ...]:
        (h,) = s
        xz, xr, xh = tf.split(xw, 3, axis=-1)
        hz, hr = tf.split(rmat_zr(h), 2, axis=-1)
        z, r = f_act(rnn.gate(xz + hz)), f_act(rnn.gate(xr + hr))
        if before_reset:
            cand = xh + r * (rmat_h(h) + rbh)
        else:
            cand = xh + rmat_h(r * h) + rbh
        return ((1.0 - z) * g_act(rnn.gate(cand)) + z * h,)

    return rnn.run(proj, (rnn.initial(5),), step)
