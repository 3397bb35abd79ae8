"""TFLite artifacts on LiteRT (``ai_edge_litert``).

Before the interpreter sees a file, ``check_tflite_file`` checks its size,
the ``TFL3`` identifier and the flatbuffer offsets of the model's tables, so a
truncated or junk file is a one-line ``InputError`` rather than a native crash.

Inputs are resized only when a request's shape differs from the last one
(resize + ``allocate_tensors`` is the expensive part). Quantised int8/uint8
I/O is (de)quantised here with each tensor's scale and zero point, so callers
always pass and receive float arrays where ``signature()`` says float32.
The interpreter is not thread-safe; a lock serialises calls.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from fwx.errors import InputError, UsageError
from fwx.formats import Format
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.runtimes._common import check_device, gather, hint_names
from fwx.runtimes.base import Runtime
from fwx.runtimes.files import check_tflite_file
from fwx.signature import Signature, TensorSpec


@dataclass(frozen=True)
class _IO:
    name: str
    index: int
    dtype: np.dtype
    scale: float
    zero_point: int

    @property
    def quantized(self) -> bool:
        return self.scale != 0.0 and self.dtype.kind in "iu"


def _io(name: str, d: dict[str, Any]) -> _IO:
    q = d.get("quantization_parameters") or {}
    scales, zps = q.get("scales", []), q.get("zero_points", [])
    scale = float(scales[0]) if len(scales) == 1 else 0.0
    zp = int(zps[0]) if len(zps) == 1 else 0
    return _IO(name, int(d["index"]), np.dtype(d["dtype"]), scale, zp)


def _tensor_spec(io: _IO, d: dict[str, Any]) -> TensorSpec:
    shape = d.get("shape_signature")
    if shape is None or len(shape) == 0:
        shape = d["shape"]
    dtype = "float32" if io.quantized else io.dtype.name
    return TensorSpec(io.name, dtype, tuple(-1 if int(s) < 0 else int(s) for s in shape))


def quantize(x: np.ndarray, io: _IO) -> np.ndarray:
    info = np.iinfo(io.dtype)
    q = np.round(x.astype(np.float32) / io.scale) + io.zero_point
    return np.clip(q, info.min, info.max).astype(io.dtype)


def dequantize(q: np.ndarray, io: _IO) -> np.ndarray:
    return ((q.astype(np.float32) - np.float32(io.zero_point)) * np.float32(io.scale)).astype(np.float32)


class TFLiteRuntime(Runtime):
    format = Format.TFLITE

    def _load(self) -> None:
        litert = require("ai_edge_litert.interpreter", "running TFLite models")

        check_device(self.device)
        if self.device.startswith("cuda"):
            self.notes = ["TFLite has no CUDA path in LiteRT's Python API; ran on CPU"]
        else:
            self.notes = []
        assert self.path is not None
        if not self.path.is_file():
            raise InputError(f"{self.path} is not a file", hint="pass a .tflite file")
        check_tflite_file(self.path)
        threads = self.options.get("threads")
        with quiet(python=False, native=True):  # LiteRT prints its XNNPACK banner from C++ on the first allocation
            self._interp = litert.Interpreter(model_path=str(self.path), num_threads=int(threads) if threads else None)
            deferred = self._allocate()
        self._lock = threading.Lock()
        self._first_run = True  # a first run LiteRT cannot prepare is run once at another shape (``_invoke``)
        self._runner: Any = None
        sigs = self._interp.get_signature_list()
        if sigs:
            self._from_signature_runner(sigs)
        else:
            self._from_tensors()
        self._expected = {io.name: np.dtype(np.float32) if io.quantized else io.dtype for io in self._inputs}
        # shapes from the details, not get_tensor: LiteRT segfaults reading a string tensor never set (StringLookup)
        shapes = {int(d["index"]): tuple(int(n) for n in d["shape"]) for d in self._interp.get_input_details()}
        self._shapes = {io.index: () if deferred else shapes.get(io.index, ()) for io in self._inputs}

    def _allocate(self) -> bool:
        """Plan the tensors at the file's own shapes; True when that waits for the first request.

        A dynamic dim is 1 in the file, and some models cannot run at 1 (a strided Conv1D over audio
        from a .pt2 whose length Dim starts at 400): those are planned at the first request's shape.
        """
        try:
            self._interp.allocate_tensors()
        except (RuntimeError, ValueError):
            dynamic = any(-1 in list(d.get("shape_signature", [])) for d in self._interp.get_input_details())
            if not dynamic:
                raise
            return True
        return False

    def _from_signature_runner(self, sigs: dict[str, Any]) -> None:
        wanted = self.options.get("signature_name") or (
            "serving_default" if "serving_default" in sigs else next(iter(sigs))
        )
        if wanted not in sigs:
            raise UsageError(f"{self.path} has no signature {wanted!r}", hint=f"it has: {', '.join(sigs)}")
        runner = self._interp.get_signature_runner(wanted)
        ins, outs = runner.get_input_details(), runner.get_output_details()
        hint = self.signature_hint  # the runner sorts names; keep the pinned order when the names are the same
        if hint is not None and set(hint.input_names) == set(ins):
            ins = {n: ins[n] for n in hint.input_names}
        if hint is not None and set(hint.output_names) == set(outs):
            outs = {n: outs[n] for n in hint.output_names}
        self._inputs = [_io(n, d) for n, d in ins.items()]
        self._outputs = [_io(n, d) for n, d in outs.items()]
        self._sig = Signature(
            tuple(_tensor_spec(io, ins[io.name]) for io in self._inputs),
            tuple(_tensor_spec(io, outs[io.name]) for io in self._outputs),
        )
        if getattr(runner, "_subgraph_index", 0) != 0:
            self._runner = runner  # only subgraph 0 is reachable through the interpreter's own API

    def _from_tensors(self) -> None:
        ins, outs = self._interp.get_input_details(), self._interp.get_output_details()
        hint = self.signature_hint
        in_names = hint_names(hint, len(ins), [d["name"] for d in ins])
        out_names = (
            hint.output_names if hint is not None and len(hint.outputs) == len(outs) else [d["name"] for d in outs]
        )
        self._inputs = [_io(n, d) for n, d in zip(in_names, ins, strict=True)]
        self._outputs = [_io(n, d) for n, d in zip(out_names, outs, strict=True)]
        self._sig = Signature(
            tuple(_tensor_spec(io, d) for io, d in zip(self._inputs, ins, strict=True)),
            tuple(_tensor_spec(io, d) for io, d in zip(self._outputs, outs, strict=True)),
        )

    def signature(self) -> Signature:
        return self._sig

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = gather(inputs, self._expected)
        feed = {io.name: quantize(arrays[io.name], io) if io.quantized else arrays[io.name] for io in self._inputs}
        with self._lock:
            raw = self._runner(**feed) if self._runner is not None else self._invoke(feed)
        return {io.name: dequantize(raw[io.name], io) if io.quantized else raw[io.name] for io in self._outputs}

    def _invoke(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._set(feed)
        try:
            self._interp.invoke()
        except RuntimeError:
            if not self._first_run:
                raise
            # LiteRT cannot prepare a graph whose tensor shapes are only known at run time (a lookup table's
            # output feeding a MEAN) when its very first run has a length-1 dim ("Invalid axis index",
            # "XNNPack delegate failed to reshape"); once it has run at another shape it takes this one too
            self._first_run = False
            self._set({name: np.concatenate([x, x[:1]]) if x.ndim else x for name, x in feed.items()})
            self._interp.invoke()
            self._set(feed)
            self._interp.invoke()
        self._first_run = False
        return {io.name: self._interp.get_tensor(io.index) for io in self._outputs}

    def _set(self, feed: dict[str, np.ndarray]) -> None:
        """Plan the tensors for ``feed``'s shapes where they changed, then set the inputs."""
        interp = self._interp
        changed = [io for io in self._inputs if self._shapes[io.index] != feed[io.name].shape]
        try:
            for io in changed:
                interp.resize_tensor_input(io.index, list(feed[io.name].shape), strict=False)
            if changed:
                interp.allocate_tensors()
            for io in self._inputs:
                interp.set_tensor(io.index, feed[io.name])
        except (ValueError, RuntimeError) as exc:
            for io in changed:
                self._shapes[io.index] = ()  # force a fresh resize on the next call
            raise InputError(
                f"LiteRT rejected the inputs: {litert_message(exc)}", hint=f"the model expects {self._sig}"
            ) from exc
        for io in changed:
            self._shapes[io.index] = feed[io.name].shape

    def close(self) -> None:
        self._interp = None
        self._runner = None

    @property
    def provider(self) -> str:
        return "litert:cpu"

    @property
    def runtime_version(self) -> str:
        import ai_edge_litert

        return f"ai-edge-litert {getattr(ai_edge_litert, '__version__', '')}".strip()


def litert_message(exc: BaseException) -> str:
    """LiteRT's error text made readable: its reporter joins messages without a separator
    ("...XNNPACK runtimeNode number 38 (...) failed to prepare.Node number 38 ..."), often the same one twice."""
    text = " ".join(str(exc).split())
    text = re.sub(r"(?<=[^\s;])(?=Node number \d)", "; ", text)
    text = re.sub(r"\.(?=[A-Z])", "; ", text)
    parts = [p.strip(" .") for p in text.split(";")]
    return "; ".join(dict.fromkeys(p for p in parts if p))[:300] or type(exc).__name__
