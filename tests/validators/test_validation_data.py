"""``--validation-data FILE.npz`` adds real samples to the generated ones, in ``fwx export`` and ``fwx validate``;
the sampling choices are listed under the validation table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fwx import ui

from .cli_run import fwx_cli

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TorchScript tagger (30 ids, 2 token types) and a real batch of 2 sequences of 6."""
    import torch

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.words, self.types = torch.nn.Embedding(30, 4), torch.nn.Embedding(2, 4)

        def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.words(input_ids) + self.types(token_type_ids)

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("vdata")
    torch.jit.save(torch.jit.script(Tagger().eval()), root / "tagger.pt")
    ids = np.array([[3, 29, 7, 1, 0, 5], [11, 12, 13, 14, 15, 16]], np.int64)
    np.savez(root / "real.npz", input_ids=ids, token_type_ids=np.zeros_like(ids))
    np.savez(root / "bad.npz", input_ids=ids[:, :, None], token_type_ids=np.zeros_like(ids))
    return root


def test_export_and_validate_add_the_real_samples(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = ["--input", "input_ids:int64[N,S]", "--input", "token_type_ids:int64[N,S]"]
    args = ["export", files / "tagger.pt", "--trust-model-code", "--to", "onnx", "--out", files / "repo", *inputs]
    code, out = fwx_cli([*args, "--validation-data", files / "real.npz"], capsys)
    assert code == 0, out
    version = files / "repo" / "tagger" / "1"
    manifest = json.loads((version / "fwx.json").read_text())
    assert manifest["artifacts"]["onnx"]["validation"]["samples"] == 5  # 4 generated + 1 real batch
    assert manifest["samples"]["input_ranges"]["input_ids"] == [0, 30]  # its own table, not the 2-row one
    assert "indexes embedding of a 30-row table" in manifest["samples"]["notes"]["input_ids"]
    source = [
        "--source-model",
        files / "tagger.pt",
    ]  # fwx.json's source.path is data, never followed out of the version
    code, out = fwx_cli(
        ["validate", version, *source, "--trust-model-code", "--validation-data", files / "real.npz", "--json"], capsys
    )
    assert code == 0, out
    assert len(json.loads(out[out.index("{") :])["inputs"]) == 5
    ui.state.json = False
    code, out = fwx_cli(["validate", version, *source, "--trust-model-code"], capsys)
    assert "note: samples: input_ids: ids in [0, 30)" in out  # the choice is listed under the table


def test_data_that_does_not_fit_is_refused_naming_the_flag(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = ["--input", "input_ids:int64[N,S]", "--input", "token_type_ids:int64[N,S]"]
    args = ["export", files / "tagger.pt", "--trust-model-code", "--to", "onnx", "--out", files / "bad", *inputs]
    code, out = fwx_cli([*args, "--validation-data", files / "bad.npz"], capsys)
    assert code != 0
    assert "--validation-data 'input_ids' has shape [2, 6, 1]" in out
    assert not (files / "bad" / "tagger").exists()
