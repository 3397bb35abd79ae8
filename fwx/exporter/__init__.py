"""The exporter: load a source safely, pin its signature, convert, read back, validate, publish.

``export`` is the library entry point; ``fwx export`` is a thin wrapper over it.
Importing this package imports no framework.
"""

from __future__ import annotations

from fwx.exporter.options import ExportOptions
from fwx.exporter.pipeline import ExportResult, TargetRow, export, plan_only

__all__ = ["ExportOptions", "ExportResult", "TargetRow", "export", "plan_only"]
