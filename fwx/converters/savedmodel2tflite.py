"""SavedModel -> TFLite (float32) with ``TFLiteConverter``, checked on one sample before it is kept.

``from_saved_model`` writes a model that returns NaN for a ``tf.Module`` that
wraps a Keras 3 model (TF 2.21), while ``from_concrete_functions`` on the same
loaded signature is right. So the signature's concrete function is converted
first and ``from_saved_model`` is the fallback; each result is run once on a
sample and compared with the SavedModel, and one that disagrees (NaN, wrong
numbers, other names) gives way to the next. Both keep the signature's input
and output names in the signature runner and dynamic dims as
``shape_signature`` -1. ``--static-shapes`` converts a wrapper function with
fixed input shapes.

Ops TFLite lacks are read from the converter's message ("TF Select ops: ...",
"Custom ops: ...") into one ``UnsupportedOpsError``; MLIR's dumps stay off the
terminal unless ``--debug``. Quantisation (``--quantize``) is delegated to
``fwx.quantize.tflite.convert_quantized``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fwx.converters._tf import signature_fn, tf_function
from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.errors import ExportError, UnsupportedOpsError, first_line
from fwx.formats import Format
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.signature import Signature, hop_signature
from fwx.sources.samples import make_feeds

_OP_LISTS = re.compile(r"^\s*(?:TF Select ops|Custom ops|Flex ops):\s*(.+)$", re.MULTILINE)
_OP_ERRORS = re.compile(r"'tf\.(\w+)' op is neither a custom op nor a flex op")


def unsupported_ops(text: str) -> list[str]:
    """Every op a TFLite converter message says the builtins lack (empty when it names none)."""
    ops = {op.strip() for line in _OP_LISTS.findall(text) for op in line.split(",") if op.strip()}
    ops.update(_OP_ERRORS.findall(text))
    return sorted(ops)


def mlir_error(exc: BaseException) -> str:
    """The message of the converter's first MLIR diagnostic without its location prefix.

    ``error: loc(callsite(fused["TensorListReserve:", "functional_1/gru_1/..."] at ...)): 'tf.TensorListReserve'
    op requires element_shape to be static ...``: the location alone fills a terminal line, so a one-line
    error cut to 300 characters said nothing. The exception's first line when it holds no diagnostic.
    """
    text = str(exc)
    start = text.find("error: ")
    if start < 0:
        return first_line(exc)
    rest = text[start + len("error: ") :]
    if rest.startswith("loc("):
        depth = 0
        for i, ch in enumerate(rest):
            depth += (ch == "(") - (ch == ")")
            if depth == 0 and ch == ")":
                rest = rest[i + 1 :].lstrip(": ")
                break
    return rest.strip().splitlines()[0][:300] if rest.strip() else first_line(exc)


def _failure_hint(message: str) -> str:
    if "TensorList" in message:  # Keras RNNs with a mask or a loop TFLite cannot fold into its fused ops
        return "TFLite needs this loop's sizes fixed: retry with --static-shapes (batch 1), or serve the SavedModel"
    return "rerun with --debug for the converter's log"


def convert_flat(make: Callable[[], Any]) -> bytes:
    """Run one ``TFLiteConverter``; unsupported ops become ``UnsupportedOpsError`` listing all of them."""
    try:
        with quiet(native=True) as log:
            flat: bytes = make().convert()
        return flat
    except Exception as exc:  # noqa: BLE001 - ConverterError lists the ops TFLite lacks
        ops = unsupported_ops(f"{exc}\n{log.getvalue()}")
        if ops:
            raise UnsupportedOpsError(
                "TFLite builtins",
                ops,
                hint="TFLite has no kernel for them; rewrite those ops, or export to savedmodel/onnx instead",
            ) from exc
        message = mlir_error(exc)
        raise ExportError(f"TFLite conversion failed: {message}", hint=_failure_hint(message)) from exc


class SavedModelToTFLite(Converter):
    source = Format.SAVEDMODEL
    target = Format.TFLITE
    tool = "tf.lite.TFLiteConverter"
    honours = frozenset({"dynamic", "quantize", "static_shapes"})
    requires = (("tensorflow", "tf"), ("ai_edge_litert", "tflite"))
    cost = 10
    prefetchable = True

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        tf = require("tensorflow", "converting to TFLite")
        assert src.path is not None
        if opts.quantize:
            return self._quantized(src, out, opts)
        sig = hop_signature(src.signature, opts.static_shapes, src.sample_inputs)
        with quiet(native=True):
            loaded = tf.saved_model.load(str(src.path))
            fn = _concrete(tf, loaded, sig, opts.saved_model_signature, static=sig != src.signature)
        tries: list[tuple[str, Callable[[], Any]]] = [
            ("from_concrete_functions", lambda: tf.lite.TFLiteConverter.from_concrete_functions([fn], loaded))
        ]
        if sig == src.signature:
            tries.append(
                (
                    "from_saved_model",
                    lambda: tf.lite.TFLiteConverter.from_saved_model(
                        str(src.path), signature_keys=[opts.saved_model_signature]
                    ),
                )
            )
        try:
            flat, notes = _first_good(tries, fn, sig)
        except UnsupportedOpsError as exc:
            if any(s.dtype in ("float16", "bfloat16") for s in (*sig.inputs, *sig.outputs)):
                raise UnsupportedOpsError(
                    "TFLite builtins on half-precision tensors",
                    exc.ops,
                    hint="TFLite computes in float32 (or int8): export the float32 model and pass --quantize fp16 "
                    "to store its weights in half precision",
                ) from exc
            raise _lookup_reason(fn, exc) from exc
        out.write_bytes(flat)
        return ConvertResult(out, sig, tool=self.tool, tool_version=tf.__version__, layout=src.layout, notes=notes)

    def _quantized(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        from fwx.quantize.tflite import convert_quantized

        assert src.path is not None
        assert opts.quant is not None
        with quiet():
            info = convert_quantized(src.path, out, src.signature, opts.quant, key=opts.saved_model_signature)
        return ConvertResult(
            out,
            src.signature,
            tool=info.tool,
            tool_version=info.tool_version,
            layout=src.layout,
            precision=info.precision,
            extra={"quantization": info.to_json(), "warnings": list(info.warnings)},
        )


def _lookup_reason(fn: Any, exc: UnsupportedOpsError) -> ExportError:
    """Name the lookup layer when a hash table stops TFLite: its builtin tables hold string <-> int64 only."""
    if "LookupTableFindV2" not in exc.ops:
        return exc
    from fwx.sources.lookup_tables import captured_tables

    try:
        tables = [t for t in captured_tables(fn) if not (t.strings and t.values.dtype == np.int64)]
    except Exception:  # noqa: BLE001 - the ops list still says what stops it
        return exc
    if not tables:
        return exc
    t = tables[0]
    return ExportError(
        f"{t.label()}: TFLite's builtin hash tables map strings to int64 only, not {t.keys.dtype} -> {t.values.dtype}",
        hint="an IntegerLookup alone reaches TFLite through ONNX; export this model to savedmodel or onnx",
    )


def _concrete(tf: Any, loaded: Any, sig: Signature, key: str, *, static: bool) -> Any:
    """The signature's concrete function; with fixed shapes, a wrapper traced at them."""

    if key not in loaded.signatures:
        raise ExportError(f"the SavedModel has no signature {key!r}", hint=f"it has: {', '.join(loaded.signatures)}")
    if not static:
        return loaded.signatures[key]
    return tf_function(signature_fn(loaded, sig, key), sig).get_concrete_function()


