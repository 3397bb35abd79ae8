"""The matrix's options and bad inputs: --keep-intermediate, --layout, --static-shapes, unsupported ops, tool crashes.

A model a target cannot express gets the list of every op it lacks and no
artifact; a conversion tool that fails is reported with the hop that failed,
without a traceback, exit 1, and no version folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fwx.converters.base import ConvertOptions
from fwx.errors import UnsupportedOpsError
from fwx.exporter import ExportResult, export
from fwx.manifest import Manifest, sha256_path

from . import matrix_models as mm

MLP = f"{mm.__file__}:build_mlp"
RESNET = f"{mm.__file__}:build_resnet"
RESNET_IN = f"image:float32[N,3,{mm.HW},{mm.HW}]"


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    from fwx import ui

    ui.state.quiet = True
    yield
    ui.state.quiet = ui.state.json = ui.state.debug = False


def published(res: ExportResult) -> tuple[Manifest, Path]:
    assert res.manifest is not None
    assert res.version_dir is not None
    return res.manifest, res.version_dir


def versions(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*") if p.is_dir() and p.name.isdigit())


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    """``fwx`` in-process: exit code, stdout, stderr."""

    def run(*args: Any) -> Run:
        from fwx.cli import main

        capsys.readouterr()
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


# --- --keep-intermediate ----------------------------------------------------------------------------


def test_keep_intermediate_publishes_every_hop(tmp_path: Path) -> None:
    res = export(MLP, ["tflite"], out=tmp_path, inputs=["x:float32[N,20]"], keep_intermediate=True)
    manifest, folder = published(res)
    entry = manifest.artifacts["tflite"]
    assert sorted(manifest.artifacts) == ["tflite"]
    assert [h["target"] for h in entry.hops] == ["onnx", "savedmodel", "tflite"]
    for hop in entry.hops[:-1]:
        kept = folder / hop["path"]
        assert kept.exists(), hop
        assert hop["path"].startswith("intermediate/tflite/")
        assert hop["sha256"] == sha256_path(kept)
    res2 = export(MLP, ["tflite"], out=tmp_path, inputs=["x:float32[N,20]"])
    manifest2, folder2 = published(res2)
    assert not (folder2 / "intermediate").exists()
    assert all("path" not in h for h in manifest2.artifacts["tflite"].hops[:-1])


# --- --layout and --static-shapes --------------------------------------------------------------------


def test_layout_nhwc_for_a_target_that_cannot_move_channels_is_refused_before_loading(tmp_path: Path) -> None:
    from fwx.errors import ExportError

    with pytest.raises(ExportError, match="cannot convert pytorch to torchscript with --layout nhwc"):
        export(f"{mm.__file__}:no_such_factory", ["torchscript"], out=tmp_path, options=ConvertOptions(layout="nhwc"))
    assert not versions(tmp_path)


@pytest.mark.xfail(strict=True, reason="the exporter's read-back compares an NHWC artifact with the NCHW pin "
                   "(fwx/exporter/readback.py + runner._check); --layout is not a CLI flag yet")
def test_layout_nhwc_gives_channels_last_savedmodel_and_tflite(tmp_path: Path) -> None:
    res = export(RESNET, ["savedmodel", "tflite"], out=tmp_path, inputs=[RESNET_IN],
                 options=ConvertOptions(layout="nhwc"))
    for key in ("savedmodel", "tflite"):
        entry = published(res)[0].artifacts[key]
        assert entry.layout == "NHWC"
        assert entry.sig().inputs[0].shape[1:] == (mm.HW, mm.HW, 3)
        assert entry.validation["passed"] is True


@pytest.mark.xfail(strict=True, reason="--static-shapes pins the hop's input, then the read-back refuses the "
                   "fixed batch (fwx/exporter/readback.py); --static-shapes is not a CLI flag yet")
def test_static_shapes_pin_only_when_asked(tmp_path: Path) -> None:
    res = export(MLP, ["tflite"], out=tmp_path, inputs=["x:float32[N,20]"], options=ConvertOptions(static_shapes=True))
    entry = published(res)[0].artifacts["tflite"]
    assert not entry.sig().inputs[0].dynamic_axes
    assert any("static" in n for n in entry.notes)


# --- unsupported ops ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exotic_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Relu -> Hardmax (no translator has it) -> com.example::Scale (a custom domain)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Hardmax", ["a"], ["b"], axis=-1),
             helper.make_node("Scale", ["b"], ["y"], domain="com.example")]
    graph = helper.make_graph(nodes, "exotic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    path = tmp_path_factory.mktemp("exotic") / "exotic.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("target", ["torchscript", "pt2", "savedmodel", "tflite"])
def test_unsupported_ops_are_all_listed_and_nothing_is_written(exotic_onnx: Path, tmp_path: Path,
                                                                target: str) -> None:
    with pytest.raises(UnsupportedOpsError) as exc:
        export(exotic_onnx, [target], out=tmp_path)
    ops = {o.replace("::", ".") for o in exc.value.ops}
    assert ops == {"Hardmax", "com.example.Scale"}, exc.value.ops
    assert exc.value.hint
    assert not versions(tmp_path)


def test_unsupported_ops_on_the_command_line(exotic_onnx: Path, tmp_path: Path, cli: Any) -> None:
    res = cli("export", exotic_onnx, "--to", "all", "--out", tmp_path)
    assert res.code == 1
    assert "Traceback" not in res.err + res.out
    (line,) = [x for x in res.err.splitlines() if x.startswith("error:")]
    assert "Hardmax" in line
    assert "Scale" in line
    assert not versions(tmp_path)


@pytest.mark.xfail(strict=True, reason="the identity hop (runner._identity) copies model.onnx without its external "
                   "data file, so the read-back cannot load it")
def test_an_onnx_source_with_external_data_keeps_its_weights(tmp_path: Path) -> None:
    import onnx

    src = mm.export_onnx("mlp", tmp_path / "mlp.onnx")
    model = onnx.load(str(src))
    onnx.save(model, str(src), save_as_external_data=True, location="mlp.onnx.data", size_threshold=0)
    assert (tmp_path / "mlp.onnx.data").exists()
    res = export(src, ["onnx", "tflite"], out=tmp_path / "repo")
    assert res.ok
    assert published(res)[0].artifacts["onnx"].validation["passed"] is True


def test_wrong_numbers_are_never_published_as_ok(tmp_path: Path) -> None:
    """SavedModel (tf.Module over Keras) -> TFLite "succeeds" with NaN today: the export must refuse it.

    Checked independently of the validators: whatever fwx publishes must agree with the SavedModel.
    """
    import numpy as np
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from fwx.errors import ValidationError

    src = mm.save_savedmodel("mlp", tmp_path / "mlp.savedmodel")
    try:
        res = export(src, ["tflite"], out=tmp_path / "repo")
    except ValidationError as exc:
        refused = exc.message
    else:
        refused = ""
    if refused:
        assert "NaN" in refused
        assert not versions(tmp_path / "repo")
        return
    manifest, folder = published(res)
    x = np.random.default_rng(0).standard_normal((3, 20)).astype(np.float32)
    want = tf.saved_model.load(str(src)).signatures["serving_default"](x=tf.constant(x))["probs"].numpy()
    got = Interpreter(model_path=str(folder / manifest.artifacts["tflite"].path)).get_signature_runner()(x=x)["probs"]
    np.testing.assert_allclose(got, want, atol=1e-4)


# --- a conversion tool that fails ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def det_savedmodel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tf.Module computing a determinant: TFLite's builtins have no MatrixDeterminant."""
    import tensorflow as tf

    class Det(tf.Module):  # type: ignore[misc,name-defined]
        @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32, name="m")])  # type: ignore[untyped-decorator]
        def serve(self, m: Any) -> Any:
            return {"det": tf.linalg.det(m)}

    module = Det()
    path = tmp_path_factory.mktemp("det") / "det.savedmodel"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


def test_a_failing_tool_is_reported_with_its_hop(det_savedmodel: Path, tmp_path: Path, cli: Any) -> None:
    res = cli("export", det_savedmodel, "--to", "tflite", "--out", tmp_path)
    assert res.code == 1
    assert "Traceback" not in res.err + res.out
    (line,) = [x for x in res.err.splitlines() if x.startswith("error:")]
    assert "TFLite conversion failed" in line
    assert not versions(tmp_path)
    ok = cli("export", det_savedmodel, "--to", "onnx", "--out", tmp_path)  # the other hops of this model work
    assert ok.code == 0, ok.err
    assert len(versions(tmp_path)) == 1


@pytest.mark.xfail(strict=True, reason="savedmodel2tflite passes on MLIR's first line, not the op list TFLite "
                   "prints ('TF Select ops: MatrixDeterminant'); should raise UnsupportedOpsError")
def test_a_tflite_op_gap_names_the_op(det_savedmodel: Path, tmp_path: Path) -> None:
    with pytest.raises(UnsupportedOpsError) as exc:
        export(det_savedmodel, ["tflite"], out=tmp_path)
    assert exc.value.ops == ["MatrixDeterminant"]
