"""PyTorch -> ``.pt2`` ExportedProgram via ``torch.export`` with a ``Dim`` per pinned symbol.

Inputs that share a symbol share one ``Dim``, so torch.export keeps them equal.
The sample sizes are >= 2 because torch.export specialises sizes 0 and 1.
"""

from __future__ import annotations

from pathlib import Path

from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.errors import ExportError
from fwx.frameworks import first_line, quiet, require
from fwx.formats import Format


class TorchToExportedProgram(Converter):
    source = Format.PYTORCH
    target = Format.PT2
    tool = "torch.export"
    honours = frozenset({"dynamic"})
    requires = (("torch", "torch"),)
    cost = 5

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        from fwx.exporter import torch_common as tc

        torch = require("torch", "exporting to .pt2")
        args = tc.tensors(opts.sample_inputs, src.signature)
        shapes = tc.dims_for(src.signature)
        try:
            with quiet(), torch.no_grad():
                program = torch.export.export(tc.wrap(src.obj, src.signature), args,
                                              dynamic_shapes=shapes if any(shapes) else None)
                torch.export.save(program, str(out))
        except Exception as exc:  # noqa: BLE001 - torch.export raises many kinds of errors
            raise ExportError(f"torch.export failed: {first_line(exc)}",
                              hint="the model may use data-dependent control flow, or a dimension pinned as "
                                   "dynamic is fixed in the model; pin it as a number") from exc
        return ConvertResult(out, src.signature, tool="torch.export", tool_version=torch.__version__,
                             layout=src.layout)
