"""The conversion graph: edges (one module each) and the planner."""

from __future__ import annotations

from fwx.converters import registry as _registry  # noqa: F401 - fills the edge table
from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel, register_edge

__all__ = ["ConvertOptions", "ConvertResult", "Converter", "SourceModel", "register_edge"]
