"""Importing frameworks: one error naming the fwx extra when one is missing, and quietly.

TensorFlow, tf2onnx, LiteRT and the torch ONNX exporter log at import time;
``require`` imports inside ``fwx.quiet.quiet`` (the one mechanism that keeps
framework output off the terminal). Shared by the exporter, the converters,
the runtimes and ``fwx.quantize``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import threading
from types import ModuleType

from fwx.errors import MissingDependencyError
from fwx.quiet import quiet, set_environment

#: import name -> (pip distribution, fwx extra)
EXTRAS: dict[str, tuple[str, str]] = {
    "torch": ("torch", "torch"),
    "tensorflow": ("tensorflow", "tf"),
    "keras": ("keras", "tf"),
    "tf2onnx": ("tf2onnx", "tf"),
    "onnx": ("onnx", "onnx"),
    "onnxruntime": ("onnxruntime", "onnx"),
    "onnxscript": ("onnxscript", "onnx"),
    "ai_edge_litert": ("ai-edge-litert", "tflite"),
    "h5py": ("h5py", "tf"),
    "transformers": ("transformers", "hf"),
    "safetensors": ("safetensors", "hf"),
}


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise ``MissingDependencyError`` naming the fwx extra that installs it."""
    is_tf = module.split(".")[0] in ("tensorflow", "keras", "tf2onnx")
    if is_tf:
        set_environment()
    dist, extra = EXTRAS.get(module.split(".")[0], (module, "all"))
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise MissingDependencyError(dist, extra, purpose)
    mod = sys.modules.get(module)
    # A module another thread is still importing sits in sys.modules half-initialised (the server
    # loads two models at once); only a finished one may skip the import lock.
    if mod is not None and not getattr(getattr(mod, "__spec__", None), "_initializing", False):
        return mod
    with _IMPORT_LOCK, quiet(native=is_tf):
        mod = importlib.import_module(module)
    return mod


# One framework import at a time: two threads importing onnx and onnxruntime (which imports onnx)
# can trip the import system's deadlock detection and get a partially initialised module.
_IMPORT_LOCK = threading.RLock()


def version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""
