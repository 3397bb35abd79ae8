"""The planner on the real edge table and on small made-up graphs: paths, order, options, missing extras, --plan.

Nothing here loads or converts a model: the planner must answer from the edge
table alone (``fwx export --plan`` imports no framework).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest

from fwx.converters import base
from fwx.converters.base import Converter, ConvertOptions, ConvertResult, SourceModel
from fwx.converters.plan import Plan, best_plans, plans, reachable
from fwx.errors import ExportError, MissingDependencyError
from fwx.formats import TARGETS, Format
from fwx.quantize.options import QuantOptions

F = Format
SOURCES = (F.PYTORCH, F.KERAS, F.SAVEDMODEL, F.ONNX)


def hops(plan: Plan) -> list[tuple[str, str]]:
    return [(h.source.value, h.target.value) for h in plan.hops]


def edge_names(plan: Plan) -> list[str]:
    return [h.cls for h in plan.hops]


# --- the real edge table ---------------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_every_source_reaches_every_target(source: Format) -> None:
    assert reachable(source) == list(TARGETS)


@pytest.mark.parametrize(
    ("source", "target", "path"),
    [
        (F.PYTORCH, F.TORCHSCRIPT, [("pytorch", "torchscript")]),
        (F.PYTORCH, F.PT2, [("pytorch", "pt2")]),
        (F.PYTORCH, F.SAVEDMODEL, [("pytorch", "onnx"), ("onnx", "savedmodel")]),
        (F.PYTORCH, F.TFLITE, [("pytorch", "onnx"), ("onnx", "savedmodel"), ("savedmodel", "tflite")]),
        (F.KERAS, F.TFLITE, [("keras", "savedmodel"), ("savedmodel", "tflite")]),
        (F.KERAS, F.TORCHSCRIPT, [("keras", "onnx"), ("onnx", "torchscript")]),
        (F.KERAS, F.PT2, [("keras", "onnx"), ("onnx", "pt2")]),
        (F.SAVEDMODEL, F.TORCHSCRIPT, [("savedmodel", "onnx"), ("onnx", "torchscript")]),
        (F.ONNX, F.TFLITE, [("onnx", "savedmodel"), ("savedmodel", "tflite")]),
        (F.ONNX, F.PT2, [("onnx", "pt2")]),
    ],
    ids=lambda v: v.value if isinstance(v, Format) else None,
)
def test_the_first_plan_is_the_shortest(source: Format, target: Format, path: list[tuple[str, str]]) -> None:
    found = best_plans(source, target)
    assert hops(found[0]) == path
    assert [len(p.hops) for p in found] == sorted(len(p.hops) for p in found)


def test_alternatives_follow_the_preferred_one_in_order() -> None:
    """Same length: the cheaper edge first (the TorchScript-based ONNX exporter, then dynamo)."""
    found = best_plans(F.PYTORCH, F.TORCHSCRIPT)
    assert [edge_names(p) for p in found] == [
        ["TorchToTorchScript"],
        ["TorchToOnnx", "OnnxToTorchScript"],
        ["TorchToOnnxDynamo", "OnnxToTorchScript"],
    ]
    assert [p.cost for p in found] == sorted(p.cost for p in found)
    keras_sm = best_plans(F.KERAS, F.SAVEDMODEL)
    assert [edge_names(p) for p in keras_sm] == [["KerasToSavedModel"], ["KerasToOnnx", "OnnxToSavedModel"]]


def test_no_path_visits_a_format_twice_except_its_source_once_more() -> None:
    for source in SOURCES:
        for target in TARGETS:
            for plan in plans(source, target):
                visited = [h.source for h in plan.hops] + [plan.hops[-1].target] if plan.hops else []
                again = [f for f in visited if visited.count(f) > 1]
                assert set(again) <= {source}, plan.describe()
                assert visited.count(source) <= 2, plan.describe()
                assert len(set(plan.hops)) == len(plan.hops), plan.describe()  # no edge twice


def test_every_path_that_can_work_is_offered_to_a_savedmodel() -> None:
    """Issue 12 item 7: a SavedModel with an LSTM fails the direct TFLite edge (TensorListReserve); the
    translated SavedModel (through ONNX) is the way in, so it must be planned, after the direct edge."""
    found = [hops(p) for p in best_plans(F.SAVEDMODEL, F.TFLITE)]
    assert found == [
        [("savedmodel", "tflite")],
        [("savedmodel", "onnx"), ("onnx", "savedmodel"), ("savedmodel", "tflite")],
    ]
    onnx_ts = [hops(p) for p in best_plans(F.ONNX, F.TORCHSCRIPT)]
    assert onnx_ts[0] == [("onnx", "torchscript")]
    assert [("onnx", "savedmodel"), ("savedmodel", "onnx"), ("onnx", "torchscript")] in onnx_ts
    for target in TARGETS:  # the source is never a path's target (a copy is the identity plan)
        for source in SOURCES:
            assert all(p.hops[-1].target is target for p in plans(source, target))


def test_identity_is_a_plan_of_no_hops() -> None:
    (only,) = best_plans(F.ONNX, F.ONNX)
    assert only.hops == ()
    assert only.describe() == "(identity)"
    assert only.to_json() == []


def test_describe_and_json_name_every_tool() -> None:
    plan = best_plans(F.PYTORCH, F.TFLITE)[0]
    assert plan.describe() == (
        "pytorch --[torch.onnx (TorchScript exporter)]--> onnx --[fwx-onnx-tf]--> savedmodel "
        "--[tf.lite.TFLiteConverter]--> tflite"
    )
    assert [(h["source"], h["target"]) for h in plan.to_json()] == hops(plan)
    assert plan.to_json()[1]["module"] == "fwx.converters.onnx2savedmodel"


# --- options ---------------------------------------------------------------------------------------


def test_quantize_keeps_only_paths_whose_last_hop_quantizes() -> None:
    opts = ConvertOptions(quant=QuantOptions("int8"))
    assert [p.hops[-1].cls for p in best_plans(F.KERAS, F.TFLITE, opts)] == ["SavedModelToTFLite"] * 2
    assert best_plans(F.PYTORCH, F.ONNX, opts)  # ONNX is quantised after the float export
    with pytest.raises(ExportError, match="cannot convert pytorch to torchscript with --quantize int8"):
        best_plans(F.PYTORCH, F.TORCHSCRIPT, opts)
    assert reachable(F.PYTORCH, opts) == [F.ONNX, F.TFLITE]


def test_layout_needs_a_hop_that_moves_channels() -> None:
    opts = ConvertOptions(layout="nhwc")
    for target in (F.SAVEDMODEL, F.TFLITE):
        for plan in best_plans(F.PYTORCH, target, opts):
            assert "OnnxToSavedModel" in edge_names(plan)
    with pytest.raises(ExportError, match="cannot convert pytorch to torchscript with --layout nhwc") as exc:
        best_plans(F.PYTORCH, F.TORCHSCRIPT, opts)
    assert "--plan" in (exc.value.hint or "")
    assert reachable(F.PYTORCH, opts) == [F.SAVEDMODEL, F.TFLITE]  # every artifact of a version shares a layout


# --- made-up graphs ---------------------------------------------------------------------------------


class _Fake(Converter):
    tool = "fake"

    def convert(self, src: SourceModel, out: Path, opts: ConvertOptions) -> ConvertResult:
        raise AssertionError("the planner must never convert")


class OnnxNoOpset(_Fake):
    source, target, cost = F.PYTORCH, F.ONNX, 1


class OnnxWithOpset(_Fake):
    source, target, cost = F.PYTORCH, F.ONNX, 9
    honours: ClassVar[frozenset[str]] = frozenset({"opset"})


class NeedsMissingModule(_Fake):
    source, target = F.ONNX, F.TFLITE
    requires: ClassVar[tuple[tuple[str, str], ...]] = (("fwx_no_such_module_xyz", "nothere"),)


class CheapButLong(_Fake):
    source, target, cost = F.ONNX, F.SAVEDMODEL, 0


class SavedModelToTfliteFake(_Fake):
    source, target, cost = F.SAVEDMODEL, F.TFLITE, 0


class _Direct(_Fake):
    source, target, cost = F.PYTORCH, F.TFLITE, 99


Add = Callable[[type[Converter]], None]


@pytest.fixture
def add_edge(monkeypatch: pytest.MonkeyPatch) -> Add:
    """An empty edge table holding two PyTorch -> ONNX edges; returns a function that adds more."""
    monkeypatch.setattr(base, "_EDGES", {})

    def add(cls: type[Converter]) -> None:
        base.register_edge(cls.source, cls.target, __name__, cls.__name__)

    add(OnnxNoOpset)
    add(OnnxWithOpset)
    return add


@pytest.mark.usefixtures("add_edge")
def test_opset_skips_an_edge_that_cannot_write_it() -> None:
    assert [edge_names(p) for p in plans(F.PYTORCH, F.ONNX)] == [["OnnxNoOpset"], ["OnnxWithOpset"]]
    assert [edge_names(p) for p in plans(F.PYTORCH, F.ONNX, ConvertOptions(opset=13))] == [["OnnxWithOpset"]]


def test_fewer_hops_win_over_a_lower_cost(add_edge: Add) -> None:
    add_edge(CheapButLong)
    add_edge(SavedModelToTfliteFake)
    assert edge_names(plans(F.PYTORCH, F.TFLITE)[0]) == ["OnnxNoOpset", "CheapButLong", "SavedModelToTfliteFake"]
    add_edge(_Direct)  # one expensive hop beats three cheap ones
    assert edge_names(plans(F.PYTORCH, F.TFLITE)[0]) == ["_Direct"]


def test_a_missing_tool_names_the_extra_that_installs_it(add_edge: Add) -> None:
    add_edge(NeedsMissingModule)
    assert plans(F.PYTORCH, F.TFLITE) == []
    assert len(plans(F.PYTORCH, F.TFLITE, include_unavailable=True)) == 2
    with pytest.raises(MissingDependencyError) as exc:
        best_plans(F.PYTORCH, F.TFLITE)
    assert exc.value.package == "fwx_no_such_module_xyz"
    assert exc.value.exit_code == 2
    assert "converting pytorch to tflite needs fwx_no_such_module_xyz" in exc.value.message
    assert exc.value.hint == "run: pip install 'fwx-toolkit[nothere]'"


def test_registering_the_same_edge_twice_is_refused(add_edge: Add) -> None:
    with pytest.raises(ValueError, match="already registered"):
        add_edge(OnnxNoOpset)


@pytest.mark.usefixtures("add_edge")
def test_no_edge_at_all_is_a_clear_error() -> None:
    with pytest.raises(ExportError) as exc:
        best_plans(F.KERAS, F.PT2)
    assert exc.value.message == "fwx cannot convert keras to pt2"  # no option narrowed it: none is named


# --- fwx export --plan ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-Relu ONNX model built with onnx.helper (no torch)."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    path = tmp_path_factory.mktemp("plan") / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _fwx(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh interpreter, reporting which heavy frameworks it imported."""
    code = (
        "import sys, json\nfrom fwx.cli import main\ncode = 0\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code or 0\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'tensorflow', 'keras', 'onnxruntime'})\n"
        "print('HEAVY=' + json.dumps(heavy), file=sys.stderr)\nsys.exit(code)"
    )
    return subprocess.run([sys.executable, "-c", code, "export", *args], capture_output=True, text=True, timeout=120)


