"""Fixtures for the exporter and CLI tests: sample sources built once per session, an in-process CLI.

PyTorch sources cost milliseconds; the Keras/SavedModel ones import TensorFlow
(seconds), so they are separate fixtures that only TF tests ask for.
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CNN_CLASS = "samples.models:SmallCNN"
CNN_INPUT = "image:float32[N,3,32,32]"
TOYS = Path(__file__).resolve().parent / "toy_models.py"


@pytest.fixture(scope="session", autouse=True)
def _samples_importable() -> None:
    """``--model-class samples.models:SmallCNN`` resolves from the repository root."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True)
def _reset_ui() -> Any:
    from fwx import ui

    ui.state.json = ui.state.debug = ui.state.quiet = False
    yield
    ui.state.json = ui.state.debug = ui.state.quiet = False


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error:")]

    @property
    def has_traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.err + self.out


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    """Run ``fwx.cli.main(argv)`` in-process; returns exit code, stdout, stderr."""

    def run(*args: Any) -> CliResult:
        from fwx import ui
        from fwx.cli import main

        ui.state.json = ui.state.debug = False  # --json/--debug set process-wide flags
        capsys.readouterr()
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


def assert_refused(res: CliResult, root: Path, code: int, *needles: str) -> None:
    """Exit ``code``, exactly one ``error:`` line containing every needle, no traceback, no version."""
    assert res.code == code, (res.code, res.err)
    assert len(res.error_lines) == 1, res.err
    for needle in needles:
        assert needle in res.error_lines[0], res.error_lines[0]
    assert not res.has_traceback
    assert numbered_versions(root) == []


def numbered_versions(root: Path) -> list[Path]:
    """Every published (numeric) version folder under a repository root."""
    return sorted(p for p in root.glob("*/*") if p.is_dir() and p.name.isdigit()) if root.exists() else []


class _Evil:
    """Unpickling this would create the sentinel file (it must never happen)."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.sentinel}",))


@pytest.fixture(scope="session")
def torch_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import torch

    from samples.models import build_torch_cnn

    d = tmp_path_factory.mktemp("torch_sources")
    cnn = build_torch_cnn()
    files = {
        k: d / v
        for k, v in {
            "state_dict": "cnn.pt",
            "pickled_nn": "seq.pt",
            "pickled_custom": "cnn_full.pt",
            "evil": "evil.pt",
            "torchscript": "cnn_ts.pt",
            "pt2": "cnn.pt2",
            "truncated": "cnn_truncated.pt",
            "garbage": "garbage.bin",
            "sentinel": "SENTINEL",
        }.items()
    }
    torch.save(cnn.state_dict(), files["state_dict"])
    torch.save(
        torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval(), files["pickled_nn"]
    )
    torch.save(cnn, files["pickled_custom"])
    torch.save({"weights": torch.zeros(2), "payload": _Evil(files["sentinel"])}, files["evil"])
    torch.jit.save(torch.jit.script(cnn), str(files["torchscript"]))
    n = torch.export.Dim("N")
    torch.export.save(torch.export.export(cnn, (torch.randn(2, 3, 32, 32),), dynamic_shapes=({0: n},)), files["pt2"])
    files["truncated"].write_bytes(files["state_dict"].read_bytes()[:1500])
    # fixed bytes: random ones start with a legacy pickle's or an ONNX header's bytes about once in 4,700 runs
    files["garbage"].write_bytes(b"not a model " + random.Random(0).randbytes(244))
    return files


@pytest.fixture(scope="session")
def keras_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A Keras CNN (.keras and legacy .h5), a Lambda model, and a tf.Module SavedModel."""
    import keras
    import tensorflow as tf

    from samples.models import build_keras_model, build_tf_module

    d = tmp_path_factory.mktemp("tf_sources")
    files = {"keras": d / "cnn.keras", "h5": d / "cnn.h5", "lambda": d / "lam.keras", "savedmodel": d / "tfmod"}
    model = build_keras_model()
    model.save(files["keras"])
    model.save(files["h5"])
    x = keras.Input((4,), name="x")
    keras.Model(x, keras.layers.Lambda(lambda t: t * 2)(x)).save(files["lambda"])
    module = build_tf_module()
    tf.saved_model.save(module, str(files["savedmodel"]), signatures={"serving_default": module.__call__})
    return files
