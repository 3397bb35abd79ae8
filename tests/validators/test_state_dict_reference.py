"""``fwx validate weights.pt model.onnx --model-class m:C``: a user with only a state dict checks an artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runtimes import models

from tests.validators.cli_run import fwx_cli

pytestmark = pytest.mark.e2e
CLASS = "runtimes.models:torch_mlp"


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    path = tmp_path_factory.mktemp("sd") / "mlp_state.pt"
    torch.save(models.torch_mlp().state_dict(), path)
    return path


def test_the_state_dict_is_the_reference_the_artifact_passes_against(
    weights: Path, torch_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["validate", weights, torch_files["onnx"], "--model-class", CLASS, "--json"]
    code, out = fwx_cli(args, capsys)
    assert code == 0, out
    data = json.loads(out[out.index("{") :])
    assert data["reference"]["key"] == weights.name
    assert [a["key"] for a in data["artifacts"]] == [torch_files["onnx"].name]
    assert data["passed"]


def test_a_changed_artifact_fails_against_the_state_dict(
    weights: Path, torch_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["validate", weights, torch_files["onnx_perturbed"], "--model-class", CLASS]
    code, out = fwx_cli(args, capsys)
    assert code == 1, out
    assert "FAIL" in out


def test_a_class_that_does_not_fit_the_weights_says_so(
    weights: Path, torch_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["validate", weights, torch_files["onnx"], "--model-class", "runtimes.models:torch_cnn"]
    code, out = fwx_cli(args, capsys)
    assert code == 2, out
    assert "does not match runtimes.models:torch_cnn" in out
