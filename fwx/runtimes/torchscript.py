"""TorchScript (``torch.jit``) artifacts.

Trust rule: TorchScript is code, so loading one from an unknown source is like
running a script. This runtime accepts ``trust_model_code`` but does not gate
on it: the validators and the server load a TorchScript file only after its
sha256 matched the checksummed ``fwx.json`` that fwx itself wrote, i.e. it is
an artifact fwx produced. ``fwx inspect`` never calls ``torch.jit.load``.

TorchScript stores no input/output names, dtypes or shapes we can rely on, so
``signature()`` takes them from ``signature_hint`` (the pinned signature in
fwx.json); without a hint, input names come from ``forward``'s parameters and
dtypes/shapes are unknown (float32, rank 0 placeholders).
"""

from __future__ import annotations

import torch

from fwx.errors import InputError
from fwx.formats import Format
from fwx.runtimes._common import hint_names
from fwx.runtimes._torch import TorchRuntimeBase, unknown_inputs
from fwx.signature import Signature, TensorSpec


class TorchScriptRuntime(TorchRuntimeBase):
    format = Format.TORCHSCRIPT

    def _load(self) -> None:
        self._setup_device()
        assert self.path is not None
        if not self.path.is_file():
            raise InputError(f"{self.path} is not a file", hint="pass a TorchScript .pt file")
        from fwx.safety.zipbounds import hold_zip_file

        hold_zip_file(self.path)  # torch's zip reader trusts the sizes an archive declares, trusted code or not
        module = torch.jit.load(str(self.path), map_location=self._torch_device)
        module.eval()
        self._module = module
        params = [a.name for a in module.forward.schema.arguments[1:]]
        self._finish(self._read_signature(params))

    def _read_signature(self, params: list[str]) -> Signature:
        hint = self.signature_hint
        if hint is not None and len(hint.inputs) == len(params):
            return hint
        names = hint_names(hint, len(params), params)
        outputs: tuple[TensorSpec, ...] = hint.outputs if hint is not None else ()
        return Signature(unknown_inputs(names), outputs)
