"""Suite-wide settings: quiet frameworks, deterministic threads, GPU marker handling."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # bit-stable TF numbers across runs
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("PYTHONHASHSEED", "0")

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from ci_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402, F401  (hooks: CI=true)


def _has_cuda() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import onnxruntime as ort

        return "CUDAExecutionProvider" in ort.get_available_providers()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def torch_files() -> dict[str, Path]:
    """Tiny torch MLP as ONNX/TorchScript/.pt2, built once (tests/runtimes/models.py); runtimes and validators share it."""
    from runtimes import models

    return models.torch_artifacts()


@pytest.fixture(scope="session")
def keras_files() -> dict[str, Path]:
    """Tiny Keras MLP as SavedModel/TFLite, built once; runtimes and validators share it."""
    from runtimes import models

    return models.keras_artifacts()
