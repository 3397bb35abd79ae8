"""The source model as a ``Runtime``: the reference every artifact is compared against.

One builder for ``fwx export`` and ``fwx validate``: an eager PyTorch module or
Keras model is wrapped; a file format (ONNX, SavedModel, TFLite) is loaded by
its own runtime. The caller closes the runtime.
"""

from __future__ import annotations

from pathlib import Path

from fwx.formats import Format
from fwx.runtimes.base import Runtime, load_runtime
from fwx.signature import Signature
from fwx.sources.load import LoadedSource


def source_runtime(
    src: LoadedSource,
    sig: Signature,
    *,
    device: str = "cpu",
    signature_name: str = "serving_default",
    trust_model_code: bool = False,
) -> Runtime:
    """``src`` as a runtime taking ``sig``; SavedModels are read through ``signature_name``."""
    if src.plan_format is Format.PYTORCH:
        from fwx.runtimes.eager_torch import EagerTorchRuntime  # imports torch

        return EagerTorchRuntime.from_module(src.obj, sig, device=device)
    if src.format is Format.KERAS:
        from fwx.runtimes.eager_keras import KerasRuntime  # imports keras

        return KerasRuntime.from_model(src.obj, sig, device=device)
    assert src.path is not None
    kw = {"signature_name": signature_name} if src.format is Format.SAVEDMODEL else {}
    return load_runtime(
        src.format, src.path, device=device, signature_hint=sig, trust_model_code=trust_model_code, **kw
    )


def file_source(fmt: Format, path: Path) -> LoadedSource:
    """A source its format's runtime loads by itself (ONNX, SavedModel, TFLite): nothing to rebuild."""
    return LoadedSource(fmt, fmt, path, f"{fmt} file", "", "")
