"""Fixtures shared by the validator tests: loaded runtimes over the runtimes tests' tiny artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtimes import models

from fwx import ui
from fwx.formats import Format
from fwx.runtimes import Runtime, load_runtime


@pytest.fixture(autouse=True)
def _reset_ui() -> Iterator[None]:
    """A test that ran the CLI with --json, --quiet or --debug leaves ``ui.state`` as it found it."""
    yield
    ui.state.json = ui.state.quiet = ui.state.debug = False


@pytest.fixture(scope="session")
def torch_ref() -> Runtime:
    from fwx.runtimes.eager_torch import EagerTorchRuntime

    return EagerTorchRuntime.from_module(models.torch_mlp(), models.MLP_SIG)


@pytest.fixture(scope="session")
def keras_ref() -> Runtime:
    from fwx.runtimes.eager_keras import KerasRuntime

    return KerasRuntime.from_model(models.keras_mlp(), models.MLP_SIG)


@pytest.fixture(scope="session")
def torch_candidates(torch_files: dict[str, Path]) -> dict[str, Any]:
    sig = models.MLP_SIG
    return {
        "onnx": load_runtime(Format.ONNX, torch_files["onnx"]),
        "torchscript": load_runtime(Format.TORCHSCRIPT, torch_files["torchscript"], signature_hint=sig),
        "pt2": load_runtime(Format.PT2, torch_files["pt2"], signature_hint=sig),
    }
