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
from fwx.errors import ExportError, UnsupportedOpsError
from fwx.exporter import ExportOptions, ExportResult, export
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
        from fwx import ui
        from fwx.cli import main

        ui.state.json = ui.state.debug = False  # --json/--debug set process-wide flags
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
    res = export(MLP, ["tflite"], ExportOptions(out=tmp_path, inputs=["x:float32[N,20]"], keep_intermediate=True))
    manifest, folder = published(res)
    entry = manifest.artifacts["tflite"]
    assert sorted(manifest.artifacts) == ["tflite"]
    assert [h["target"] for h in entry.hops] == ["onnx", "savedmodel", "tflite"]
    for hop in entry.hops[:-1]:
        kept = folder / hop["path"]
        assert kept.exists(), hop
        assert hop["path"].startswith("intermediate/tflite/")
        assert hop["sha256"] == sha256_path(kept)
    res2 = export(MLP, ["tflite"], ExportOptions(out=tmp_path, inputs=["x:float32[N,20]"]))
    manifest2, folder2 = published(res2)
    assert not (folder2 / "intermediate").exists()
    assert all("path" not in h for h in manifest2.artifacts["tflite"].hops[:-1])


# --- --layout and --static-shapes --------------------------------------------------------------------


def test_layout_nhwc_for_a_target_that_cannot_move_channels_is_refused_before_loading(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="cannot convert pytorch to torchscript with --layout nhwc"):
        export(
            f"{mm.__file__}:no_such_factory",
            ["torchscript"],
            ExportOptions(out=tmp_path, convert=ConvertOptions(layout="nhwc")),
        )
    assert not versions(tmp_path)


def test_layout_nhwc_gives_channels_last_savedmodel_and_tflite(tmp_path: Path) -> None:
    res = export(
        RESNET,
        ["savedmodel", "tflite"],
        ExportOptions(out=tmp_path, inputs=[RESNET_IN], convert=ConvertOptions(layout="nhwc")),
    )
    manifest = published(res)[0]
    assert manifest.sig().inputs[0].shape == ("N", 3, mm.HW, mm.HW)  # the pin stays the source's
    for key in ("savedmodel", "tflite"):
        entry = manifest.artifacts[key]
        assert entry.layout == "nhwc"
        assert entry.sig().inputs[0].shape[1:] == (mm.HW, mm.HW, 3)
        assert entry.sig().inputs[0].dynamic_axes == (0,)
        assert entry.validation["passed"] is True


def test_layout_flags_reach_the_planner(cli: Any) -> None:
    """--layout and --static-shapes are CLI flags; --plan shows what they narrow, loading nothing."""
    import json

    res = cli("export", RESNET, "--plan", "--to", "all", "--layout", "NHWC", "--json")
    assert res.code == 0, res.err
    assert sorted(json.loads(res.out)["plans"]) == ["savedmodel", "tflite"]
    res = cli("export", f"{mm.__file__}:build_mlp", "--plan", "--to", "all", "--static-shapes", "--json")
    assert res.code == 0, res.err
    assert sorted(json.loads(res.out)["plans"]) == ["onnx", "pt2", "savedmodel", "tflite", "torchscript"]


def test_a_layout_equal_to_the_sources_is_dropped(tmp_path: Path) -> None:
    """--layout nchw of an NCHW model asks for nothing: TorchScript stays reachable and NCHW."""
    res = export(
        RESNET, ["torchscript"], ExportOptions(out=tmp_path, inputs=[RESNET_IN], convert=ConvertOptions(layout="nchw"))
    )
    entry = published(res)[0].artifacts["torchscript"]
    assert entry.layout == "nchw"
    assert entry.validation["passed"] is True


def test_layout_nchw_of_a_channels_last_model_is_refused(tmp_path: Path) -> None:
    from fwx.errors import UsageError

    src = mm.save_keras("resnet", tmp_path / "resnet.keras")
    with pytest.raises(UsageError, match="--layout nchw cannot be applied to a channels-last"):
        export(src, ["all"], ExportOptions(out=tmp_path / "repo", convert=ConvertOptions(layout="nchw")))
    assert not versions(tmp_path / "repo")


def test_static_shapes_pin_only_when_asked(tmp_path: Path) -> None:
    res = export(
        MLP,
        ["tflite"],
        ExportOptions(out=tmp_path, inputs=["x:float32[N,20]"], convert=ConvertOptions(static_shapes=True)),
    )
    entry = published(res)[0].artifacts["tflite"]
    assert not entry.sig().inputs[0].dynamic_axes
    assert entry.sig().inputs[0].shape == (1, 20)  # batch 1, as asked, not the tracing sample's 2
    assert any("static" in n for n in entry.notes)
    assert entry.validation["passed"] is True
    assert published(res)[0].sig().inputs[0].shape == ("N", 20)  # the pin itself stays dynamic


