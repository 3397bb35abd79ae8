"""PyTorch -> ONNX with the written default-domain opset exactly the one asked for.

Two edges serve this pair and the exporter tries them in order, keeping the
first whose artifact validates:

* ``TorchToOnnx``: the TorchScript-based exporter (``dynamo=False``). It writes
  any opset from 7 up, exactly, in milliseconds. Default opset 17: this
  exporter writes it exactly, and older runtimes and tools read it (onnx2torch
  fails on opset 18+ ReduceMean/Shape/Reshape forms); fwx's own translators
  take opsets 7-20. The MHA fast path is off while exporting (``export_mode``).
* ``TorchToOnnxDynamo``: ``torch.export``-based (``dynamo=True``). On torch 2.13
  it silently writes opset 18 when asked for less, so it refuses opset < 18;
  it keeps dynamic sequence lengths that the legacy exporter bakes in
  (``nn.MultiheadAttention``), which the two-size validation detects.

When an op does not exist at the requested opset, the legacy edge tries higher
opsets to find the lowest one that works and says so (``UnsupportedOpsError``).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from fwx.converters import _torch as tc
from fwx.converters._onnx import DEFAULT_OPSET, MAX_OPSET, pin_symbols
from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.errors import ExportError, UnsupportedOpsError, first_line
from fwx.formats import Format
from fwx.frameworks import require
from fwx.signature import Signature, hop_signature

DYNAMO_MIN_OPSET = 18
_OP_PATTERNS = (
    re.compile(r"operator '([\w:.]+)'"),
    re.compile(r"export of ([\w:.]+) in opset"),
    re.compile(r"ONNX export of operator ([\w:.]+)"),
)


def dynamic_axes(sig: Signature) -> dict[str, dict[int, str]]:
    return {
        s.name: {axis: str(s.shape[axis]) for axis in s.dynamic_axes}
        for s in (*sig.inputs, *sig.outputs)
        if s.dynamic_axes
    }


def unsupported_op(exc: BaseException) -> str | None:
    """The op named by an exporter error that means 'not in this opset', else None."""
    text = str(exc)
    if "opset" not in text and "Unsupported" not in text:
        return None
    for pattern in _OP_PATTERNS:
        m = pattern.search(text)
        if m:
            return m.group(1).replace("aten::", "")
    return None


class TorchToOnnx(Converter):
    source = Format.PYTORCH
    target = Format.ONNX
    tool = "torch.onnx (TorchScript exporter)"
    honours = frozenset({"opset", "dynamic", "static_shapes"})
    requires = (("torch", "torch"), ("onnx", "onnx"))
    cost = 10

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        torch = require("torch", "exporting to ONNX")
        opset = opts.opset or DEFAULT_OPSET
        try:
            self._export(src, opts, out, opset)
        except Exception as exc:  # noqa: BLE001
            op = unsupported_op(exc)
            if op is None:
                raise ExportError(
                    f"torch.onnx.export (opset {opset}) failed: {first_line(exc)}",
                    hint="try another --opset, or check that the model runs on the pinned inputs",
                ) from exc
            raise self._unsupported(src, opts, opset, op) from exc
        sig = hop_signature(src.signature, opts.static_shapes, src.sample_inputs)
        _pin_written(out, sig)
        return ConvertResult(
            out,
            sig,
            tool="torch.onnx.export(dynamo=False)",
            tool_version=torch.__version__,
            layout=src.layout,
            opset=opset,
        )

    def _export(self, src: SourceModel, opts: ConvertOptions, f: Path | io.BytesIO, opset: int) -> None:
        torch = require("torch", "exporting to ONNX")
        from fwx.converters import torch_symbolics

        torch_symbolics.register(opset)  # aten::diff (GPT-2's mask helpers)
        sig = hop_signature(src.signature, opts.static_shapes, src.sample_inputs)
        with tc.export_mode():
            torch.onnx.export(
                tc.wrap(src.obj, sig),
                tc.tensors(src.sample_inputs, sig),
                f,
                dynamo=False,
                opset_version=opset,
                input_names=sig.input_names,
                output_names=sig.output_names,
                dynamic_axes=dynamic_axes(sig),
                do_constant_folding=True,
            )

    def _unsupported(self, src: SourceModel, opts: ConvertOptions, opset: int, op: str) -> UnsupportedOpsError:
        """Find the lowest opset that exports the model, collecting the ops that block each lower one."""
        ops = {op}
        for higher in range(opset + 1, MAX_OPSET + 1):
            try:
                self._export(src, opts, io.BytesIO(), higher)
            except Exception as exc:  # noqa: BLE001
                blocker = unsupported_op(exc)
                if blocker is None:
                    break
                ops.add(blocker)
                continue
            return UnsupportedOpsError(
                f"ONNX opset {opset}",
                ops,
                hint=f"the lowest opset that exports this model is {higher}: pass --opset {higher}",
            )
        return UnsupportedOpsError(
            f"ONNX opset {opset}",
            ops,
            hint=f"no ONNX opset up to {MAX_OPSET} expresses them; rewrite those ops or register a custom symbolic",
        )


class TorchToOnnxDynamo(Converter):
    source = Format.PYTORCH
    target = Format.ONNX
    tool = "torch.onnx (dynamo exporter)"
    honours = frozenset({"opset", "dynamic", "static_shapes"})
    requires = (("torch", "torch"), ("onnx", "onnx"), ("onnxscript", "onnx"))
    cost = 11

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        torch = require("torch", "exporting to ONNX")
        opset = opts.opset or DYNAMO_MIN_OPSET
        if opset < DYNAMO_MIN_OPSET:
            raise ExportError(
                f"the dynamo ONNX exporter cannot write opset {opset} (it writes >= {DYNAMO_MIN_OPSET})",
                hint=f"pass --opset {DYNAMO_MIN_OPSET} or higher for this exporter",
            )
        sig = hop_signature(src.signature, opts.static_shapes, src.sample_inputs)
        shapes = tc.dims_for(sig)
        try:
            with tc.export_mode():
                program: Any = torch.onnx.export(
                    tc.wrap(src.obj, sig),
                    tc.tensors(src.sample_inputs, sig),
                    dynamo=True,
                    opset_version=opset,
                    input_names=sig.input_names,
                    output_names=sig.output_names,
                    verbose=False,
                    dynamic_shapes=shapes if any(shapes) else None,
                    external_data=False,
                )
                program.save(str(out), external_data=False)
        except Exception as exc:  # noqa: BLE001
            raise ExportError(
                f"torch.onnx.export(dynamo=True, opset {opset}) failed: {first_line(exc)}",
                hint="try --opset 17 (TorchScript-based exporter)",
            ) from exc
        _pin_written(out, sig)
        return ConvertResult(
            out,
            sig,
            tool="torch.onnx.export(dynamo=True)",
            tool_version=torch.__version__,
            layout=src.layout,
            opset=opset,
        )


def _pin_written(out: Path, sig: Signature) -> None:
    """The pinned dims over the exporters' own dim names: the dynamo exporter names an output axis it
    derives from an input's by its expression (``s14 - 1``, wav2vec2's frames), which is no symbol at all,
    and the legacy one names fixed output axes it cannot size (``Resizeout_dim_1``). External data stays
    where it is."""
    onnx = require("onnx", "writing ONNX models")
    model = onnx.load(str(out), load_external_data=False)
    if pin_symbols(model, sig):
        onnx.save(model, str(out))
