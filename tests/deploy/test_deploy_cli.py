"""``fwx deploy kserve|k8s`` as a user runs it: YAML on stdout, --out writes whole files, bad input is one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from manifest_schemas import validate


def _fwx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fwx", "deploy", *args], capture_output=True, text=True, timeout=60)


def test_kserve_prints_valid_yaml() -> None:
    res = _fwx("kserve", "gs://bucket/artifacts", "--name", "mnist", "--cluster", "--gpu")
    assert res.returncode == 0, res.stderr
    docs = list(yaml.safe_load_all(res.stdout))
    assert [d["kind"] for d in docs] == ["ClusterServingRuntime", "InferenceService"]
    for d in docs:
        validate(d)
    assert docs[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_k8s_out_writes_once_then_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    res = _fwx("k8s", "pvc://models/artifacts", "--name", "mnist", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["mnist-k8s.yaml"]
    for d in yaml.safe_load_all((out / "mnist-k8s.yaml").read_text()):
        validate(d)
    again = _fwx("k8s", "pvc://models/artifacts", "--name", "mnist", "--out", str(out))
    assert again.returncode == 2
    assert "already exists" in again.stderr
    assert "--force" in again.stderr
    assert _fwx("k8s", "pvc://models/other", "--name", "mnist", "--out", str(out), "--force").returncode == 0
    assert "pvc://models/other" not in (out / "mnist-k8s.yaml").read_text()  # claim "models", subPath "other"
    assert "subPath: other" in (out / "mnist-k8s.yaml").read_text()


def test_local_path_is_refused_with_the_fix(tmp_path: Path) -> None:
    res = _fwx("kserve", str(tmp_path), "--name", "mnist", "--out", str(tmp_path / "o"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("error:")
    assert "not a storage URI" in lines[0]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "o").exists()
