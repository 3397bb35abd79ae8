"""ONNX LSTM and GRU as modules with two bodies: torch's fused kernel, and a scan for torch.export.

``torch.lstm``/``torch.gru`` are one fast op under TorchScript, but torch.export
decomposes them into a Python loop over time, which bakes the sequence length.
Under export the module instead runs the same cell through
``torch._higher_order_ops.scan``, which keeps the time axis symbolic.

torch's GRU computes the candidate as ``r * (W_hn h + b_hn)``: ONNX's
``linear_before_reset=1``. A GRU with ``linear_before_reset=0`` (``W_hn (r * h)``)
has no fused kernel, so under TorchScript it runs a scripted loop over time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import List, Optional, Tuple  # noqa: UP035 - TorchScript reads these annotations

import onnx
import torch
from torch import Tensor

from fwx.converters.onnx_torch.builder import GraphBuilder
from fwx.converters.onnx_torch.ops.registry import OnnxNode, attr_of, op
from fwx.converters.onnx_torch.values import Const, Value

#: ONNX stacks the gates i, o, f, c; torch stacks i, f, g(=c), o.
ONNX_TO_TORCH_GATES = (0, 2, 3, 1)
DEFAULT_ACTIVATIONS = ("Sigmoid", "Tanh", "Tanh")


def _reorder(t: Tensor, hidden: int) -> Tensor:
    return torch.cat([t[:, k * hidden : (k + 1) * hidden] for k in ONNX_TO_TORCH_GATES], 1).contiguous()


def _lstm_step(w_hh: Tensor) -> Callable[[tuple[Tensor, Tensor], Tensor], tuple[tuple[Tensor, Tensor], Tensor]]:
    def step(carry: tuple[Tensor, Tensor], xt: Tensor) -> tuple[tuple[Tensor, Tensor], Tensor]:
        h, c = carry
        i, f, g, o = (xt + torch.matmul(h, w_hh.t())).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return (h, c), h.clone()

    return step


class OnnxLSTM(torch.nn.Module):
    """One ONNX LSTM node (forward, reverse or bidirectional; layout 0 or 1)."""

    def __init__(self, w: Tensor, r: Tensor, bias: Tensor | None, hidden: int, direction: str, layout: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.num_dir = int(w.shape[0])
        self.reverse = direction == "reverse"
        self.batch_first = layout == 1
        bias = torch.zeros(self.num_dir, 8 * hidden, dtype=w.dtype) if bias is None else bias
        self.register_buffer("w_ih", _reorder(w, hidden))
        self.register_buffer("w_hh", _reorder(r, hidden))
        self.register_buffer("b_ih", _reorder(bias[:, : 4 * hidden], hidden))
        self.register_buffer("b_hh", _reorder(bias[:, 4 * hidden :], hidden))

    def forward(self, x: Tensor, h0: Optional[Tensor], c0: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor]:  # noqa: UP045
        if self.batch_first:
            x = x.transpose(0, 1)
            h0 = None if h0 is None else h0.transpose(0, 1)
            c0 = None if c0 is None else c0.transpose(0, 1)
        if h0 is None:
            h0 = x.new_zeros([self.num_dir, x.size(1), self.hidden])
        if c0 is None:
            c0 = x.new_zeros([self.num_dir, x.size(1), self.hidden])
        if torch.jit.is_scripting():  # type: ignore[attr-defined]
            y, hn, cn = self._fused(x, h0, c0)
        else:
            y, hn, cn = self._traceable(x, h0, c0)
        if self.batch_first:
            return y.transpose(0, 1), hn.transpose(0, 1), cn.transpose(0, 1)
        return y.transpose(1, 2), hn, cn

    def _fused(self, x: Tensor, h0: Tensor, c0: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        params: list[Tensor] = []
        for d in range(self.num_dir):
            params += [self.w_ih[d], self.w_hh[d], self.b_ih[d], self.b_hh[d]]  # type: ignore[index]
        xin = x.flip([0]) if self.reverse else x
        out, hn, cn = torch.lstm(xin, [h0, c0], params, True, 1, 0.0, False, self.num_dir == 2, False)
        if self.reverse:
            out = out.flip([0])
        return out.reshape(out.size(0), out.size(1), self.num_dir, self.hidden), hn, cn

    @torch.jit.unused
    def _traceable(self, x: Tensor, h0: Tensor, c0: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if not torch.compiler.is_exporting():
            return self._fused(x, h0, c0)
        from torch._higher_order_ops.scan import scan

        ys, hs, cs = [], [], []
        for d in range(self.num_dir):
            xw = torch.matmul(x, self.w_ih[d].t()) + self.b_ih[d] + self.b_hh[d]  # type: ignore[index]
            init = (
                h0[d].clone(memory_format=torch.contiguous_format),
                c0[d].clone(memory_format=torch.contiguous_format),
            )
            (h, c), y = scan(_lstm_step(self.w_hh[d]), init, xw, dim=0, reverse=self.reverse or d == 1)  # type: ignore[index]
            ys.append(y)
            hs.append(h)
            cs.append(c)
        return torch.stack(ys, 2), torch.stack(hs, 0), torch.stack(cs, 0)


def _check_rnn(node: onnx.NodeProto, activations: tuple[str, ...], flags: tuple[str, ...] = ()) -> str | None:
    """What an LSTM/GRU node asks that the modules do not do: other activations, clip, ``flags``, sequence_lens."""
    acts = [a.decode() if isinstance(a, bytes) else a for a in attr_of(node, "activations", []) or []]
    if acts and any(a != d for a, d in zip(acts, activations * 2, strict=False)):
        return "activations"
    if attr_of(node, "clip") is not None:
        return "clip"
    for flag in flags:
        if attr_of(node, flag, 0):
            return flag
    if len(node.input) > 4 and node.input[4]:
        return "sequence_lens"
    return None


def _check_lstm(node: onnx.NodeProto, opset: int) -> str | None:
    return _check_rnn(node, DEFAULT_ACTIVATIONS, ("input_forget",))


@op("LSTM", check=_check_lstm)
def _lstm(b: GraphBuilder, n: OnnxNode) -> list[Value]:
    w, r, bias = n.const(1), n.const(2), n.const(3)
    assert w is not None
    assert r is not None
    peep = n.input(7)
    if peep is not None and not (isinstance(peep, Const) and not peep.value.any()):
        raise n.unsupported("peepholes")
    hidden = int(n.attr("hidden_size", r.shape[-1]))
    module = OnnxLSTM(w, r, bias, hidden, str(n.attr("direction", "forward")), int(n.attr("layout", 0)))
    name = b.submodule(module, "lstm_" + n.name)
    return b.call_module(name, 3, n.need(0), n.input(5), n.input(6))[: len(n.outputs)]


#: ONNX stacks the GRU gates z, r, h; torch stacks r, z, n(=h).
ONNX_TO_TORCH_GRU_GATES = (1, 0, 2)


def _reorder_gru(t: Tensor, hidden: int) -> Tensor:
    return torch.cat([t[:, k * hidden : (k + 1) * hidden] for k in ONNX_TO_TORCH_GRU_GATES], 1).contiguous()


def gru_cell(xw: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor, linear_before_reset: bool) -> Tensor:
    """One GRU step; ``xw`` is the input's projection plus its bias (gates r, z, n in torch's order)."""
    xr, xz, xn = xw.chunk(3, -1)
    if linear_before_reset:
        hr, hz, hn = (torch.matmul(h, w_hh.t()) + b_hh).chunk(3, -1)
        r = torch.sigmoid(xr + hr)
        z = torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
    else:
        wr, wz, wn = w_hh.chunk(3, 0)
        br, bz, bn = b_hh.chunk(3, 0)
        r = torch.sigmoid(xr + torch.matmul(h, wr.t()) + br)
        z = torch.sigmoid(xz + torch.matmul(h, wz.t()) + bz)
        n = torch.tanh(xn + torch.matmul(r * h, wn.t()) + bn)
    return (1.0 - z) * n + z * h


def _gru_step(w_hh: Tensor, b_hh: Tensor, lbr: bool) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]:
    def step(h: Tensor, xw: Tensor) -> tuple[Tensor, Tensor]:
        h = gru_cell(xw, h, w_hh, b_hh, lbr)
        return h, h.clone()

    return step


class OnnxGRU(torch.nn.Module):
    """One ONNX GRU node (forward, reverse or bidirectional; layout 0 or 1; either ``linear_before_reset``)."""

    def __init__(
        self, w: Tensor, r: Tensor, bias: Tensor | None, hidden: int, direction: str, layout: int, lbr: bool
    ) -> None:
        super().__init__()
        self.hidden = hidden
        self.num_dir = int(w.shape[0])
        self.reverse = direction == "reverse"
        self.batch_first = layout == 1
        self.lbr = lbr
        bias = torch.zeros(self.num_dir, 6 * hidden, dtype=w.dtype) if bias is None else bias
        self.register_buffer("w_ih", _reorder_gru(w, hidden))
        self.register_buffer("w_hh", _reorder_gru(r, hidden))
        self.register_buffer("b_ih", _reorder_gru(bias[:, : 3 * hidden], hidden))
        self.register_buffer("b_hh", _reorder_gru(bias[:, 3 * hidden :], hidden))

    def forward(self, x: Tensor, h0: Optional[Tensor]) -> Tuple[Tensor, Tensor]:  # noqa: UP006, UP045
        if self.batch_first:
            x = x.transpose(0, 1)
            h0 = None if h0 is None else h0.transpose(0, 1)
        if h0 is None:
            h0 = x.new_zeros([self.num_dir, x.size(1), self.hidden])
        if torch.jit.is_scripting():  # type: ignore[attr-defined]
            y, hn = self._fused(x, h0) if self.lbr else self._loop(x, h0)
        else:
            y, hn = self._traceable(x, h0)
        if self.batch_first:
            return y.transpose(0, 1), hn.transpose(0, 1)
        return y.transpose(1, 2), hn

    def _fused(self, x: Tensor, h0: Tensor) -> Tuple[Tensor, Tensor]:  # noqa: UP006
        params: List[Tensor] = []  # noqa: UP006
        for d in range(self.num_dir):
            params += [self.w_ih[d], self.w_hh[d], self.b_ih[d], self.b_hh[d]]  # type: ignore[index]
        xin = x.flip([0]) if self.reverse else x
        out, hn = torch.gru(xin, h0, params, True, 1, 0.0, False, self.num_dir == 2, False)
        if self.reverse:
            out = out.flip([0])
        return out.reshape(out.size(0), out.size(1), self.num_dir, self.hidden), hn

    def _loop(self, x: Tensor, h0: Tensor) -> Tuple[Tensor, Tensor]:  # noqa: UP006
        ys: List[Tensor] = []  # noqa: UP006
        hs: List[Tensor] = []  # noqa: UP006
        steps = x.size(0)
        for d in range(self.num_dir):
            xw = torch.matmul(x, self.w_ih[d].t()) + self.b_ih[d]  # type: ignore[index]
            back = self.reverse or d == 1
            h = h0[d]
            out: List[Tensor] = []  # noqa: UP006
            for t in range(steps):
                h = gru_cell(xw[steps - 1 - t if back else t], h, self.w_hh[d], self.b_hh[d], self.lbr)  # type: ignore[index]
                out.append(h)
            if back:
                out.reverse()
            ys.append(torch.stack(out, 0))
            hs.append(h)
        return torch.stack(ys, 2), torch.stack(hs, 0)

    @torch.jit.unused
    def _traceable(self, x: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
        if not torch.compiler.is_exporting():
            return self._fused(x, h0) if self.lbr else self._loop(x, h0)
        from torch._higher_order_ops.scan import scan

        ys, hs = [], []
        for d in range(self.num_dir):
            xw = torch.matmul(x, self.w_ih[d].t()) + self.b_ih[d]  # type: ignore[index]
            init = h0[d].clone(memory_format=torch.contiguous_format)
            step = _gru_step(self.w_hh[d], self.b_hh[d], self.lbr)  # type: ignore[index]
            h, y = scan(step, init, xw, dim=0, reverse=self.reverse or d == 1)
            ys.append(y)
            hs.append(h)
        return torch.stack(ys, 2), torch.stack(hs, 0)


def _check_gru(node: onnx.NodeProto, opset: int) -> str | None:
    return _check_rnn(node, ("Sigmoid", "Tanh"))


@op("GRU", check=_check_gru)
def _gru(b: GraphBuilder, n: OnnxNode) -> list[Value]:
    w, r, bias = n.const(1), n.const(2), n.const(3)
    assert w is not None
    assert r is not None
    hidden = int(n.attr("hidden_size", r.shape[-1]))
    lbr = bool(n.attr("linear_before_reset", 0))
    module = OnnxGRU(w, r, bias, hidden, str(n.attr("direction", "forward")), int(n.attr("layout", 0)), lbr)
    name = b.submodule(module, "gru_" + n.name)
    return b.call_module(name, 2, n.need(0), n.input(5))[: len(n.outputs)]
