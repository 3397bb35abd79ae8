"""Dockerfiles are linted with hadolint (no engine here), and `fwx dockerize` writes lint-clean ones."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from fwx.docker import DEPS_WHEEL, build_wheel, plan_image, render_dockerfile, write_deps_wheel, write_docker_files
from fwx.errors import InputError
from fwx.manifest import ArtifactEntry, Manifest, SourceInfo
from fwx.repository import Repository

ROOT = Path(__file__).resolve().parents[2]
HADOLINT = Path(sys.executable).parent / "hadolint"


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HADOLINT), "--no-color", str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.gpu"])
def test_project_dockerfiles_lint_clean(name: str) -> None:
    res = hadolint(ROOT / "docker" / name)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == ""


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.gpu"])
def test_dockerfiles_are_safe_by_default(name: str) -> None:
    text = (ROOT / "docker" / name).read_text()
    assert "USER 1000:1000" in text
    assert "HEALTHCHECK" in text
    assert "EXPOSE 8000 8001" in text
    assert text.count("FROM ") >= 2  # multi-stage: build tools stay in the first stage
    final_stage = text.rsplit("FROM ", 1)[1]
    assert "pip install" not in final_stage
    assert "gcc" not in final_stage


def _build_stage(text: str) -> list[str]:
    """The build stage's instructions, one string each (continuation lines joined, comments dropped)."""
    joined = text.replace("\\\n", " ")
    lines = [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    stages = [i for i, line in enumerate(lines) if line.startswith("FROM ")]
    return lines[stages[0] : stages[1]]


def _split_at_dependencies(stage: list[str]) -> tuple[list[str], list[str]]:
    """The instructions up to and including the one that installs the dependencies, and the rest."""
    deps = next(i for i, line in enumerate(stage) if line.startswith("RUN") and "pip install" in line)
    return stage[: deps + 1], stage[deps + 1 :]


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.gpu"])
def test_dependencies_are_a_layer_that_fwx_source_changes_do_not_touch(name: str) -> None:
    """Everything up to the dependency install is keyed by pyproject.toml, constraints and build args alone."""
    before, after = _split_at_dependencies(_build_stage((ROOT / "docker" / name).read_text()))
    copies = [line for line in before if line.startswith("COPY")]
    assert copies == ["COPY pyproject.toml constraints.txt ./"]  # not README.md: docs edits keep the layer
    assert "--no-deps" not in before[-1]
    assert after[:2] == ["COPY README.md ./", "COPY fwx ./fwx"]  # the source comes after the dependencies ...
    assert "pip install --no-deps" in after[2]  # ... and installs fwx alone
    assert _base_is_a_pinned_arg(name)


def _base_is_a_pinned_arg(name: str) -> bool:
    """The base image is an ARG (a registry-less machine builds on its own base); its default is pinned."""
    text = (ROOT / "docker" / name).read_text()
    arg = "CUDA_IMAGE" if name.endswith(".gpu") else "PYTHON_IMAGE"
    default = next(line for line in text.splitlines() if line.startswith(f"ARG {arg}=")).split("=", 1)[1]
    return ":" in default and text.count(f"FROM ${{{arg}}}") == 2


@pytest.mark.parametrize("gpu", [False, True])
def test_dockerize_installs_dependencies_before_anything_a_model_or_fwx_changes(tmp_path: Path, gpu: bool) -> None:
    root = _repo_with(tmp_path, {"cnn": ["onnx"]})
    plan = plan_image(root, gpu=gpu)
    plan.wheel = "fwx_toolkit-0.1.0-py3-none-any.whl"
    before, after = _split_at_dependencies(_build_stage(render_dockerfile(plan)))
    assert [line for line in before if line.startswith("COPY")] == ["COPY .fwx-wheels/deps/ /tmp/fwx-deps/"]
    assert f"/tmp/fwx-deps/{DEPS_WHEEL}[serve,onnx{',gpu' if gpu else ''}]" in before[-1]
    assert all(plan.wheel not in line for line in before)
    assert after[0] == f"COPY .fwx-wheels/{plan.wheel} /tmp/fwx-wheel/"
    assert "pip install --no-deps" in after[1]
    assert after.index("COPY . /models") > 1


def test_the_dependency_wheel_depends_on_the_dependency_list_alone(tmp_path: Path) -> None:
    """Two wheels of this checkout (built apart, so their bytes differ) give byte-identical placeholders."""
    wheels = [build_wheel(tmp_path / f"w{i}") for i in range(2)]
    deps = [write_deps_wheel(w, tmp_path / f"deps{i}").read_bytes() for i, w in enumerate(wheels)]
    assert deps[0] == deps[1]

    def requires(whl: Path) -> list[str]:
        with zipfile.ZipFile(whl) as zf:
            meta = zf.read(next(n for n in zf.namelist() if n.endswith("METADATA"))).decode()
        return [line for line in meta.splitlines() if line.startswith(("Requires-Dist:", "Provides-Extra:"))]

    placeholder = tmp_path / "deps0" / DEPS_WHEEL
    assert requires(placeholder) == requires(wheels[0])
    assert any("onnxruntime" in r for r in requires(placeholder))
    # pip itself reads it as fwx-toolkit 0 with fwx's requirements (offline: --no-deps, --no-index)
    report = tmp_path / "report.json"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index", "--ignore-installed",
         "--quiet", "--report", str(report), f"{placeholder}[serve,onnx]"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    meta = json.loads(report.read_text())["install"][0]["metadata"]
    assert (meta["name"], meta["version"]) == ("fwx-toolkit", "0")
    assert any(r.startswith("onnxruntime") for r in meta["requires_dist"])


def test_hadolint_really_lints(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN apt-get install curl\n")
    assert hadolint(bad).returncode != 0


def test_compose_binds_loopback_and_outlasts_drain() -> None:
    spec = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    svc = spec["services"]["fwx"]
    assert all(p.startswith("127.0.0.1:") for p in svc["ports"])
    assert any(v.endswith(":/models:ro") for v in svc["volumes"])
    drain = int(svc["command"][svc["command"].index("--drain-seconds") + 1])
    assert int(svc["stop_grace_period"].rstrip("s")) > drain
    assert svc["deploy"]["resources"]["limits"]["memory"]


def _repo_with(tmp_path: Path, models: dict[str, list[str]]) -> Path:
    repo = Repository(tmp_path / "artifacts")
    for name, formats in models.items():
        with repo.staging(name) as st:
            man = Manifest(
                name=name,
                version=0,
                source=SourceInfo("s", "0" * 64, "pytorch", "torch"),
                signature={"inputs": [], "outputs": []},
            )
            for f in formats:
                man.artifacts[f] = ArtifactEntry(f, f"model.{f}")
            st.publish(man)
    return repo.root


def test_dockerize_picks_only_needed_extras(tmp_path: Path) -> None:
    root = _repo_with(tmp_path, {"cnn": ["onnx", "tflite", "torchscript"], "kw": ["tflite", "savedmodel"]})
    plan = plan_image(root)
    assert plan.served == {"cnn/1": "onnx", "kw/1": "savedmodel"}
    assert plan.extras == ["onnx", "tf"]
    written = write_docker_files(plan)
    assert [p.name for p in written[:2]] == ["Dockerfile", ".dockerignore"]
    res = hadolint(written[0])
    assert res.returncode == 0, res.stdout
    text = written[0].read_text()
    # fwx comes from the wheel in the build context, never from a name the index serves someone else under
    wheel = written[2]
    assert wheel.parent == root / ".fwx-wheels"
    assert wheel.name.startswith("fwx_toolkit-")
    assert '/tmp/fwx-deps/fwx_toolkit-0-py3-none-any.whl[serve,onnx,tf]"' in text
    assert f'pip install --no-deps --force-reinstall "/tmp/fwx-wheel/{wheel.name}"' in text
    assert "fwx[" not in text
    assert "pip install fwx" not in text
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        head = zf.read(meta).decode()
        assert "Name: fwx-toolkit" in head
        assert "License-Expression: Apache-2.0" in head
        assert "fwx/cli.py" in zf.namelist()
    assert Repository(root).models() == ["cnn", "kw"]  # the wheel folder is not a model
    with pytest.raises(InputError, match="already exists"):
        write_docker_files(plan)


def test_dockerize_force_replaces_files_only(tmp_path: Path) -> None:
    root = _repo_with(tmp_path, {"cnn": ["onnx"]})
    plan = plan_image(root)
    (root / "Dockerfile").mkdir()
    with pytest.raises(InputError, match="not a regular file"):
        write_docker_files(plan, force=True)
    (root / "Dockerfile").rmdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    (root / ".dockerignore").symlink_to(outside)
    with pytest.raises(InputError, match="not a regular file"):
        write_docker_files(plan, force=True)
    assert outside.read_text() == "keep me"
    assert not (root / "Dockerfile").exists()  # refused before anything was written
    (root / ".dockerignore").unlink()
    (root / "Dockerfile").write_text("old")
    written = write_docker_files(plan, force=True)
    assert "FROM" in written[0].read_text()
    assert not list(root.glob(".*.fwx-tmp"))


def test_dockerize_gpu_lints_clean(tmp_path: Path) -> None:
    root = _repo_with(tmp_path, {"cnn": ["onnx"]})
    plan = plan_image(root, gpu=True)
    df = tmp_path / "Dockerfile.gen"
    df.write_text(render_dockerfile(plan))
    res = hadolint(df)
    assert res.returncode == 0, res.stdout
    assert "--gpus all" in plan.run_command()


def test_dockerize_cli_json_and_errors(tmp_path: Path) -> None:
    root = _repo_with(tmp_path, {"m": ["onnx"]})
    out = subprocess.run(
        [sys.executable, "-m", "fwx", "dockerize", str(root), "--json"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["extras"] == ["onnx"]
    assert doc["build"].startswith("docker build")
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = subprocess.run([sys.executable, "-m", "fwx", "dockerize", str(empty)], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "no servable model" in bad.stderr
    assert "Traceback" not in bad.stderr
