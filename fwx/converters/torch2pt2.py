"""PyTorch -> ``.pt2`` ExportedProgram via ``torch.export`` with a ``Dim`` per pinned symbol.

Inputs that share a symbol share one ``Dim``, so torch.export keeps them equal.
The sample sizes are >= 2 because torch.export specialises sizes 0 and 1.
"""

from __future__ import annotations

from pathlib import Path

from fwx.converters import _torch as tc
from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.errors import ExportError, first_line
from fwx.formats import Format
from fwx.frameworks import require
from fwx.signature import hop_signature


class TorchToExportedProgram(Converter):
    source = Format.PYTORCH
    target = Format.PT2
    tool = "torch.export"
    honours = frozenset({"dynamic", "static_shapes"})
    requires = (("torch", "torch"),)
    cost = 5

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        torch = require("torch", "exporting to .pt2")
        sig = hop_signature(src.signature, opts.static_shapes, src.sample_inputs)
        args = tc.tensors(src.sample_inputs, sig)
        shapes = tc.dims_for(sig)
        try:
            with tc.export_mode():
                program = torch.export.export(
                    tc.wrap(src.obj, sig), args, dynamic_shapes=shapes if any(shapes) else None
                )
                torch.export.save(program, str(out))
        except Exception as exc:  # noqa: BLE001 - torch.export raises many kinds of errors
            raise ExportError(
                f"torch.export failed: {first_line(exc)}",
                hint="the model may use data-dependent control flow, or a dimension pinned as "
                "dynamic is fixed in the model; pin it as a number",
            ) from exc
        return ConvertResult(out, sig, tool="torch.export", tool_version=torch.__version__, layout=src.layout)