def test_plan_prints_every_path_without_loading_anything(tiny_onnx: Path) -> None:
    res = _fwx(str(tiny_onnx), "--plan", "--to", "all")
    assert res.returncode == 0, res.stderr
    lines = [line.split() for line in res.stdout.splitlines()[2:]]
    assert [(row[0], row[1]) for row in lines] == [
        ("torchscript", "1"),
        ("torchscript", "2"),
        ("pt2", "1"),
        ("pt2", "2"),
        ("savedmodel", "1"),
        ("onnx", "1"),
        ("tflite", "1"),
    ]
    assert "onnx --[fwx-onnx-tf]--> savedmodel --[tf.lite.TFLiteConverter]--> tflite" in res.stdout
    assert "HEAVY=[]" in res.stderr  # nothing was loaded, converted or even imported
    assert not list(tiny_onnx.parent.glob("artifacts*"))
    assert not Path("artifacts", "relu").exists()


def test_plan_json_lists_the_paths_in_the_order_they_are_tried(tiny_onnx: Path) -> None:
    res = _fwx("samples.models:build_torch_cnn", "--plan", "--to", "torchscript,tflite", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)["plans"]
    assert list(data) == ["torchscript", "tflite"]
    assert data["torchscript"][0] == "pytorch --[torch.jit]--> torchscript"
    assert len(data["torchscript"]) == 3
    assert len(data["tflite"]) == 2
    assert all(p.endswith("--> tflite") and p.count("-->") == 3 for p in data["tflite"])


def test_plan_for_an_impossible_request_exits_1_without_a_traceback(tiny_onnx: Path) -> None:
    res = _fwx(str(tiny_onnx), "--plan", "--to", "torchscript", "--quantize", "int8")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert "cannot convert onnx to torchscript with --quantize int8" in res.stderr
