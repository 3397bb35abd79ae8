"""Suite-wide settings: quiet frameworks, deterministic threads, GPU marker handling."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # bit-stable TF numbers across runs
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("PYTHONHASHSEED", "0")

import shutil  # noqa: E402
import signal  # noqa: E402
from collections.abc import Iterator  # noqa: E402
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


@pytest.fixture(autouse=True)
def _sigint_left_as_found() -> Iterator[None]:
    """A test that leaves another SIGINT handler installed fails here, and the handler is put back: a
    leaked handler would swallow the Ctrl-C of every later test in this process (the prefetch test's)."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"this test left SIGINT handled by {after!r} (it found {before!r})", pytrace=False)


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
