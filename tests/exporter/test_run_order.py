"""What an export runs, and how often: intermediates first, a baked prefix tried last, the source run once per sample.

Timing is never asserted; these check the work skipped is the work that could
not succeed, and that every artifact is still read back and validated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fwx.converters.plan import best_plans
from fwx.exporter import ExportOptions, export
from fwx.exporter.readback import baked_axes
from fwx.exporter.reference_memo import RememberingRuntime, feed_key
from fwx.exporter.targets import run_order
from fwx.formats import TARGETS, Format
from fwx.signature import Signature, TensorSpec

torch = pytest.importorskip("torch")

from . import pt2_models  # noqa: E402 - needs torch


def _sig(batch: str | int, out_batch: str | int) -> Signature:
    return Signature(
        (TensorSpec("x", "float32", (batch, 6)),),
        (TensorSpec("y", "float32", (out_batch, 3)),),
    )


def test_baked_axes_names_each_pinned_dynamic_axis_the_artifact_fixes() -> None:
    pinned = _sig("N", "N")
    assert baked_axes(pinned, _sig("N", "N")) == []
    assert baked_axes(pinned, _sig("N", 2)) == ["output 'y' axis 0 is fixed to 2, pinned dynamic (N)"]
    assert baked_axes(pinned, _sig(2, 2)) == [
        "input 'x' axis 0 is fixed to 2, pinned dynamic (N)",
        "output 'y' axis 0 is fixed to 2, pinned dynamic (N)",
    ]
    renamed = Signature((TensorSpec("z", "float32", (2, 6)),), _sig(2, 2).outputs)
    assert baked_axes(pinned, renamed) == []  # another interface is read-back's error, not a baked size


def test_targets_that_others_pass_through_run_first_and_ties_keep_the_targets_order() -> None:
    plans = {fmt: best_plans(Format.PYTORCH, fmt) for fmt in TARGETS}
    order = run_order(plans)
    assert order[0] is Format.ONNX  # every other target's later paths go through it
    assert order.index(Format.SAVEDMODEL) < order.index(Format.TFLITE)
    assert sorted(order, key=TARGETS.index) == list(TARGETS)
    direct = {Format.TORCHSCRIPT: plans[Format.TORCHSCRIPT][:1], Format.PT2: plans[Format.PT2][:1]}
    assert run_order(direct) == [Format.TORCHSCRIPT, Format.PT2]


@pytest.fixture(scope="module")
def batch_view_export(tmp_path_factory: pytest.TempPathFactory) -> Any:
    src = pt2_models.save_batch_view(tmp_path_factory.mktemp("pt2") / "batch_view.pt2")
    return export(src, ["torchscript", "onnx"], ExportOptions(out=tmp_path_factory.mktemp("repo")))


@pytest.mark.slow
def test_a_prefix_that_bakes_a_dynamic_axis_is_not_converted_further(batch_view_export: Any) -> None:
    result = batch_view_export
    assert result.ok
    assert list(result.manifest.artifacts) == ["torchscript", "onnx"]  # fwx.json keeps the TARGETS order
    onnx, ts = result.manifest.artifacts["onnx"], result.manifest.artifacts["torchscript"]
    assert [h["tool"] for h in onnx.hops] == ["torch.onnx.export(dynamo=True)"]
    assert onnx.validation["passed"]
    assert ts.validation["passed"]
    legacy_onnx = next(n for n in onnx.notes if "TorchScript exporter" in n)
    assert "output 'output_0' axis 0 is fixed to 2" in legacy_onnx  # the ONNX target's own read-back refused it
    legacy_ts = next(n for n in ts.notes if "TorchScript exporter" in n)
    # the TorchScript path through that file went last and, another path passing, was never converted
    assert "not tried: the onnx written by pytorch -> onnx (torch.onnx (TorchScript exporter))" in legacy_ts
    assert "fixes a pinned dynamic axis (output 'output_0' axis 0 is fixed to 2" in legacy_ts
    assert "is wrong at other sizes" in legacy_ts
    assert [n.split(":")[0] for n in ts.notes[1:3]] == [  # notes keep the planner's order of paths
        "passed over pytorch --[torch.jit]--> torchscript",
        "passed over pytorch --[torch.onnx (TorchScript exporter)]--> onnx --[fwx-onnx-torch]--> torchscript",
    ]


def test_the_source_runs_once_per_distinct_sample() -> None:
    from fwx.runtimes.eager_torch import EagerTorchRuntime

    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 3).eval()
    sig = _sig("N", "N")
    ref = RememberingRuntime(EagerTorchRuntime.from_module(lin, sig))
    a = {"x": np.ones((2, 6), np.float32)}
    b = {"x": np.full((2, 6), 2.0, np.float32)}
    first = ref.infer(a)
    first["y"][:] = 0.0  # a caller altering its answer cannot alter the next caller's
    again, other = ref.infer(dict(a)), ref.infer(b)
    assert ref.runs == 2
    expected = lin(torch.ones(2, 6)).detach().numpy()
    np.testing.assert_allclose(again["y"], expected, rtol=1e-6)
    assert not np.allclose(other["y"], expected)
    ref.infer({"x": np.ones((3, 6), np.float32)})  # another shape is another feed
    assert ref.runs == 3
    assert ref.format is Format.PYTORCH
    assert ref.provider == ref.inner.provider
    ref.close()


def test_string_feeds_are_keyed_by_their_values() -> None:
    a = np.array([["cat", "dog"]], dtype=object)
    same = np.array([["cat", "dog"]], dtype=object)
    assert feed_key({"s": a}) == feed_key({"s": same})
    a[0, 1] = "emu"  # in place: an object array's buffer (its pointers) may not change, its values do
    assert feed_key({"s": a}) != feed_key({"s": same})