def _first_good(tries: list[tuple[str, Callable[[], Any]]], fn: Any, sig: Signature) -> tuple[bytes, list[str]]:
    """The first conversion that agrees with the SavedModel on a sample; else the first one made."""
    notes: list[str] = []
    made: list[bytes] = []
    for i, (how, make) in enumerate(tries):
        try:
            flat = convert_flat(make)
        except UnsupportedOpsError:
            raise  # every converter lacks the same kernels
        except ExportError as exc:
            if i == len(tries) - 1 and not made:
                raise
            notes.append(f"TFLiteConverter.{how} failed: {exc.message}")
            continue
        made.append(flat)
        problem = self_check(flat, fn, sig)
        if problem is None:
            return flat, [*notes, f"converted with TFLiteConverter.{how}"]
        notes.append(f"TFLiteConverter.{how} gave a model that {problem}")
    return made[0], notes


def self_check(flat: bytes, fn: Any, sig: Signature) -> str | None:
    """Why the TFLite model disagrees with the SavedModel function on one sample, or None."""

    litert = require("ai_edge_litert.interpreter", "checking TFLite models")
    tf = require("tensorflow", "checking TFLite models")
    feeds = make_feeds(sig.inputs, {})
    try:
        with quiet(native=True):
            runner = litert.Interpreter(model_content=flat).get_signature_runner()
            got = runner(**feeds)
            want = _call(tf, fn, feeds, sig)
    except Exception as exc:  # noqa: BLE001 - a model that cannot run here is for the validator to judge
        return f"did not run on a sample ({first_line(exc, 160)})"
    for name in sig.output_names:
        if name not in got or name not in want:
            return f"has outputs {sorted(got)}, the SavedModel {sorted(want)}"
        a, b = np.asarray(got[name]), np.asarray(want[name])
        if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":  # strings (a lookup's invert=True): equal or not
            if a.shape != b.shape or a.astype(bytes).tolist() != b.astype(bytes).tolist():
                return f"returns other strings for {name!r}"
            continue
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-2, atol=1e-3, equal_nan=True):
            return f"returns other numbers for {name!r} ({'NaN' if np.isnan(a).any() else 'max diff'})"
    return None


def _call(tf: Any, fn: Any, feeds: dict[str, np.ndarray], sig: Signature) -> Any:
    """Call a concrete function by its keyword names (a signature) or positionally (a traced wrapper)."""
    kw_specs = dict(fn.structured_input_signature[1])
    if not kw_specs:
        return fn(*[tf.constant(feeds[n]) for n in sig.input_names])
    by_name = {(getattr(spec, "name", None) or key): key for key, spec in kw_specs.items()}
    return fn(**{by_name.get(n, n): tf.constant(v) for n, v in feeds.items()})
