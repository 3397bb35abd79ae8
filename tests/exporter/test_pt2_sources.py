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
    pinned = Signature(
        (TensorSpec("a", "float32", ("N", 3)), TensorSpec("b", "float32", ("N", 5))),
        (TensorSpec("output_0", "float32", ("N",)), TensorSpec("output_1", "float32", ("N",))),
    )
    rt = load_runtime(Format.PT2, path, signature_hint=pinned, trust_model_code=True)
    try:
        got = rt.signature()
    finally:
        rt.close()
    with pytest.raises(SignatureMismatchError, match="share N in the pin, but the artifact lets them differ"):
        check_readback(Format.PT2, path, pinned, got)


def test_a_trace_that_bakes_the_sequence_length_is_refused(encoder_pt2: Path) -> None:
    from fwx.converters import _torch as tc
    from fwx.sources.load import load_source
    from fwx.sources.pt2 import pt2_inputs
    from fwx.sources.samples import make_feeds

    src = load_source(encoder_pt2, trust=True)
    sig = Signature(pt2_inputs(torch.export.load(encoder_pt2)) or (), (TensorSpec("output_0", "float32", ("N", 4)),))
    sample = make_feeds(sig.inputs, {"N": 2, "input_ids_d1": 3})
    wrapped = tc.wrap(src.obj, sig)
    traced = torch.jit.trace(wrapped, tc.tensors(sample, sig), check_trace=False, strict=False)
    assert "fails at N=5, input_ids_d1=6" in (tc.baked_sizes(traced, wrapped, sig, sample) or "")
    eager_cnn = torch.nn.Sequential(torch.nn.Linear(4, 2)).eval()
    flat = Signature((TensorSpec("x", "float32", ("N", 4)),), (TensorSpec("y", "float32", ("N", 2)),))
    x = make_feeds(flat.inputs, {"N": 2})
    assert (
        tc.baked_sizes(
            torch.jit.trace(tc.wrap(eager_cnn, flat), tc.tensors(x, flat)), tc.wrap(eager_cnn, flat), flat, x
        )
        is None
    )


@pytest.mark.slow
def test_torchscript_from_pt2_runs_at_every_length(encoder_pt2: Path, tmp_path: Path) -> None:
    res = export(encoder_pt2, ["torchscript"], ExportOptions(out=tmp_path))
    entry = res.manifest.artifacts["torchscript"]
    assert [h["tool"] for h in entry.hops] != ["torch.jit.trace"]  # the direct trace baked the length: refused
    module = torch.jit.load(str(res.version_dir / entry.path))
    for batch, length in ((1, 3), (2, 9), (4, 40)):
        out = module(torch.randint(0, 50, (batch, length)), torch.ones(batch, length, dtype=torch.int64))
        assert tuple((out[0] if isinstance(out, tuple) else out).shape) == (batch, 4)


def test_a_dim_with_a_range_and_a_multiple_names_what_to_pin(tmp_path: Path) -> None:
    """wav2vec2-style: ``samples = 10 * Dim("frames", min=40)``. fwx's probe sizes (2, 3, ...) are outside it:
    the error says the signature came from the model (no --input was given) and what to pin; a pinned
    length it admits exports."""
    from fwx.errors import InputError

    class Frames(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x.reshape(x.shape[0], -1, 10).mean(-1)

    frames = torch.export.Dim("frames", min=4, max=160)
    ep = torch.export.export(
        Frames(), (torch.randn(2, 80),), dynamic_shapes=({0: torch.export.Dim("b"), 1: 10 * frames},)
    )
    src = tmp_path / "frames.pt2"
    torch.export.save(ep, src)
    with pytest.raises(InputError) as err:
        export(src, ["onnx"], ExportOptions(out=tmp_path / "a"))
    assert err.value.message.startswith("the signature read from the model (x:float32[N,x_d1]) does not fit")
    assert "pin one it admits with --input" in (err.value.hint or "")
    res = export(src, ["onnx"], ExportOptions(out=tmp_path / "b", inputs=["x:float32[N,80]"]))
    assert res.ok
