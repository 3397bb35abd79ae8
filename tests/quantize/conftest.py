"""Shared fixtures: the digits CNN trained once per session, and its artifacts.

Training takes a few seconds on two cores; the float ONNX model costs nothing
more, the SavedModel (which imports TensorFlow) is built only when a TFLite test asks.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from fwx.signature import Signature, parse_tensor_spec

ROOT = Path(__file__).resolve().parents[2]
SIGNATURE = Signature((parse_tensor_spec("image:float32[N,1,8,8]"),), (parse_tensor_spec("logits:float32[N,10]"),))


def load_digits_sample() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fwx_sample_digits", ROOT / "samples" / "digits.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Digits:
    module: ModuleType
    model: Any
    folder: Path
    x_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    calib: Path
    eval: Path
    onnx: Path
    float_accuracy: float


@pytest.fixture(scope="session")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Digits:
    mod = load_digits_sample()
    folder = tmp_path_factory.mktemp("digits")
    x_tr, y_tr, x_te, y_te = mod.load_split()
    model = mod.train(x_tr, y_tr)
    calib, ev = mod.write_data(folder, x_tr, x_te, y_te)
    onnx_path = mod.export_onnx(model, folder / "digits.onnx")
    acc = mod.accuracy(mod.predict_torch(model, x_te), y_te)
    return Digits(mod, model, folder, x_tr, x_te, y_te, calib, ev, onnx_path, acc)


@pytest.fixture(scope="session")
def digits_savedmodel(digits: Digits) -> Path:
    path = digits.folder / "digits.savedmodel"
    if not path.exists():
        digits.module.export_savedmodel(digits.module.to_keras(digits.model), path)
    return path
