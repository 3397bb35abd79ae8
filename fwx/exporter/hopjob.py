"""One conversion hop as data: what the prefetch process is asked to run and what it answers.

The exporter's runner and the prefetch child (``fwx.exporter.prefetch_child``)
build a hop's input the same way (``next_source``, ``hop_options``) from the
same JSON, so a hop converted in the child gets exactly the input and options
it would have got in-process. Errors cross the process boundary as data: an
``FwxError`` comes back as the same class with the same message and hint.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fwx import errors
from fwx.converters.base import ConvertOptions, ConvertResult, EdgeEntry, SourceModel
from fwx.errors import FwxError, first_line
from fwx.formats import Format
from fwx.machine import write_atomic
from fwx.quantize.options import QuantOptions
from fwx.signature import Signature


def next_source(
    entry: EdgeEntry, prev: ConvertResult, *, sample_inputs: Mapping[str, Any], other_sizes: Mapping[str, int]
) -> SourceModel:
    """The input of a hop that converts a file an earlier hop wrote, with the run's samples."""
    return SourceModel(
        entry.source,
        prev.path,
        prev.signature,
        layout=prev.layout,
        opset=prev.opset,
        precision=prev.precision,
        sample_inputs=sample_inputs,
        other_sizes=other_sizes,
    )


def hop_options(opts: ConvertOptions, *, chained: bool, quantize: bool) -> ConvertOptions:
    """A hop's options: an intermediate fwx wrote is read by ``serving_default``; only a quantising hop keeps ``quant``."""
    if chained:
        opts = dataclasses.replace(opts, saved_model_signature="serving_default")
    return opts if quantize else dataclasses.replace(opts, quant=None)


def options_json(opts: ConvertOptions) -> dict[str, Any]:
    data = {f.name: getattr(opts, f.name) for f in dataclasses.fields(ConvertOptions)}
    data["quant"] = opts.quant.to_json() if opts.quant is not None else None
    return data


def options_from_json(data: dict[str, Any]) -> ConvertOptions:
    quant = data.get("quant")
    return ConvertOptions(**{**data, "quant": QuantOptions.from_json(quant) if quant is not None else None})


def source_json(src: SourceModel) -> dict[str, Any]:
    """A file source as JSON; its ``sample_inputs`` travel as an .npz file beside the job."""
    return {
        "format": src.format.value,
        "path": str(src.path),
        "signature": src.signature.to_json(),
        "layout": src.layout,
        "opset": src.opset,
        "precision": src.precision,
        "other_sizes": dict(src.other_sizes),
    }


def source_from_json(data: dict[str, Any], samples: dict[str, Any]) -> SourceModel:
    return SourceModel(
        Format(data["format"]),
        Path(data["path"]),
        Signature.from_json(data["signature"]),
        layout=data["layout"],
        opset=data["opset"],
        precision=data["precision"],
        sample_inputs=samples,
        other_sizes=dict(data.get("other_sizes") or {}),
    )


def result_json(res: ConvertResult) -> dict[str, Any]:
    return {
        "path": str(res.path),
        "signature": res.signature.to_json(),
        "tool": res.tool,
        "tool_version": res.tool_version,
        "layout": res.layout,
        "opset": res.opset,
        "precision": res.precision,
        "notes": list(res.notes),
        "extra": res.extra,
    }


def result_from_json(data: dict[str, Any]) -> ConvertResult:
    return ConvertResult(
        Path(data["path"]),
        Signature.from_json(data["signature"]),
        tool=data["tool"],
        tool_version=data["tool_version"],
        layout=data["layout"],
        opset=data["opset"],
        precision=data["precision"],
        notes=list(data["notes"]),
        extra=dict(data["extra"]),
    )


def error_json(exc: BaseException) -> dict[str, Any]:
    """An exception as data: an ``FwxError`` by class name, message, hint and its own fields; others by first line."""
    if isinstance(exc, FwxError) and getattr(errors, type(exc).__name__, None) is type(exc):
        attrs = {k: v for k, v in vars(exc).items() if k not in ("message", "hint") and _jsonable(v)}
        return {"class": type(exc).__name__, "message": exc.message, "hint": exc.hint, "attrs": attrs}
    return {"class": None, "message": first_line(exc), "type": type(exc).__name__}


def error_from_json(data: dict[str, Any]) -> Exception:
    """The child's error, rebuilt: the same ``FwxError`` class, or ``HopFailed`` carrying the first line."""
    name = data.get("class")
    cls = getattr(errors, name, None) if isinstance(name, str) else None
    if isinstance(cls, type) and issubclass(cls, FwxError):
        exc = cls.__new__(cls)
        FwxError.__init__(exc, data["message"], hint=data.get("hint"))
        for key, value in (data.get("attrs") or {}).items():
            setattr(exc, key, value)
        return exc
    return HopFailed(data.get("message") or data.get("type") or "the converter failed")


class HopFailed(RuntimeError):
    """A converter in the prefetch process raised something that is not an ``FwxError`` (the runner names it)."""


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def write_json(path: Path, data: dict[str, Any]) -> None:
    """The reader (the other process) sees the whole answer or none."""
    write_atomic(path, json.dumps(data))
