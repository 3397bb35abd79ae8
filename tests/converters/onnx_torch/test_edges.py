"""The two edges as the planner and the exporter see them: precheck, options, metadata, failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import helper
from onnx_torch_helpers import graph_model, rand

from fwx.converters.base import ConvertOptions, SourceModel, edges
from fwx.converters.onnx2pt2 import OnnxToExportedProgram
from fwx.converters.onnx2torchscript import OnnxToTorchScript
from fwx.converters.onnx_torch.convert import SIGNATURE_FILE
from fwx.converters.onnx_torch.sample import index_bounds
from fwx.errors import ExportError, InputError, UnsupportedOpsError
from fwx.formats import Format
from fwx.signature import Signature


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """x[n, 4] -> MatMul -> Add -> Relu -> y[n, 3], plus a second output s = ReduceSum(y)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
        helper.make_node("ReduceSum", ["y"], ["s"], keepdims=1),
    ]
    model = graph_model(
        nodes,
        {"x": rand(2, 4)},
        consts={"w": rand(4, 3, seed=1), "b": rand(3, seed=2)},
        outputs=["y", "s"],
        dims={"x": ["n", 4]},
        opset=13,
    )
    return _save(model, tmp_path_factory.mktemp("edges") / "dense.onnx")


def _src(path: Path, sample: dict[str, np.ndarray] | None = None) -> SourceModel:
    return SourceModel(Format.ONNX, path, Signature(()), sample_inputs=sample or {})


def test_edges_are_registered_and_the_planner_reaches_them_from_keras() -> None:
    from fwx.converters.plan import plans

    table = edges()
    assert any(e.cls == "OnnxToTorchScript" for e in table[(Format.ONNX, Format.TORCHSCRIPT)])
    assert any(e.cls == "OnnxToExportedProgram" for e in table[(Format.ONNX, Format.PT2)])
    for target, cls in ((Format.TORCHSCRIPT, "OnnxToTorchScript"), (Format.PT2, "OnnxToExportedProgram")):
        found = plans(Format.KERAS, target, include_unavailable=True)
        assert any(p.hops[-1].cls == cls and p.hops[-2].target is Format.ONNX for p in found if len(p.hops) > 1)


