"""The one interface every model format runs behind.

Validators and the server both go through ``load_runtime``: there is exactly
one place that knows how to load and run each format. Registration is lazy
(module path + class name), so importing this module imports no framework.
"""

from __future__ import annotations

import importlib
import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fwx.errors import FwxError, InputError, MissingDependencyError, UsageError, first_line
from fwx.formats import Format
from fwx.signature import Signature, concrete_shape


class Runtime(ABC):
    """A loaded model that maps named numpy arrays to named numpy arrays."""

    format: ClassVar[Format]
    #: True when the runtime can run any size along the dynamic batch axis
    #: (TFLite needs a resize first, which the runtime does itself).
    batchable: ClassVar[bool] = True

    def __init__(
        self,
        path: Path | None,
        *,
        device: str = "cpu",
        trust_model_code: bool = False,
        signature_hint: Signature | None = None,
        **options: Any,
    ) -> None:
        self.path = path
        self.device = device
        self.trust_model_code = trust_model_code
        self.signature_hint = signature_hint
        self.options = options

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str = "cpu",
        trust_model_code: bool = False,
        signature_hint: Signature | None = None,
        **options: Any,
    ) -> Runtime:
        """Load ``path`` on ``device`` ("cpu" or "cuda").

        ``signature_hint`` carries the pinned names when the format cannot store
        them (TorchScript keeps no input names, for example).
        """
        from fwx.safety import check_model  # read the file as data first: refuse I/O ops, custom ops

        check_model(cls.format, path, trust=trust_model_code)
        rt = cls(Path(path), device=device, trust_model_code=trust_model_code, signature_hint=signature_hint, **options)
        rt._load()
        return rt

    @abstractmethod
    def _load(self) -> None: ...

    @abstractmethod
    def signature(self) -> Signature:
        """The signature as the artifact itself declares it (read back, not assumed)."""

    @abstractmethod
    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once. Keys and values follow ``signature()``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release sessions/interpreters; the default does nothing."""

    @property
    def provider(self) -> str:
        """What actually ran the model (e.g. ``CUDAExecutionProvider``), for reports."""
        return self.device

    @property
    def runtime_version(self) -> str:
        return ""

    def native_names(self) -> dict[str, str]:
        """The artifact's own name of each tensor whose name its format had to change (SavedModel's
        signature keys are Python identifiers: ``past_key_values.0.key`` is ``past_key_values_0_key``)."""
        return {}

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class RuntimeEntry:
    module: str
    cls: str
    package: str  # the importable module that must be present
    extra: str  # pip extra that installs it


_REGISTRY: dict[Format, RuntimeEntry] = {}


def register_runtime(fmt: Format, entry: RuntimeEntry) -> None:
    if fmt in _REGISTRY:
        raise ValueError(f"a runtime for {fmt} is already registered")
    _REGISTRY[fmt] = entry


def runtime_entry(fmt: Format) -> RuntimeEntry:
    try:
        return _REGISTRY[fmt]
    except KeyError:
        raise UsageError(f"fwx has no runtime for {fmt}") from None


def available_runtimes() -> list[Format]:
    return [f for f, e in _REGISTRY.items() if importlib.util.find_spec(e.package) is not None]


def runtime_class(fmt: Format) -> type[Runtime]:
    entry = runtime_entry(fmt)
    if importlib.util.find_spec(entry.package) is None:
        raise MissingDependencyError(entry.package, entry.extra, f"running {fmt} models")
    module = importlib.import_module(entry.module)
    cls: type[Runtime] = getattr(module, entry.cls)
    return cls


def load_runtime(fmt: Format, path: str | Path, *, device: str = "cpu", **kw: Any) -> Runtime:
    """Load an artifact with its format's runtime; framework errors become one-line ``InputError``s."""
    cls = runtime_class(fmt)
    try:
        return cls.load(path, device=device, **kw)
    except FwxError:
        raise
    except Exception as exc:  # noqa: BLE001 - native loaders raise anything; the user needs one line
        raise InputError(
            f"cannot load {path} as {fmt}: {first_line(exc)}", hint="the file may be truncated or corrupt; re-export it"
        ) from exc


# Lazy registrations: nothing here imports a framework.
register_runtime(Format.ONNX, RuntimeEntry("fwx.runtimes.onnx", "OnnxRuntime", "onnxruntime", "onnx"))
register_runtime(Format.TFLITE, RuntimeEntry("fwx.runtimes.tflite", "TFLiteRuntime", "ai_edge_litert", "tflite"))
register_runtime(Format.SAVEDMODEL, RuntimeEntry("fwx.runtimes.savedmodel", "SavedModelRuntime", "tensorflow", "tf"))
register_runtime(Format.TORCHSCRIPT, RuntimeEntry("fwx.runtimes.torchscript", "TorchScriptRuntime", "torch", "torch"))
register_runtime(Format.PT2, RuntimeEntry("fwx.runtimes.pt2", "ExportedProgramRuntime", "torch", "torch"))
register_runtime(Format.PYTORCH, RuntimeEntry("fwx.runtimes.eager_torch", "EagerTorchRuntime", "torch", "torch"))
register_runtime(Format.KERAS, RuntimeEntry("fwx.runtimes.eager_keras", "KerasRuntime", "keras", "tf"))


def warmup_inputs(sig: Signature, batch: int = 1, sizes: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Zeros shaped like the signature with every dynamic dim = ``batch`` (zeros are valid ids too),
    or its size in ``sizes`` (a dim the model admits only some sizes of: ``Manifest.warmup_sizes``)."""
    out: dict[str, np.ndarray] = {}
    for spec in sig.inputs:
        shape = concrete_shape(spec, sizes, default=batch)
        if spec.dtype == "bytes":
            out[spec.name] = np.full(shape, b"", dtype=object)
        elif spec.dtype == "bfloat16":
            out[spec.name] = np.zeros(shape, dtype=np.float32)
        else:
            out[spec.name] = np.zeros(shape, dtype=np.dtype(spec.dtype))
    return out


def warmup(runtime: Runtime, sig: Signature, sizes: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Run one batch-1 inference, check every declared output came back, and return the outputs."""
    try:
        outputs = runtime.infer(warmup_inputs(sig, sizes=sizes))
    except FwxError:
        raise
    except Exception as exc:  # noqa: BLE001 - native runtimes raise anything
        raise InputError(
            f"warm-up inference failed: {first_line(exc)}",
            hint="the artifact does not run on the inputs its signature declares; re-export it",
        ) from exc
    missing = [n for n in sig.output_names if n not in outputs]
    if missing:
        raise InputError(
            f"warm-up inference did not return output(s) {', '.join(missing)}",
            hint="the artifact's outputs differ from fwx.json; re-export it",
        )
    return outputs
