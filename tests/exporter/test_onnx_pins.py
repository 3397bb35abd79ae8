"""An ONNX source's dynamic axes pinned with ``--input`` or ``--example-inputs``: every target holds the pin.

Each converter reads an ONNX file's shapes from the file, so a pin of H and W on a file declaring
``[N,3,H,W]`` used to reach no target (read-back: ``input 'x' axis 2 is dynamic, pinned 32``). fwx
converts a copy with the pinned sizes written in; the source's path and sha256 stay the user's.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from fwx.converters.base import ConvertOptions
from fwx.errors import InputError
from fwx.exporter import ExportOptions, ExportResult, export
from fwx.exporter.onnx_pins import pinned_axes, write_pinned
from fwx.manifest import ArtifactEntry
from fwx.signature import Signature, is_dynamic, parse_tensor_spec

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

FIVE = ["torchscript", "pt2", "savedmodel", "onnx", "tflite"]
PIN = ("N", 3, 32, 32)


class Pool(torch.nn.Module):
    """Runs at any height and width: only a pin can fix them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)).mean(dim=(2, 3))


def _write(path: Path, axes: dict[int, str], *, external: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    torch.onnx.export(
        Pool().eval(),
        (torch.randn(2, 3, 16, 16),),
        str(path),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": axes, "y": {0: "N"}},
        dynamo=False,
        opset_version=17,
    )
    if external:
        model = onnx.load(str(path))
        onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path


@pytest.fixture(scope="module")
def dynamic_hw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("onnx") / "pool.onnx", {0: "N", 2: "H", 3: "W"})


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _declared(path: Path) -> list[int | str]:
    dims = onnx.load(str(path), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]


def _read_back(entry: ArtifactEntry) -> tuple[int | str, ...]:
    """The artifact's input shape, its dynamic batch spelled ``N`` (torch.export names it ``s77``, TF -1)."""
    shape = Signature.from_json(entry.signature).inputs[0].shape
    return ("N" if is_dynamic(shape[0]) else shape[0], *shape[1:])


def _assert_pinned_everywhere(res: ExportResult, source: Path) -> None:
    manifest = res.manifest
    assert manifest is not None
    assert sorted(manifest.artifacts) == sorted(FIVE), manifest.skipped
    for fmt, entry in manifest.artifacts.items():
        assert _read_back(entry) == PIN, fmt
        assert entry.validation["passed"], (fmt, entry.validation)
    assert manifest.source.sha256 == _sha(source)  # the user's file, not the pinned copy
    assert Path(manifest.source.path) == source.resolve()
    assert _declared(source) == ["N", 3, "H", "W"]


def test_an_input_pin_on_dynamic_height_and_width_reaches_all_five_targets(dynamic_hw: Path, tmp_path: Path) -> None:
    res = export(dynamic_hw, ["all"], ExportOptions(out=tmp_path, inputs=["x:float32[N,3,32,32]"]))
    _assert_pinned_everywhere(res, dynamic_hw)
    assert res.manifest is not None
    assert res.version_dir is not None
    onnx_entry = res.manifest.artifacts["onnx"]
    assert _declared(res.version_dir / onnx_entry.path) == ["N", 3, 32, 32]
    assert "pinned sizes written in" in onnx_entry.hops[0]["tool"]


def test_example_inputs_pin_height_and_width_on_every_target(dynamic_hw: Path, tmp_path: Path) -> None:
    examples = {"x": np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)}
    res = export(dynamic_hw, ["all"], ExportOptions(out=tmp_path, example_inputs=examples))
    _assert_pinned_everywhere(res, dynamic_hw)


def test_a_pin_that_contradicts_a_fixed_dim_is_one_clear_error(tmp_path: Path) -> None:
    fixed = _write(tmp_path / "fixed.onnx", {0: "N"})  # 16x16 in the file
    with pytest.raises(InputError, match=r"--input x:float32\[N,3,32,32\] .* axis 2 is fixed to 16"):
        export(fixed, ["onnx"], ExportOptions(out=tmp_path / "a", inputs=["x:float32[N,3,32,32]"]))
    examples = {"x": np.zeros((2, 3, 32, 32), np.float32)}
    with pytest.raises(InputError, match=r"--example-inputs x:float32\[N,3,32,32\] .* axis 2 is fixed to 16"):
        export(fixed, ["onnx"], ExportOptions(out=tmp_path / "b", example_inputs=examples))


def test_no_pin_on_a_dynamic_axis_converts_the_source_itself(dynamic_hw: Path) -> None:
    declared = (parse_tensor_spec("x:float32[N,3,H,W]"),)
    assert pinned_axes(declared, (parse_tensor_spec("x:float32[B,3,H,W]"),)) == {}
    assert pinned_axes(declared, (parse_tensor_spec("x:float32[N,3,32,40]"),)) == {"x": {2: 32, 3: 40}}


def test_the_pinned_copy_carries_its_external_data_and_runs(tmp_path: Path) -> None:
    src = _write(tmp_path / "src" / "ext.onnx", {0: "N", 2: "H", 3: "W"}, external=True)
    before = {p.name: _sha(p) for p in src.parent.iterdir()}
    out = write_pinned(src, {"x": {2: 32, 3: 32}}, tmp_path / "pinned")
    assert _declared(out) == ["N", 3, 32, 32]
    assert (out.parent / "weights.bin").read_bytes() == (src.parent / "weights.bin").read_bytes()
    assert {p.name: _sha(p) for p in src.parent.iterdir()} == before  # the source is untouched
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(str(src)).run(None, {"x": x})[0]
    sess = ort.InferenceSession(str(out))
    assert list(sess.get_inputs()[0].shape) == ["N", 3, 32, 32]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-6)


def test_an_external_data_source_pinned_publishes_its_onnx_and_torchscript(tmp_path: Path) -> None:
    src = _write(tmp_path / "src" / "ext.onnx", {0: "N", 2: "H", 3: "W"}, external=True)
    # trusted: the private snapshot of an untrusted .onnx copies the file alone, not its data files
    opts = ExportOptions(
        out=tmp_path / "repo", inputs=["x:float32[N,3,32,32]"], convert=ConvertOptions(trust_model_code=True)
    )
    res = export(src, ["onnx", "torchscript"], opts)
    assert res.manifest is not None
    assert res.version_dir is not None
    for fmt in ("onnx", "torchscript"):
        assert _read_back(res.manifest.artifacts[fmt]) == PIN
    assert _declared(res.version_dir / res.manifest.artifacts["onnx"].path) == ["N", 3, 32, 32]
