"""Tracer for an eager PyTorch module: every submodule's output, through forward hooks.

Hooks fire when a module returns, so children come before their parents, in
the order the forward pass ran them. A module's qualified name
(``layer1.0.conv1``) is the scope torch.onnx writes into node names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fwx.runtimes.base import Runtime
from fwx.validators.locate_match import Probe
from fwx.validators.tracers import Trace


class TorchTracer:
    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._module: Any = getattr(rt, "_module")  # noqa: B009 - the runtime's module, not public API

    def trace(self, feed: dict[str, np.ndarray]) -> Trace:
        out: Trace = []
        seen: dict[str, int] = {}

        def hook(name: str, kind: str) -> Any:
            def record(_mod: Any, _inputs: Any, result: Any) -> None:
                if isinstance(result, torch.Tensor) and result.dtype.is_floating_point:
                    seen[name] = seen.get(name, 0) + 1
                    key = name if seen[name] == 1 else f"{name}#{seen[name]}"  # a module called again
                    value = result.detach().float().cpu().numpy()
                    out.append((Probe(key, key, kind, f"module {name}"), value))

            return record

        handles = [
            m.register_forward_hook(hook(name, type(m).__name__)) for name, m in self._module.named_modules() if name
        ]
        try:
            self._rt.infer(feed)
        finally:
            for h in handles:
                h.remove()
        return out
