"""PyTorch -> TorchScript: ``torch.jit.script`` first, ``torch.jit.trace`` as the fallback.

``--torchscript-mode auto`` scripts (keeps control flow) and falls back to
tracing with a one-line note saying why. A trace records sizes as constants
(a ``.pt2`` program's ``x[: ids.shape[1]]`` becomes a fixed slice), so a traced
module is run at other sizes of every dynamic symbol and refused (the planner
tries the next path) unless it matches the eager model there.
``torch.jit.trace`` is deprecated in torch 2.13 (DeprecationWarning): the
warning is suppressed and recorded in the artifact's notes instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fwx.converters import _torch as tc
from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.errors import ExportError, UsageError, first_line
from fwx.formats import Format
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.signature import hop_signature

MODES = ("auto", "script", "trace")


class TorchToTorchScript(Converter):
    source = Format.PYTORCH
    target = Format.TORCHSCRIPT
    tool = "torch.jit"
    honours = frozenset({"dynamic", "static_shapes"})  # TorchScript declares no shapes: the pin is the record
    requires = (("torch", "torch"),)
    cost = 5

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        torch = require("torch", "exporting to TorchScript")
        mode = opts.torchscript_mode
        if mode not in MODES:
            raise UsageError(f"unknown --torchscript-mode {mode!r}", hint="use auto, script or trace")
        notes: list[str] = []
        warnings: list[str] = []
        module, how = None, mode
        if mode == "auto" and getattr(src.obj, "fwx_trace_only", False):
            notes.append("a torch.export program cannot be scripted; traced")
        elif mode in ("auto", "script"):
            try:
                with quiet():
                    module = torch.jit.script(src.obj)
                how = "script"
            except Exception as exc:  # noqa: BLE001 - scripting rejects many Python constructs
                if mode == "script":
                    raise ExportError(
                        f"torch.jit.script failed: {first_line(exc)}", hint="use --torchscript-mode trace (or auto)"
                    ) from exc
                warnings.append(f"torch.jit.script failed ({first_line(exc, 160)}); traced instead")
        if module is None:
            module, how = self._trace(src, opts), "trace"
            notes.append("torch.jit.trace is deprecated in torch>=2.13; its warning was suppressed")
        with quiet():
            torch.jit.save(module, str(out))
        return ConvertResult(
            out,
            hop_signature(src.signature, opts.static_shapes, src.sample_inputs),
            tool=f"torch.jit.{how}",
            tool_version=torch.__version__,
            layout=src.layout,
            notes=warnings + notes,
            extra={"torchscript_mode": how, "warnings": warnings},
        )

    def _trace(self, src: SourceModel, opts: ConvertOptions) -> Any:
        torch = require("torch", "exporting to TorchScript")
        args = tc.tensors(src.sample_inputs, src.signature)
        wrapped = tc.wrap(src.obj, src.signature)
        try:
            with tc.export_mode():
                traced = torch.jit.trace(wrapped, args, check_trace=False, strict=False)
        except Exception as exc:  # noqa: BLE001
            raise ExportError(
                f"torch.jit.trace failed: {first_line(exc)}",
                hint="check that the model runs on the pinned --input shapes",
            ) from exc
        if not opts.static_shapes:
            problem = tc.baked_sizes(traced, wrapped, src.signature, src.sample_inputs, src.other_sizes)
            if problem:
                raise ExportError(
                    f"the traced TorchScript does not hold the pinned dynamic axes: {problem}",
                    hint="a trace records sizes as constants; another path (through ONNX) may "
                    "keep them, or pin the axes as numbers with --input / --static-shapes",
                )
        return traced
