"""Validators: run every format on the same inputs, diff the outputs, fail loudly.

Import-light: numpy only. ``validate_runtimes`` compares loaded runtimes;
``validate`` (``fwx.validators.pipeline``) also finds, verifies and loads the
artifacts of a model version folder.
"""

from __future__ import annotations

from fwx.sources.samples import InputConfig, generate_inputs
from fwx.validators.judge import validate_runtimes
from fwx.validators.pipeline import ValidateOptions, validate
from fwx.validators.policy import Policy, Tolerance
from fwx.validators.report import ArtifactResult, OutputResult, ValidationReport

__all__ = [
    "ArtifactResult",
    "InputConfig",
    "OutputResult",
    "Policy",
    "Tolerance",
    "ValidateOptions",
    "ValidationReport",
    "generate_inputs",
    "validate",
    "validate_runtimes",
]
