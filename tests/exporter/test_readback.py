"""Read-back: an artifact whose interface departs from the pinned signature is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.errors import SignatureMismatchError
from fwx.exporter.readback import check_readback, differences
from fwx.formats import Format
from fwx.runtimes import load_runtime
from fwx.signature import Signature, parse_tensor_spec

PINNED = Signature((parse_tensor_spec("x:float32[N,4]"),), (parse_tensor_spec("y:float32[N,3]"),))


@pytest.fixture(scope="module")
def static_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ONNX file exported without dynamic axes: its batch is baked to 2."""
    import torch

    path = tmp_path_factory.mktemp("rb") / "static.onnx"
    torch.manual_seed(0)
    torch.onnx.export(
        torch.nn.Linear(4, 3).eval(),
        (torch.randn(2, 4),),
        str(path),
        dynamo=False,
        opset_version=13,
        input_names=["x"],
        output_names=["y"],
    )
    return path


def test_a_baked_batch_is_a_mismatch(static_onnx: Path) -> None:
    got = load_runtime(Format.ONNX, static_onnx).signature()
    with pytest.raises(SignatureMismatchError, match=r"input 'x' axis 0 is fixed to 2, pinned dynamic \(N\)"):
        check_readback(Format.ONNX, static_onnx, PINNED, got)


def test_the_written_opset_must_be_the_pinned_one(static_onnx: Path) -> None:
    static = Signature((parse_tensor_spec("x:float32[2,4]"),), (parse_tensor_spec("y:float32[2,3]"),))
    got = load_runtime(Format.ONNX, static_onnx).signature()
    assert check_readback(Format.ONNX, static_onnx, static, got, opset=13) == 13
    with pytest.raises(SignatureMismatchError, match="declares opset 13, pinned 17"):
        check_readback(Format.ONNX, static_onnx, static, got, opset=17)


def test_differences_lists_names_dtypes_and_ranks() -> None:
    renamed = Signature((parse_tensor_spec("input_1:float32[N,4]"),), PINNED.outputs)
    assert differences(PINNED, renamed) == ["inputs are ['input_1'], pinned ['x']"]
    wrong = Signature((parse_tensor_spec("x:float16[N,4]"),), (parse_tensor_spec("y:float32[N,3,1]"),))
    assert differences(PINNED, wrong) == [
        "input 'x' is float16, pinned float32",
        "output 'y' has rank 3 ([N,3,1]), pinned 2 ([N,3])",
    ]
    assert differences(PINNED, wrong, check_dtypes=False)[0].startswith("output 'y' has rank 3")
    # An output whose static size the exporter lost is tolerated; a pinned dynamic axis fixed is not.
    loose = Signature(PINNED.inputs, (parse_tensor_spec("y:float32[N,-1]"),))
    assert differences(PINNED, loose) == []
    pinned_out = Signature(PINNED.inputs, (parse_tensor_spec("y:float32[1,3]"),))
    assert differences(PINNED, pinned_out) == ["output 'y' axis 0 is fixed to 1, pinned dynamic (N)"]
