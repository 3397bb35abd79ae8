"""What the three PyTorch runtimes (TorchScript, .pt2, eager module) share.

Imported only by those runtimes, so importing torch here is fine. ``infer``
wraps the arrays with ``torch.from_numpy`` (no copy on CPU) and runs under
``torch.inference_mode()`` so no autograd state is built per call.

Threads: torch's intra-op thread count is process-global. These runtimes leave
it alone unless the ``threads=`` option is given, which then calls
``torch.set_num_threads`` for the whole process (document it where you pass it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from fwx.errors import InputError, UsageError
from fwx.runtimes._common import check_device, gather, np_dtypes, output_names
from fwx.runtimes.base import Runtime
from fwx.signature import Signature, TensorSpec


def torch_device(device: str) -> torch.device:
    """The torch device for ``cpu``/``cuda``; ``cuda`` without a GPU is a clear usage error."""
    check_device(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(
            "device cuda was requested but torch sees no CUDA GPU",
            hint="use --device cpu (or auto), or install a CUDA build of torch",
        )
    return torch.device(device)


def flatten_outputs(result: Any) -> tuple[list[torch.Tensor], list[str] | None]:
    """Tensors of a model's return value in order, plus dict keys when it returned a dict."""
    if isinstance(result, torch.Tensor):
        return [result], None
    if isinstance(result, dict):
        tensors: list[torch.Tensor] = []
        for v in result.values():
            tensors.extend(flatten_outputs(v)[0])
        keys = [str(k) for k in result] if len(tensors) == len(result) else None
        return tensors, keys
    if isinstance(result, (tuple, list)):
        out: list[torch.Tensor] = []
        for v in result:
            out.extend(flatten_outputs(v)[0])
        return out, None
    raise InputError(
        f"the model returned {type(result).__name__}, not tensors",
        hint="export a model whose forward returns a tensor, a tuple or a dict of tensors",
    )


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()


def torch_dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class TorchRuntimeBase(Runtime):
    """Runs a callable torch module with positional tensor inputs, named by the signature."""

    _module: Callable[..., Any]
    _sig: Signature
    _torch_device: torch.device

    def _setup_device(self) -> None:
        self._torch_device = torch_device(self.device)
        threads = self.options.get("threads")
        if threads:
            torch.set_num_threads(int(threads))

    def _finish(self, sig: Signature) -> None:
        self._sig = sig
        self._dtypes = np_dtypes(sig.inputs)
        self._names: list[str] | None = sig.output_names or None

    def signature(self) -> Signature:
        return self._sig

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = gather(inputs, self._dtypes)
        dev = self._torch_device
        args = []
        for arr in arrays.values():
            if not arr.flags.writeable:
                arr = arr.copy()  # torch.from_numpy warns on read-only buffers
            t = torch.from_numpy(arr)
            args.append(t if dev.type == "cpu" else t.to(dev, non_blocking=True))
        with torch.inference_mode():
            result = self._module(*args)
        tensors, keys = flatten_outputs(result)
        names = (
            self._names
            if self._names and len(self._names) == len(tensors)
            else output_names(self.signature_hint, len(tensors), keys)
        )
        return {n: to_numpy(t) for n, t in zip(names, tensors, strict=True)}

    @property
    def provider(self) -> str:
        return f"torch:{self._torch_device}"

    @property
    def runtime_version(self) -> str:
        return f"torch {torch.__version__}"


def unknown_inputs(names: Sequence[str]) -> tuple[TensorSpec, ...]:
    """Placeholder specs when neither the artifact nor a hint says dtype/shape."""
    return tuple(TensorSpec(n, "float32", ()) for n in names)
