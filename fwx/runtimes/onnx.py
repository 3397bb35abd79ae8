"""ONNX artifacts on onnxruntime.

The execution provider follows device and precision: on ``cuda`` a float model
gets the CUDA EP (CPU EP as fallback for unsupported nodes); an INT8 QDQ or
integer-op model does not run on the CUDA EP, so it gets TensorRT when that EP
is present and the CPU EP otherwise. ``provider`` says which EP actually ran,
and ``notes`` why it was picked. Input/output names are cached at load and
``run`` is called with the output names, so a call costs one dict build.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np

from fwx.errors import InputError, MissingDependencyError, first_line
from fwx.formats import Format
from fwx.runtimes._common import check_device, dynamic_dim, gather, np_dtypes
from fwx.runtimes.base import Runtime
from fwx.runtimes.files import load_onnx
from fwx.signature import Signature, TensorSpec

#: onnxruntime type strings -> canonical dtype names.
ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(bfloat16)": "bfloat16",
    "tensor(int8)": "int8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
    "tensor(string)": "bytes",
}
#: Ops that mark a quantised graph the CUDA EP cannot run as intended.
QUANT_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
        "MatMulInteger",
        "ConvInteger",
        "DynamicQuantizeLinear",
        "QLinearAdd",
        "QLinearMul",
    }
)


def is_quantized(path: str) -> bool:
    """True when the graph holds QDQ/integer ops (reads the proto only, no external data)."""
    if importlib.util.find_spec("onnx") is None:
        return False
    model = load_onnx(path)
    return any(n.op_type in QUANT_OPS for n in model.graph.node)


def _spec(arg: Any) -> TensorSpec:
    dims = tuple(dynamic_dim(d) for d in arg.shape or ())
    return TensorSpec(arg.name, ORT_TYPES.get(arg.type, "float32"), dims)


class OnnxRuntime(Runtime):
    format = Format.ONNX

    def _load(self) -> None:
        import onnxruntime as ort

        check_device(self.device)
        assert self.path is not None
        if not self.path.is_file():
            raise InputError(f"{self.path} is not a file", hint="pass an .onnx file")
        self.notes: list[str] = []
        so = ort.SessionOptions()
        so.log_severity_level = 3
        # Idle intra-op threads spin by default: measured 107 -> 45 us CPU per batch-1 call on a small
        # CNN with spinning off, and the server's own threads need that CPU. ``spin=True`` restores it.
        if not self.options.get("spin"):
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # FWX_THREADS: the per-process budget ``fwx serve --workers N`` gives each worker (cores / N).
        threads = self.options.get("threads") or os.environ.get("FWX_THREADS")
        if threads:
            so.intra_op_num_threads = int(threads)
        providers = self._providers(ort.get_available_providers())
        self._session = ort.InferenceSession(str(self.path), sess_options=so, providers=providers)
        self._sig = Signature(
            tuple(_spec(a) for a in self._session.get_inputs()), tuple(_spec(a) for a in self._session.get_outputs())
        )
        self._dtypes = np_dtypes(self._sig.inputs)
        self._out_names = self._sig.output_names
        # onnxruntime str()s bytes objects ("b'hi'"): string tensors go in as str, come out as bytes.
        self._str_in = [s.name for s in self._sig.inputs if s.dtype == "bytes"]
        self._str_out = [s.name for s in self._sig.outputs if s.dtype == "bytes"]
        self._invalid = _invalid_argument_type()

    def _providers(self, available: list[str]) -> list[Any]:
        """EPs for this device and precision, most preferred first."""
        if not self.device.startswith("cuda"):
            return ["CPUExecutionProvider"]
        device_id = int(self.device.split(":", 1)[1]) if ":" in self.device else 0
        quantized = self.options.get("precision") == "int8" or is_quantized(str(self.path))
        if quantized:
            if "TensorrtExecutionProvider" in available:
                self.notes.append("INT8 QDQ model on cuda: TensorRT EP")
                return [
                    ("TensorrtExecutionProvider", {"device_id": device_id, "trt_int8_enable": True}),
                    "CPUExecutionProvider",
                ]
            self.notes.append("INT8 QDQ model: the CUDA EP cannot run it, so the CPU EP ran it")
            return ["CPUExecutionProvider"]
        if "CUDAExecutionProvider" not in available:
            raise MissingDependencyError("onnxruntime-gpu", "gpu", "running ONNX models on cuda")
        return [("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"]

    def signature(self) -> Signature:
        return self._sig

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = gather(inputs, self._dtypes)
        for name in self._str_in:
            feed[name] = _to_str(name, feed[name])
        try:
            outs = self._session.run(self._out_names, feed)
        except self._invalid as exc:
            raise InputError(
                f"onnxruntime rejected the inputs: {first_line(exc)}", hint=f"the model expects {self._sig}"
            ) from exc
        result = dict(zip(self._out_names, outs, strict=True))
        for name in self._str_out:
            result[name] = _to_bytes(result[name])
        return result

    def close(self) -> None:
        self._session = None

    @property
    def provider(self) -> str:
        return str(self._session.get_providers()[0]) if self._session is not None else "closed"

    @property
    def runtime_version(self) -> str:
        import onnxruntime as ort

        return f"onnxruntime {ort.__version__}"


def _to_str(name: str, arr: np.ndarray) -> np.ndarray:
    """bytes -> str for onnxruntime, whose Python API takes string tensors as UTF-8 text only.

    (Its fixed-width ``S`` input path misreads elements and its outputs are decoded strictly,
    so bytes that are not UTF-8 cannot cross it: say so as a 400, not a 500 about surrogates.)
    """
    flat = []
    for i, v in enumerate(arr.reshape(-1)):
        if not isinstance(v, bytes):
            flat.append(str(v))
            continue
        try:
            flat.append(v.decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(
                f"input {name!r} element {i} is not UTF-8 text; onnxruntime string tensors take UTF-8 only",
                hint="serve a SavedModel or TFLite export of this model for arbitrary bytes, or base64-encode them",
            ) from None
    return np.array(flat, dtype=object).reshape(arr.shape)


def _to_bytes(arr: np.ndarray) -> np.ndarray:
    flat = [v.encode("utf-8", "surrogateescape") if isinstance(v, str) else bytes(v) for v in arr.reshape(-1)]
    return np.array(flat, dtype=object).reshape(arr.shape)


def _invalid_argument_type() -> type[Exception]:
    try:
        from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument
    except ImportError:  # pragma: no cover - layout of onnxruntime internals changed
        return ValueError
    return InvalidArgument  # type: ignore[no-any-return]
