"""``fwx validate`` end to end, in process: version folders, loose files, reports, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from runtimes import models

from fwx.cli import main
from fwx.manifest import ArtifactEntry, Manifest, SourceInfo, sha256_path

pytestmark = pytest.mark.e2e


def run(args: list[object], capsys: pytest.CaptureFixture[str], device: str = "cpu") -> tuple[int, str, str]:
    """Run ``fwx validate`` in process; returns (exit code, stdout, stderr)."""
    try:
        main(["validate", "--device", device, *[str(a) for a in args]])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def version(torch_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A version folder written by hand (not by fwx export): 3 torch formats + fwx.json, source = state_dict."""
    import torch

    root = tmp_path_factory.mktemp("repo")
    src = root / "mlp_state.pt"
    torch.save(models.torch_mlp().state_dict(), src)
    folder = root / "mlp" / "1"
    folder.mkdir(parents=True)
    arts = {}
    for key, name in (("onnx", "model.onnx"), ("torchscript", "model.torchscript.pt"), ("pt2", "model.pt2")):
        shutil.copy(torch_files[key], folder / name)
        arts[key] = ArtifactEntry(
            format=key, path=name, sha256=sha256_path(folder / name), signature=models.MLP_SIG.to_json()
        )
    Manifest(
        name="mlp",
        version=1,
        source=SourceInfo(str(src), sha256_path(src), "pytorch", "torch"),
        signature=models.MLP_SIG.to_json(),
        artifacts=arts,
        command="fwx export mlp_state.pt --model-class runtimes.models:torch_mlp",
    ).write(folder)
    return folder


def test_version_folder_passes_with_reports(version: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([version, "--report", tmp_path / "r.json", "--report", tmp_path / "r.html"], capsys)
    assert code == 0, out + err
    assert "verdict: PASS" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["passed"]
    assert len(data["artifacts"]) == 2
    assert data["reference"]["key"] == "onnx"
    assert any("could not rebuild the source" in n and "--source-model" in n for n in data["notes"]), data["notes"]
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_source_rebuilt_with_model_class(version: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = version.parent.parent / "mlp_state.pt"  # outside the version folder: named, never read from fwx.json
    code, out, _ = run([version, "--model-class", "runtimes.models:torch_mlp", "--source-model", src, "--json"], capsys)
    data = json.loads(out)
    assert code == 0
    assert data["reference"]["key"] == "source (pytorch)"
    assert len(data["artifacts"]) == 3


def test_reference_by_format(version: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([version, "--reference", "pt2", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["reference"]["key"] == "pt2"


def test_checksum_mismatch_is_an_error(version: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "v"
    shutil.copytree(version, bad)
    with (bad / "model.onnx").open("ab") as fh:
        fh.write(b"\0")
    code, _, err = run([bad, "--report", tmp_path / "r.json"], capsys)
    assert code == 1
    assert "checksum mismatch for onnx" in err
    assert not (tmp_path / "r.json").exists()


def test_loose_files_fail_then_pass_with_override(
    torch_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files = [torch_files["onnx"], torch_files["onnx_perturbed"]]
    code, out, _ = run(files, capsys)
    assert code == 1
    assert "perturbed.onnx: output 'logits': max abs err" in out
    assert "verdict: FAIL" in out
    code, out, _ = run([*files, "--tolerance", "logits=0.5"], capsys)
    assert code == 0, out


def test_data_that_does_not_fit(
    torch_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.savez(tmp_path / "d.npz", x=np.ones((2, 7), np.float32))
    code, out, err = run(
        [torch_files["onnx"], torch_files["pt2"], "--data", tmp_path / "d.npz", "--report", tmp_path / "r.json"], capsys
    )
    assert code == 2
    assert "has shape [2, 7], the signature says ['N', 8]" in err
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1
    assert not (tmp_path / "r.json").exists()


def test_user_data_runs_two_batch_sizes(
    torch_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.savez(tmp_path / "d.npz", x=np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32))
    code, out, _ = run(
        [torch_files["onnx"], torch_files["onnx_pinned"], "--data", tmp_path / "d.npz", "--json"], capsys
    )
    data = json.loads(out)
    assert [s["x"]["shape"] for s in data["inputs"]] == [[6, 8], [1, 8]]
    assert code == 1
    assert any("crashed" in f for f in data["failures"])


def test_corrupt_artifact_and_loose_torchscript(
    torch_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x18\x00\x00\x00TFL3")
    code, _, err = run([torch_files["onnx"], bad], capsys)
    assert code == 2
    assert "not a valid TFLite model" in err
    code, _, err = run([torch_files["onnx"], torch_files["torchscript"]], capsys)
    assert code == 2
    assert "--trust-model-code" in err
    code, out, _ = run([torch_files["onnx"], torch_files["torchscript"], "--trust-model-code"], capsys)
    assert code == 0, out


def test_incompatible_signatures(torch_files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([torch_files["onnx"], models.layout_artifacts()["cnn_nhwc"]], capsys)
    assert code == 1
    assert "incompatible signatures" in err


def test_bad_flags(torch_files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    for flags in (
        ["--tolerance", "logits"],
        ["--int-range", "5,1"],
        ["--atol", "-1"],
        ["--report", "r.txt"],
        ["--reference", "tflite"],
    ):
        code, _, err = run([torch_files["onnx"], torch_files["pt2"], *flags], capsys)
        assert code == 2, (flags, err)


def test_cuda_without_gpu(torch_files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from fwx.validators.pipeline import cuda_usable

    if cuda_usable():
        pytest.skip("a GPU is present")
    code, _, err = run([torch_files["onnx"], torch_files["pt2"]], capsys, device="cuda")
    assert code == 2
    assert "no usable CUDA GPU" in err
    code, out, _ = run([torch_files["onnx"], torch_files["pt2"], "--json"], capsys, device="auto")
    assert code == 0
    assert "ran on CPU" in json.loads(out)["notes"][0]
