"""``.pt2`` sources saved with shared ``Dim``s: pinned with shared symbols, copied to ``.pt2``, held to sharing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fwx.errors import SignatureMismatchError
from fwx.exporter import ExportOptions, export
from fwx.exporter.readback import check_readback
from fwx.formats import Format
from fwx.manifest import sha256_path
from fwx.runtimes.base import load_runtime
from fwx.signature import Signature, TensorSpec

torch = pytest.importorskip("torch")

from . import pt2_models  # noqa: E402 - needs torch


@pytest.fixture(scope="module")
def encoder_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pt2_models.save_encoder(tmp_path_factory.mktemp("pt2") / "encoder.pt2")


@pytest.fixture(scope="module")
def encoder_export(encoder_pt2: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return export(encoder_pt2, ["pt2", "onnx"], ExportOptions(out=tmp_path_factory.mktemp("repo")))


def test_inputs_sharing_dims_are_pinned_with_shared_symbols(encoder_export: Any) -> None:
    ids, mask = encoder_export.signature.inputs
    assert ids.shape == mask.shape == ("N", "input_ids_d1")
    assert encoder_export.ok
    assert encoder_export.manifest.artifacts["onnx"].validation["passed"]


def test_pt2_to_pt2_is_a_checked_copy(encoder_export: Any, encoder_pt2: Path) -> None:
    entry = encoder_export.manifest.artifacts["pt2"]
    assert [h["tool"] for h in entry.hops] == ["copy"]
    assert entry.sha256 == sha256_path(encoder_pt2)
    assert entry.validation["passed"]
    read = Signature.from_json(entry.signature)
    assert read.inputs[0].shape == read.inputs[1].shape  # the program's shared batch and sequence symbols


def test_pt2_readback_refuses_an_artifact_that_lets_shared_dims_differ(tmp_path: Path) -> None:
    path = pt2_models.save_two_heads(tmp_path / "two.pt2")
    pinned = Signature((TensorSpec("a", "float32", ("N", 3)), TensorSpec("b", "float32", ("N", 5))),
                       (TensorSpec("output_0", "float32", ("N",)), TensorSpec("output_1", "float32", ("N",))))
    rt = load_runtime(Format.PT2, path, signature_hint=pinned, trust_model_code=True)
    try:
        got = rt.signature()
    finally:
        rt.close()
    with pytest.raises(SignatureMismatchError, match="share N in the pin, but the artifact lets them differ"):
        check_readback(Format.PT2, path, pinned, got)
