"""ONNX -> SavedModel with fwx's own translator (``fwx.converters.onnx_tf``).

Public tools (onnx2tf, onnx-tf) fail on Transformer encoders and LSTMs or
return wrong numbers (docs/onnx_tf.md); this edge keeps dynamic batch and
sequence dimensions, and its SavedModel converts to builtin-only TFLite, so
the planner reaches ONNX -> TFLite and PyTorch -> ONNX -> SavedModel -> TFLite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from fwx import __version__
from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.errors import ExportError, FwxError, UsageError, first_line
from fwx.formats import LAYOUTS, NCHW, NHWC, Format
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.signature import Signature, TensorSpec, concrete_shape, is_dynamic


def _source_path(src: SourceModel) -> Path:
    if src.path is None:
        raise ExportError(
            "the ONNX -> SavedModel translator needs an .onnx file on disk",
            hint="export to ONNX first (fwx export --to onnx)",
        )
    return src.path


def _layout(opts: ConvertOptions) -> str | None:
    layout = (opts.layout or "").lower() or None
    if layout not in (None, *LAYOUTS):
        raise UsageError(f"unknown layout {opts.layout!r}", hint="use nchw or nhwc")
    return layout


def _static_shapes(src: SourceModel, opts: ConvertOptions) -> dict[str, tuple[int, ...]]:
    """Input shapes to pin: the sample inputs' shapes, else every dynamic dimension set to 1."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in src.signature.inputs:
        sample = src.sample_inputs.get(spec.name)
        shapes[spec.name] = tuple(int(d) for d in sample.shape) if sample is not None else concrete_shape(spec)
    return shapes


def _align(got: TensorSpec, pinned: TensorSpec | None, nhwc: bool) -> TensorSpec:
    """Name the dynamic dims with the pinned symbols (the exporter calls the batch axis N)."""
    if pinned is None or pinned.rank != got.rank:
        return got
    dims = list(pinned.shape)
    if nhwc and len(dims) == 4:
        dims = [dims[a] for a in (0, 2, 3, 1)]
    shape = tuple(p if is_dynamic(g) and is_dynamic(p) else g for g, p in zip(got.shape, dims, strict=True))
    return TensorSpec(got.name, got.dtype, shape)


def _aligned(sig: Signature, pinned: Signature, nhwc: bool) -> Signature:
    ins = {s.name: s for s in pinned.inputs}
    outs = {s.name: s for s in pinned.outputs}
    return Signature(
        tuple(_align(s, ins.get(s.name), nhwc) for s in sig.inputs),
        tuple(_align(s, outs.get(s.name), False) for s in sig.outputs),
    )


class OnnxToSavedModel(Converter):
    """Translate the ONNX graph op by op into one traced ``tf.function`` and save it."""

    source = Format.ONNX
    target = Format.SAVEDMODEL
    tool = "fwx-onnx-tf"
    honours: ClassVar[frozenset[str]] = frozenset({"layout", "dynamic", "static_shapes"})
    requires: ClassVar[tuple[tuple[str, str], ...]] = (("tensorflow", "tf"), ("onnx", "onnx"))
    cost = 10
    prefetchable = True

    def precheck(self, src: SourceModel, opts: ConvertOptions) -> None:
        """List every op the translator lacks (all at once) before anything is traced."""
        _layout(opts)
        require("tensorflow", "translating ONNX to a SavedModel")
        from fwx.converters.onnx_tf.model import load
        from fwx.converters.onnx_tf.translate import check_supported

        check_supported(load(_source_path(src)))

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        tf = require("tensorflow", "translating ONNX to a SavedModel")
        require("onnx", "translating ONNX to a SavedModel")
        from fwx.converters.onnx_tf.model import load
        from fwx.converters.onnx_tf.translate import translate

        layout = _layout(opts)
        proto = load(_source_path(src))
        static = _static_shapes(src, opts) if opts.static_shapes else None
        with quiet():
            tr = translate(proto, layout=layout, static_shapes=static)
            try:
                tr.save(out, opts.saved_model_signature)
            except FwxError:
                raise
            except Exception as exc:  # noqa: BLE001 - TF save errors of any kind become one message
                raise ExportError(
                    f"writing the SavedModel failed: {first_line(exc)}",
                    hint="check free disk space and that the output folder is writable",
                ) from exc
        notes = [*tr.notes, f"translated in {tr.seconds:.2f}s; {tr.variables} weight tensors stored as variables"]
        if static:
            notes.append("static input shapes: " + ", ".join(f"{k}{list(v)}" for k, v in static.items()))
        extra: dict[str, Any] = {"input_names": {k: v for k, v in tr.input_names.items() if k != v}}
        return ConvertResult(
            path=out,
            signature=_aligned(tr.signature, src.signature, layout == NHWC),
            tool=self.tool,
            tool_version=f"fwx {__version__}; tensorflow {tf.__version__}",
            layout=tr.layout or (NCHW if layout == NCHW else src.layout),
            precision=src.precision,
            notes=notes,
            extra=extra,
        )
