"""What the TensorFlow-backed runtimes (SavedModel, Keras) share: device placement and specs."""

from __future__ import annotations

from typing import Any

from fwx.errors import UsageError
from fwx.frameworks import require
from fwx.runtimes._common import check_device
from fwx.signature import TensorSpec


def tf_device(device: str) -> str:
    """The TF device string for ``cpu``/``cuda[:N]``; ``cuda`` without a visible GPU is a usage error."""
    tf = require("tensorflow", "running TensorFlow models")  # quiet: no CUDA-driver banners

    check_device(device)
    if not device.startswith("cuda"):
        return "/CPU:0"
    if not tf.config.list_physical_devices("GPU"):
        raise UsageError(
            "device cuda was requested but TensorFlow sees no GPU",
            hint="use --device cpu (or auto), or install a CUDA build of tensorflow",
        )
    index = device.split(":", 1)[1] if ":" in device else "0"
    return f"/GPU:{index}"


def spec_from_tf(name: str, spec: Any) -> TensorSpec:
    """A ``TensorSpec`` from a ``tf.TensorSpec``/KerasTensor (None dims become -1)."""
    dtype = getattr(spec.dtype, "name", spec.dtype)
    shape = spec.shape
    dims: tuple[int, ...] = ()
    if shape is not None and getattr(shape, "rank", len(tuple(shape))) is not None:
        dims = tuple(-1 if d is None else int(d) for d in (shape.as_list() if hasattr(shape, "as_list") else shape))
    return TensorSpec(name, "bytes" if dtype == "string" else str(dtype), dims)
