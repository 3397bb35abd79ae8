"""A fault planted in an ONNX file is named when the reference is a TorchScript or ``.pt2`` file.

A loaded ScriptModule refuses forward hooks: TorchScript is traced through its
ONNX conversion, ``.pt2`` through its FX graph. Both name the planted node,
whether the ONNX file was converted from the TorchScript module (its scopes
spelled ``/layer1/1/``) or from the eager module (``/layer1/layer1.1/``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from fwx.validators import validate
from fwx.validators.pipeline import ValidateOptions

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from validators.test_locate import Net

    torch.manual_seed(0)
    net = Net().eval()
    folder = tmp_path_factory.mktemp("torchfiles")
    example = torch.randn(2, 3, 8, 8)
    script = torch.jit.trace(net, example)
    script.save(str(folder / "net.pt"))
    program = torch.export.export(net, (example,), dynamic_shapes={"x": {0: torch.export.Dim("N")}})
    torch.export.save(program, str(folder / "net.pt2"))
    for name, module in (("eager.onnx", net), ("script.onnx", script)):
        with warnings.catch_warnings():  # a ScriptModule's forward has no Python signature to read: torch warns
            warnings.simplefilter("ignore", UserWarning)
            torch.onnx.export(
                module,
                (example,),
                str(folder / name),
                dynamo=False,
                input_names=["x"],
                output_names=["y"],
                dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
                opset_version=17,
            )
    return folder


@pytest.mark.parametrize(
    ("reference", "converted", "node"),
    [
        ("net.pt", "script.onnx", "/layer1/1/conv1/Conv"),
        ("net.pt", "eager.onnx", "/layer1/layer1.1/conv1/Conv"),
        ("net.pt2", "eager.onnx", "/layer1/layer1.1/conv1/Conv"),
    ],
)
def test_a_planted_onnx_fault_is_named_against_a_torch_file(
    files: Path, tmp_path: Path, reference: str, converted: str, node: str
) -> None:
    from validators.test_locate import _plant_onnx

    bad = _plant_onnx(files / converted, tmp_path / "bad.onnx", node)
    report = validate([files / reference, bad], ValidateOptions(trust_model_code=True))
    art = report.artifact("bad.onnx")
    assert not art.passed
    assert art.mismatch is not None
    assert art.mismatch.node is not None, art.mismatch.note
    assert (art.mismatch.node.node, art.mismatch.node.origin) == (node, "module layer1.1.conv1")
    assert all(n.passed for n in art.mismatch.layers[: art.mismatch.layers.index(art.mismatch.node)])


def test_a_correct_onnx_names_nothing_against_torchscript(files: Path) -> None:
    """The conversion the reference is traced through agrees with it: every compared node is within tolerance."""
    from fwx.formats import Format
    from fwx.runtimes import load_runtime
    from fwx.validators.locate import Side, locate
    from validators.test_locate import _samples

    ref = load_runtime(Format.TORCHSCRIPT, files / "net.pt", trust_model_code=True)
    cand = load_runtime(Format.ONNX, files / "eager.onnx")
    m = locate(Side(ref, "net.pt"), Side(cand, "eager.onnx"), _samples((1, 3, 8, 8), "x"), signature=cand.signature())
    assert m.node is None
    assert len(m.layers) >= 5
    assert all(n.passed for n in m.layers)
