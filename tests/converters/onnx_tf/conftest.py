"""Session fixtures: ONNX files of the tiny models, exported once per (model, exporter) on demand."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from . import models


@pytest.fixture(scope="session")
def onnx_file(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    folder = tmp_path_factory.mktemp("onnx_tf_models")
    cache: dict[tuple[str, str], Path] = {}

    def get(name: str, exporter: str) -> Path:
        if (name, exporter) not in cache:
            cache[name, exporter] = models.export(name, exporter, folder)
        return cache[name, exporter]

    return get