def test_edge_modules_import_no_framework() -> None:
    code = (
        "import sys, fwx.converters.onnx2torchscript, fwx.converters.onnx2pt2\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'onnx', 'onnxruntime'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_precheck_lists_every_unsupported_op_at_once(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("NonZero", ["a"], ["b"]),
        helper.make_node("Unique", ["a"], ["c"]),
        helper.make_node("FusedGemm", ["a", "a"], ["d"], domain="com.microsoft"),
        helper.make_node("LSTM", ["a", "w", "r"], ["e"], hidden_size=2, clip=1.0),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", 1, [2, 2])],
        [helper.make_tensor_value_info(o, 1, None) for o in "bcde"],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    path = _save(model, tmp_path / "bad.onnx")
    for edge in (OnnxToTorchScript(), OnnxToExportedProgram()):
        with pytest.raises(UnsupportedOpsError) as info:
            edge.precheck(_src(path), ConvertOptions())
        assert info.value.ops == ["LSTM(clip)", "NonZero", "Unique", "com.microsoft.FusedGemm"]


def test_unreadable_file_is_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not an onnx file")
    with pytest.raises(InputError):
        OnnxToTorchScript().precheck(_src(bad), ConvertOptions())


def test_result_metadata_signature_and_positional_outputs(dense: Path, tmp_path: Path) -> None:
    result = OnnxToTorchScript().convert(_src(dense), tmp_path / "m.pt", ConvertOptions())
    assert result.tool == "fwx-onnx-torch"
    assert torch.__version__ in result.tool_version
    assert str(result.signature) == "(x:float32[N,4]) -> (y:float32[N,3], s:float32[1,1])"
    assert result.extra["torchscript_mode"] == "script"
    sizes = [c["sizes"]["n"] for c in result.extra["verification"] if "skipped" not in c]
    assert sorted(sizes) == [1, 2, 5]
    files = {SIGNATURE_FILE: ""}
    module = torch.jit.load(str(result.path), _extra_files=files)
    assert json.loads(files[SIGNATURE_FILE]) == result.signature.to_json()
    y, s = module(torch.ones(7, 4))
    assert tuple(y.shape) == (7, 3)
    assert torch.allclose(s, y.sum().reshape(1, 1))


def test_artifacts_run_in_fwx_runtimes_by_pinned_names(dense: Path, tmp_path: Path) -> None:
    from fwx.runtimes.base import load_runtime

    x = rand(6, 4, seed=9)
    for edge, fmt, name in (
        (OnnxToTorchScript(), Format.TORCHSCRIPT, "m.pt"),
        (OnnxToExportedProgram(), Format.PT2, "m.pt2"),
    ):
        result = edge.convert(_src(dense), tmp_path / name, ConvertOptions())
        with (
            load_runtime(fmt, result.path, signature_hint=result.signature) as rt,
            load_runtime(Format.ONNX, dense) as ref,
        ):
            got, want = rt.infer({"x": x}), ref.infer({"x": x})
        assert set(got) == {"y", "s"}
        for k in want:
            np.testing.assert_allclose(got[k], want[k], atol=1e-5)


def test_static_shapes_pins_the_sample_sizes(dense: Path, tmp_path: Path) -> None:
    opts = ConvertOptions(static_shapes=True)
    for edge, name in ((OnnxToTorchScript(), "s.pt"), (OnnxToExportedProgram(), "s.pt2")):
        result = edge.convert(_src(dense, {"x": rand(3, 4)}), tmp_path / name, opts)
        assert result.signature.inputs[0].shape == (3, 4)
        assert [c["sizes"] for c in result.extra["verification"]] == [{"n": 3}]


def test_trace_that_bakes_sizes_is_refused(tmp_path: Path) -> None:
    """Split into equal halves computes its chunk from the size: a trace bakes it, verification catches it."""
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)
    path = _save(
        graph_model([node], {"x": rand(2, 4)}, outputs=["a", "b"], dims={"x": [2, "m"]}, opset=18),
        tmp_path / "split.onnx",
    )
    with pytest.raises(ExportError, match="disagrees with onnxruntime"):
        OnnxToTorchScript().convert(_src(path), tmp_path / "t.pt", ConvertOptions(torchscript_mode="trace"))
    result = OnnxToTorchScript().convert(_src(path), tmp_path / "s.pt", ConvertOptions())
    assert result.extra["torchscript_mode"] == "script"


def test_pt2_keeps_named_dims_shared_between_inputs(tmp_path: Path) -> None:
    node = helper.make_node("Add", ["a", "b"], ["y"])
    model = graph_model([node], {"a": rand(2, 3), "b": rand(2, 3)}, dims={"a": ["batch", 3], "b": ["batch", 3]})
    result = OnnxToExportedProgram().convert(
        _src(_save(model, tmp_path / "add.onnx")), tmp_path / "a.pt2", ConvertOptions()
    )
    assert [s.shape for s in result.signature.inputs] == [("batch", 3), ("batch", 3)]
    ep = torch.export.load(str(result.path))
    assert len(ep.range_constraints) == 1  # one symbol for both inputs


def test_index_bounds_follow_cast_into_gather() -> None:
    nodes = [helper.make_node("Cast", ["ids"], ["i"], to=7), helper.make_node("Gather", ["table", "i"], ["y"])]
    model = graph_model(nodes, {"ids": np.zeros((2, 3), np.int32)}, consts={"table": rand(11, 4)})
    assert index_bounds(model) == {"ids": 11}


def test_given_sample_with_batch_one_keeps_its_other_sizes(tmp_path: Path) -> None:
    """A graph that only runs at s=4 (like the legacy exporter's baked sequence length) with a batch-1 sample:
    the batch is raised to 2 for torch.export, s stays 4, and s is reported as fixed by the graph."""
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    model = graph_model(
        [node], {"x": rand(2, 4)}, consts={"shape": np.array([0, 4, 1], np.int64)}, dims={"x": ["n", "s"]}
    )
    path = _save(model, tmp_path / "fixed.onnx")
    result = OnnxToExportedProgram().convert(_src(path, {"x": rand(1, 4)}), tmp_path / "f.pt2", ConvertOptions())
    assert result.signature.inputs[0].shape == ("n", 4)
    assert any("dims s are fixed by the ONNX graph" in n for n in result.notes)
    assert result.extra["verification"][0]["sizes"] == {"n": 2, "s": 4}
