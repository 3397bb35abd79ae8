"""An in-memory ``torch.nn.Module`` as a reference runtime (``Format.PYTORCH``).

Eager sources have no file format fwx can load safely on its own: a state dict
needs the model's class, and a pickled module runs code when unpickled. So the
usual entry is ``EagerTorchRuntime.from_module(module, signature)`` with a
module the caller built (the exporter's loaders do that). ``load(path)`` is
offered only for a whole pickled module and only with ``trust_model_code``.
"""

from __future__ import annotations

from typing import Any

import torch

from fwx.errors import InputError, UnsafeModelError
from fwx.formats import Format
from fwx.runtimes._torch import TorchRuntimeBase
from fwx.signature import Signature


class EagerTorchRuntime(TorchRuntimeBase):
    format = Format.PYTORCH

    @classmethod
    def from_module(
        cls, module: torch.nn.Module, signature: Signature, *, device: str = "cpu", **options: Any
    ) -> EagerTorchRuntime:
        """Wrap a module the caller already built.

        ``module.to(device)`` and ``.eval()`` act in place (no copy of the weights), so on ``cuda``
        the caller's module moves to the GPU too.
        """
        rt = cls(None, device=device, signature_hint=signature, **options)
        rt._setup_device()
        rt._module = module.to(rt._torch_device).eval()
        rt._finish(signature)
        return rt

    def _weights_only(self) -> bool:
        """True when the file is plain tensors (a state_dict/checkpoint): safe to read, but no model."""
        try:
            obj = torch.load(str(self.path), map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 - anything unreadable this way is not a weights-only file
            return False
        return not isinstance(obj, torch.nn.Module)

    def _load(self) -> None:
        if not self.trust_model_code and self._weights_only():
            raise InputError(
                f"{self.path} holds only weights (a state_dict), not a model to run",
                hint="pass --model-class pkg.mod:Class that rebuilds it",
            )
        if not self.trust_model_code:
            raise UnsafeModelError(
                f"loading {self.path} as a pickled PyTorch module would run code from it",
                hint="pass --trust-model-code if you trust it, or give the model class",
            )
        if self.signature_hint is None:
            raise InputError("an eager PyTorch source needs the pinned signature", hint="pass signature_hint")
        self._setup_device()
        obj = torch.load(str(self.path), map_location=self._torch_device, weights_only=False)
        if not isinstance(obj, torch.nn.Module):
            raise InputError(
                f"{self.path} holds a {type(obj).__name__}, not a whole nn.Module",
                hint="load the state dict into its model class and use from_module",
            )
        self._module = obj.eval()
        self._finish(self.signature_hint)