def test_static_shapes_from_a_savedmodel(tmp_path: Path) -> None:
    """The TF edges fix the shapes themselves (tf2onnx, and TFLite through a traced wrapper)."""
    src = mm.save_savedmodel("mlp", tmp_path / "mlp.savedmodel")
    res = export(
        src, ["onnx", "tflite"], ExportOptions(out=tmp_path / "repo", convert=ConvertOptions(static_shapes=True))
    )
    for key, entry in published(res)[0].artifacts.items():
        assert entry.sig().inputs[0].shape == (1, 20), key
        assert entry.sig().outputs[0].shape == (1, 5), key
        assert entry.validation["passed"] is True, key
    with pytest.raises(ExportError, match="cannot convert savedmodel to savedmodel with --static-shapes"):
        export(src, ["savedmodel"], ExportOptions(out=tmp_path / "repo", convert=ConvertOptions(static_shapes=True)))


# --- unsupported ops ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exotic_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Relu -> Hardmax (no translator has it) -> com.example::Scale (a custom domain)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Hardmax", ["a"], ["b"], axis=-1),
        helper.make_node("Scale", ["b"], ["y"], domain="com.example"),
    ]
    graph = helper.make_graph(
        nodes,
        "exotic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    path = tmp_path_factory.mktemp("exotic") / "exotic.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("target", ["torchscript", "pt2", "savedmodel", "tflite"])
def test_unsupported_ops_are_all_listed_and_nothing_is_written(exotic_onnx: Path, tmp_path: Path, target: str) -> None:
    with pytest.raises(UnsupportedOpsError) as exc:
        # trusted: a custom domain is otherwise refused by fwx.safety before any converter looks at it
        export(exotic_onnx, [target], ExportOptions(out=tmp_path, convert=ConvertOptions(trust_model_code=True)))
    ops = {o.replace("::", ".") for o in exc.value.ops}
    assert ops == {"Hardmax", "com.example.Scale"}, exc.value.ops
    assert exc.value.hint
    assert not versions(tmp_path)


def test_unsupported_ops_on_the_command_line(exotic_onnx: Path, tmp_path: Path, cli: Any) -> None:
    res = cli("export", exotic_onnx, "--to", "all", "--out", tmp_path, "--trust-model-code")
    assert res.code == 1
    assert "Traceback" not in res.err + res.out
    (line,) = [x for x in res.err.splitlines() if x.startswith("error:")]
    assert "Hardmax" in line
    assert "Scale" in line
    assert not versions(tmp_path)


@pytest.fixture(scope="module")
def external_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MLP as ONNX with every weight in ``mlp.bin`` (a loose file's data lies beside it, under a plain name)."""
    import onnx

    folder = tmp_path_factory.mktemp("external")
    src = mm.export_onnx("mlp", folder / "mlp.onnx")
    onnx.save(onnx.load(str(src)), str(src), save_as_external_data=True, location="mlp.bin", size_threshold=0)
    assert (folder / "mlp.bin").exists()
    return src


def test_an_onnx_source_with_external_data_keeps_its_weights(external_onnx: Path, tmp_path: Path) -> None:
    from fwx.errors import ChecksumError

    res = export(external_onnx, ["onnx", "tflite"], ExportOptions(out=tmp_path / "repo"))
    assert res.ok
    manifest, folder = published(res)
    entry = manifest.artifacts["onnx"]
    assert entry.validation["passed"] is True
    assert manifest.artifacts["tflite"].validation["passed"] is True
    assert list(entry.files) == ["model.onnx.data"]  # gathered next to model.onnx, whatever the source called it
    data = folder / "model.onnx.data"
    assert entry.files["model.onnx.data"] == sha256_path(data)
    assert entry.size_bytes == (folder / "model.onnx").stat().st_size + data.stat().st_size
    assert not (folder / "mlp.bin").exists()
    Manifest.read(folder).verify(folder)
    data.write_bytes(data.read_bytes()[:-4] + b"\0\0\0\0")  # the sha256 covers the weights too
    with pytest.raises(ChecksumError, match="model.onnx.data"):
        Manifest.read(folder).verify(folder)


def _relocated(src: Path, dest: Path, location: str) -> Path:
    """A copy of ``src`` (at ``dest``) whose external tensors all point at ``location``."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(model.SerializeToString())
    return dest


@pytest.mark.parametrize("case", ["dotdot", "nested", "absolute", "symlink", "hardlink"])
def test_external_data_outside_the_model_folder_is_refused(external_onnx: Path, tmp_path: Path, case: str) -> None:
    """CVE-2022-25882 / CVE-2024-27318: a location must not read outside the model's folder."""
    from fwx.errors import InputError

    outside = tmp_path / "secret.bin"
    outside.write_bytes((external_onnx.parent / "mlp.bin").read_bytes())
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    location = {
        "dotdot": "../secret.bin",
        "nested": "sub/../../secret.bin",
        "absolute": str(outside),
        "symlink": "link.bin",
        "hardlink": "hard.bin",
    }[case]
    if case == "symlink":
        (model_dir / "link.bin").symlink_to(outside)
    if case == "hardlink":
        (model_dir / "hard.bin").hardlink_to(outside)
    src = _relocated(external_onnx, model_dir / "m.onnx", location)
    with pytest.raises(InputError, match="external data location"):
        export(src, ["onnx"], ExportOptions(out=tmp_path / "repo"))
    assert not versions(tmp_path / "repo")


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
        res = export(src, ["tflite"], ExportOptions(out=tmp_path / "repo"))
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
    assert line.startswith("error: savedmodel -> tflite (tf.lite.TFLiteConverter): TFLite builtins cannot express")
    assert line.count(" -> ") == 1  # named once, not once per layer that saw it
    assert "MatrixDeterminant" in line
    assert "mlir" not in res.err.lower()  # MLIR's dump stays off stderr
    assert "tf.MatrixDeterminant" not in res.err
    assert not versions(tmp_path)
    ok = cli("export", det_savedmodel, "--to", "onnx", "--out", tmp_path)  # the other hops of this model work
    assert ok.code == 0, ok.err
    assert len(versions(tmp_path)) == 1


def test_a_tflite_op_gap_names_the_op(det_savedmodel: Path, tmp_path: Path) -> None:
    with pytest.raises(UnsupportedOpsError) as exc:
        export(det_savedmodel, ["tflite"], ExportOptions(out=tmp_path))
    assert exc.value.ops == ["MatrixDeterminant"]


def test_every_tflite_op_gap_is_listed() -> None:
    """The converter's message lists flex ops and custom ops apart; fwx names them all."""
    from fwx.converters.savedmodel2tflite import unsupported_ops

    text = (
        "error: 'tf.Erfc' op is neither a custom op nor a flex op\n"
        "Some ops are not supported by the native TFLite runtime, you can enable TF kernels fallback\n"
        "TF Select ops: MatrixDeterminant, MatrixInverse\nDetails:\n\ttf.MatrixDeterminant(...)\n"
        "Custom ops: Erfc\n"
    )
    assert unsupported_ops(text) == ["Erfc", "MatrixDeterminant", "MatrixInverse"]
    assert unsupported_ops("Could not translate MLIR to FlatBuffer: out of memory") == []


def test_to_all_skips_what_cannot_be_made_and_publishes_the_rest(
    det_savedmodel: Path, tmp_path: Path, cli: Any
) -> None:
    import json

    res = cli("export", det_savedmodel, "--to", "all", "--out", tmp_path, "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert set(doc["skipped"]) == {"torchscript", "pt2", "tflite"}
    assert "MatrixDeterminant" in doc["skipped"]["tflite"]
    assert doc["skipped"]["torchscript"].startswith("onnx -> torchscript (fwx-onnx-torch): ")
    assert {t["format"]: t["status"] for t in doc["targets"]} == {
        "torchscript": "skipped",
        "pt2": "skipped",
        "savedmodel": "ok",
        "onnx": "ok",
        "tflite": "skipped",
    }
    (folder,) = versions(tmp_path)
    manifest = Manifest.read(folder)
    assert sorted(manifest.artifacts) == ["onnx", "savedmodel"]
    assert manifest.skipped == doc["skipped"]
    warned = [x for x in res.err.splitlines() if x.startswith("warning: ") and "skipped" in x]
    assert len(warned) == 3, res.err
    shown = cli("inspect", folder)
    assert "skipped tflite: savedmodel -> tflite (tf.lite.TFLiteConverter): " in shown.out
    named = cli("export", det_savedmodel, "--to", "onnx,tflite", "--out", tmp_path)  # named targets fail hard
    assert named.code == 1
    assert len(versions(tmp_path)) == 1


def test_old_manifests_without_skipped_still_load(tmp_path: Path) -> None:
    import json

    data = {
        "schema_version": 1,
        "name": "m",
        "version": 1,
        "signature": {"inputs": [], "outputs": []},
        "source": {"path": "m.onnx", "sha256": "", "format": "onnx", "framework": "onnx"},
        "artifacts": {},
    }
    (tmp_path / "fwx.json").write_text(json.dumps(data))
    assert Manifest.read(tmp_path).skipped == {}
