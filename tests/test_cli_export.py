"""``fwx export`` through the CLI: exit codes, one error line, no partial version folder.

Runs ``fwx.cli.main`` in-process (PyTorch sources only, so these stay fast);
the kill test and the missing-extra test need a real subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from exporter.fixtures import (
    CNN_CLASS,
    CNN_INPUT,
    ROOT,
    TOYS,
    _reset_ui,
    _samples_importable,
    assert_refused,
    cli,
    numbered_versions,
)
from exporter.fixtures import torch_files as torch_files

__all__ = ["_reset_ui", "_samples_importable", "cli", "torch_files"]

CNN = ["--model-class", CNN_CLASS, "--input", CNN_INPUT]


def test_missing_file(cli, tmp_path: Path) -> None:
    res = cli("export", tmp_path / "nope.pt", "--to", "onnx", "--out", tmp_path / "a")
    assert_refused(res, tmp_path / "a", 2, "does not exist")


def test_unknown_format(cli, torch_files, tmp_path: Path) -> None:
    res = cli("export", torch_files["garbage"], "--to", "onnx", "--out", tmp_path)
    assert_refused(res, tmp_path, 2, "cannot tell the format")


def test_truncated_model(cli, torch_files, tmp_path: Path) -> None:
    res = cli("export", torch_files["truncated"], *CNN, "--to", "onnx", "--out", tmp_path)
    assert_refused(res, tmp_path, 2, "truncated")


def test_input_of_wrong_rank(cli, torch_files, tmp_path: Path) -> None:
    res = cli(
        "export",
        torch_files["state_dict"],
        "--model-class",
        CNN_CLASS,
        "--input",
        "image:float32[N,3,32]",
        "--to",
        "onnx",
        "--out",
        tmp_path,
    )
    assert_refused(res, tmp_path, 2, "--input image:float32[N,3,32]", "does not fit")


def test_input_of_wrong_dtype(cli, torch_files, tmp_path: Path) -> None:
    res = cli(
        "export",
        torch_files["state_dict"],
        "--model-class",
        CNN_CLASS,
        "--input",
        "image:int64[N,3,32,32]",
        "--to",
        "onnx",
        "--out",
        tmp_path,
    )
    assert_refused(res, tmp_path, 2, "image:int64", "does not fit")


def test_too_many_inputs(cli, torch_files, tmp_path: Path) -> None:
    res = cli(
        "export", torch_files["state_dict"], *CNN, "--input", "mask:float32[N,1]", "--to", "onnx", "--out", tmp_path
    )
    assert_refused(res, tmp_path, 2, "forward takes 1 input")


def test_bad_input_spec(cli, torch_files, tmp_path: Path) -> None:
    res = cli(
        "export",
        torch_files["state_dict"],
        "--model-class",
        CNN_CLASS,
        "--input",
        "image float32",
        "--to",
        "onnx",
        "--out",
        tmp_path,
    )
    assert_refused(res, tmp_path, 2, "cannot parse tensor spec")


def test_unknown_target(cli, torch_files, tmp_path: Path) -> None:
    res = cli("export", torch_files["state_dict"], *CNN, "--to", "coreml", "--out", tmp_path)
    assert_refused(res, tmp_path, 2, "unknown format 'coreml'")


def test_unsafe_pickle(cli, torch_files, tmp_path: Path) -> None:
    res = cli("export", torch_files["evil"], *CNN, "--to", "onnx", "--out", tmp_path)
    assert_refused(res, tmp_path, 2, "system")
    assert "--trust-model-code" in res.err
    assert not torch_files["sentinel"].exists()


def test_unsupported_op_at_requested_opset(cli, tmp_path: Path) -> None:
    res = cli(
        "export",
        f"{TOYS}:build_cumsum",
        "--input",
        "x:float32[N,4]",
        "--to",
        "onnx",
        "--opset",
        "10",
        "--out",
        tmp_path,
    )
    assert_refused(res, tmp_path, 1, "ONNX opset 10", "cumsum")
    assert "--opset 11" in res.err


def test_opset_10_is_written_exactly(cli, tmp_path: Path) -> None:
    import onnx

    res = cli(
        "export",
        f"{ROOT}/samples/models.py:build_torch_cnn",
        "--input",
        CNN_INPUT,
        "--to",
        "onnx",
        "--opset",
        "10",
        "--out",
        tmp_path,
    )
    assert res.code == 0, res.err
    model = onnx.load(str(tmp_path / "build_torch_cnn" / "1" / "model.onnx"))
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [10]
    manifest = json.loads((tmp_path / "build_torch_cnn" / "1" / "fwx.json").read_text())
    assert manifest["artifacts"]["onnx"]["opset"] == 10


def test_json_is_one_document(cli, torch_files, tmp_path: Path) -> None:
    res = cli("export", torch_files["state_dict"], *CNN, "--to", "torchscript", "--out", tmp_path, "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["ok"] is True
    assert doc["targets"][0]["format"] == "torchscript"
    assert doc["targets"][0]["check"].startswith("PASS")
    assert doc["manifest"]["artifacts"]["torchscript"]["validation"]["passed"] is True


def test_human_summary_table(cli, torch_files, tmp_path: Path) -> None:
    res = cli("export", torch_files["state_dict"], *CNN, "--output", "logits", "--to", "pt2", "--out", tmp_path)
    assert res.code == 0, res.err
    header = res.out.splitlines()[0].split()
    assert header == ["format", "path", "size", "signature", "check"]
    assert "model.pt2" in res.out
    assert "PASS" in res.out
    assert "✓ export pt2" in res.err


def test_plan_runs_nothing(cli, torch_files, tmp_path: Path) -> None:
    res = cli("export", torch_files["state_dict"], "--to", "onnx,torchscript", "--plan", "--out", tmp_path, "--json")
    assert res.code == 0, res.err
    plans = json.loads(res.out)["plans"]
    assert plans["onnx"][0] == "pytorch --[torch.onnx (TorchScript exporter)]--> onnx"
    assert plans["torchscript"][0] == "pytorch --[torch.jit]--> torchscript"
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_failed_validation_publishes_nothing_unless_kept(cli, tmp_path: Path) -> None:
    args = [
        "export",
        f"{TOYS}:build_baked_batch",
        "--input",
        "x:float32[N,6]",
        "--to",
        "torchscript",
        "--torchscript-mode",
        "trace",
        "--out",
        tmp_path,
    ]
    res = cli(*args)
    assert_refused(res, tmp_path, 1, "validation failed", "torchscript")
    kept = cli(*args, "--keep-failed")
    assert kept.code == 1
    entry = json.loads((tmp_path / "build_baked_batch" / "1" / "fwx.json").read_text())["artifacts"]["torchscript"]
    assert entry["status"] == "failed"
    assert entry["validation"]["passed"] is False


def test_missing_extra_names_the_pip_extra(tmp_path: Path) -> None:
    model = tmp_path / "m.keras"
    import zipfile

    with zipfile.ZipFile(model, "w") as zf:
        zf.writestr("config.json", '{"class_name": "Functional", "config": {"layers": []}}')
        zf.writestr("metadata.json", "{}")
        zf.writestr("model.weights.h5", b"")
    code = (
        "import sys\nfor m in ('tensorflow', 'keras', 'tf2onnx'):\n    sys.modules[m] = None\n"
        "from fwx.cli import main\nmain(sys.argv[1:])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "export", str(model), "--to", "savedmodel", "--out", str(tmp_path / "a")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "pip install 'fwx-toolkit[tf]'" in proc.stderr
    assert numbered_versions(tmp_path / "a") == []


@pytest.mark.slow
def test_killed_export_leaves_no_version(torch_files, tmp_path: Path) -> None:
    """SIGKILL while converting: only a hidden staging folder may remain, never a numbered version."""
    out = tmp_path / "repo"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fwx",
            "export",
            str(torch_files["state_dict"]),
            *CNN,
            "--to",
            "torchscript,pt2,onnx",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    staged: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        staged = [p for p in out.glob(".fwx-out-*/cnn/.fwx-tmp-*/**/*") if p.is_file()]  # the loader's stage
        if staged:
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert staged, "the export finished before anything was staged"
    assert proc.returncode == -signal.SIGKILL
    assert numbered_versions(out) == []
    assert list(out.glob(".fwx-out-*/cnn/.fwx-tmp-*"))  # the half-done work is only ever in the hidden folder


def test_keras_class_from_a_foreign_module_is_refused(cli, tmp_path: Path) -> None:
    """Refused from the config alone: Keras (and the foreign module) are never imported."""
    import zipfile

    layer = {"module": "evil_pkg.layers", "class_name": "Boom", "config": {}, "registered_name": "evil>Boom"}
    config = {"module": "keras.src.models.functional", "class_name": "Functional", "config": {"layers": [layer]}}
    model = tmp_path / "foreign.keras"
    with zipfile.ZipFile(model, "w") as zf:
        zf.writestr("config.json", json.dumps(config))
        zf.writestr("metadata.json", "{}")
        zf.writestr("model.weights.h5", b"")
    res = cli("export", model, "--to", "savedmodel", "--out", tmp_path / "repo")
    assert_refused(res, tmp_path / "repo", 2, "outside Keras", "evil_pkg.layers.evil>Boom")
    assert "--trust-model-code" in res.err


def test_a_failed_named_target_publishes_nothing_and_says_what_passed(cli, tmp_path: Path) -> None:
    """--to torchscript,onnx where ONNX cannot be written at --opset 10: exit 1 (a conversion failure, not a usage
    error), one error line naming the failed target, a hint naming the one that passed; --json carries both."""
    args = ["export", f"{TOYS}:build_cumsum", "--input", "x:float32[N,4]", "--to", "torchscript,onnx"]
    args += ["--opset", "10", "--out", tmp_path]
    res = cli(*args, "--json")
    assert_refused(res, tmp_path, 1, "onnx: ")
    assert "torchscript passed but nothing was published; --keep-failed" in res.err
    doc = json.loads(res.out)
    assert doc["ok"] is False
    assert doc["exit_code"] == 1
    targets = {t["format"]: t for t in doc["targets"]}
    assert targets["torchscript"]["status"] == "ok"
    assert targets["torchscript"]["published"] is False
    assert targets["torchscript"]["check"].startswith("PASS")
    assert targets["onnx"]["status"] == "failed"
    assert "opset 10" in doc["failed"]["onnx"]["error"]
    kept = cli(*args, "--keep-failed", "--json")
    assert kept.code == 1
    manifest = json.loads((tmp_path / "build_cumsum" / "1" / "fwx.json").read_text())
    assert list(manifest["artifacts"]) == ["torchscript"]
    assert "opset 10" in manifest["failed"]["onnx"]["error"]
    assert {t["format"]: t["published"] for t in json.loads(kept.out)["targets"]} == {
        "torchscript": True,
        "onnx": False,
    }
