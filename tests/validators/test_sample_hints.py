"""``fwx validate`` draws inputs as the export drew them (fwx.json ``samples``).

A BERT-style model has a 2-row ``token_type_ids`` table: ids drawn from the
default [0, 10) make ONNX Runtime's ``Gather`` refuse the input and torch's
embedding raise, so a model that ``fwx export`` validated failed ``fwx
validate``. The export now records the ranges (and a lookup table's keys) it
sampled by, and validate reads them back; loose files get the ranges an ONNX
artifact's ``Gather``s say.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fwx import ui
from fwx.signature import Signature, TensorSpec
from fwx.sources.samples import InputConfig, generate_inputs, hints_from_json, hints_to_json

from .cli_run import fwx_cli

pytestmark = pytest.mark.e2e


VOCAB, TYPES = 50, 2  # input ids and token types: the type table has 2 rows


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A token classifier with a 50-id vocabulary and 2 token types, exported to ONNX and TorchScript."""
    import torch

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.words = torch.nn.Embedding(VOCAB, 8)
            self.types = torch.nn.Embedding(TYPES, 8)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.words(input_ids) + self.types(token_type_ids))

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("hints")
    src = root / "tagger.pt2"
    seq = torch.export.Dim("seq", min=2, max=64)
    batch = torch.export.Dim("batch", min=1, max=64)
    ids = torch.zeros(2, 5, dtype=torch.int64)
    dims = {"input_ids": {0: batch, 1: seq}, "token_type_ids": {0: batch, 1: seq}}
    # two tensors: one tensor passed twice makes torch.export read both tables with the second input
    args = (ids, ids.clone())
    torch.export.save(torch.export.export(Tagger().eval(), args, dynamic_shapes=dims), src)
    from fwx.exporter import ExportOptions, export

    ui.state.quiet = True
    result = export(src, ["onnx", "torchscript"], ExportOptions(out=root / "repo", name="tagger"))
    ui.state.quiet = False
    assert result.ok, result.failures
    return Path(result.version_dir)


def test_the_export_records_its_id_ranges_and_validate_passes_with_them(
    exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = json.loads((exported / "fwx.json").read_text())["samples"]
    # each id input takes the table it indexes, followed in a traced run of the program (fwx.sources.input_roles)
    assert samples["input_ranges"] == {"input_ids": [0, VOCAB], "token_type_ids": [0, TYPES]}
    assert "indexes embedding" in samples["notes"]["input_ids"]
    code, out = fwx_cli(["validate", "--device", "cpu", exported], capsys)
    assert code == 0, out
    assert "verdict: PASS" in out


def test_without_the_hints_ids_overflow_the_type_table(exported: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The failure the hints prevent, so the test above cannot pass by accident."""
    code, out = fwx_cli(["validate", "--device", "cpu", exported, "--int-range", "0,10"], capsys)
    assert code == 1
    assert "out of" in out or "index" in out.lower(), out


def test_loose_files_take_the_ranges_the_onnx_graph_gathers_from(
    exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = fwx_cli(
        [
            "validate",
            "--device",
            "cpu",
            exported / "model.onnx",
            exported / "model.torchscript.pt",
            "--trust-model-code",
        ],
        capsys,
    )
    assert code == 0, out


def test_input_range_overrides_and_unknown_names_are_refused(
    exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = fwx_cli(["validate", "--device", "cpu", exported, "--input-range", "token_type_ids:0,1"], capsys)
    assert code == 0, out
    code, out = fwx_cli(["validate", "--device", "cpu", exported, "--input-range", "segment_ids:0,2"], capsys)
    assert code == 2
    assert "--input-range names segment_ids, not an input of the model" in out


def test_hints_round_trip_through_json_with_strings_as_text() -> None:
    sig = Signature(
        (TensorSpec("words", "bytes", ("N", 3)), TensorSpec("ids", "int64", ("N", 3))),
        (TensorSpec("y", "float32", ("N", 2)),),
    )
    cfg = InputConfig(ranges={"ids": (0, 7)}, values={"words": (b"cat", b"dog", b"\xff")})
    data = hints_to_json(cfg)
    assert "words" not in data.get("input_values", {})  # a key that is not UTF-8 is left out, not mangled
    cfg = InputConfig(ranges={"ids": (0, 7)}, values={"words": (b"cat", b"dog")})
    back = hints_from_json(json.loads(json.dumps(hints_to_json(cfg))), sig)
    assert back.ranges == {"ids": (0, 7)}
    assert back.values == {"words": (b"cat", b"dog")}
    drawn = generate_inputs(sig, InputConfig(ranges=back.ranges, values=back.values))
    assert {w for s in drawn for w in s["words"].ravel()} <= {b"cat", b"dog"}
    assert max(int(s["ids"].max()) for s in drawn) < 7
    assert hints_from_json({"input_ranges": {"other": [0, 3]}}, sig).ranges == {}  # data, not a command line


def test_restricted_sizes_round_trip_and_drive_the_samples() -> None:
    """A ``.pt2`` whose length Dim starts at 400: the sizes it admits go to fwx.json and back, and every
    generated sample takes them; symbols the signature does not have, or negative sizes, are dropped (0 is a
    size: a KV-cache decoder's first step takes an empty cache)."""
    sig = Signature((TensorSpec("x", "float32", ("N", "x_d1")),), (TensorSpec("y", "float32", ("N", 4)),))
    data = hints_to_json(InputConfig(sizes={"x_d1": (400, 410)}))
    assert data == {"sizes": {"x_d1": [400, 410]}}
    back = hints_from_json(json.loads(json.dumps(data)), sig)
    assert back.sizes == {"x_d1": (400, 410)}
    assert sorted({s["x"].shape for s in generate_inputs(sig, back)}) == [(1, 400), (3, 410)]
    assert hints_from_json({"sizes": {"other": [5], "x_d1": [-1, 3]}}, sig).sizes == {}
    assert hints_from_json({"sizes": {"x_d1": [0, 3]}}, sig).sizes == {"x_d1": (0, 3)}
