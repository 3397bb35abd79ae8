"""``--to all`` with targets that validate wrong: publish the ones that passed, record the rest, exit 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fwx.manifest import Manifest

from .fixtures import TOYS, assert_refused, numbered_versions

pytest.importorskip("torch")

SRC = f"{TOYS}:build_sign_branch"  # scripting keeps its data-dependent branch; every tracing path bakes it
ARGS = ["--input", "x:float32[N,6]"]


@pytest.mark.slow
def test_to_all_publishes_what_validated_and_records_what_did_not(cli: Any, tmp_path: Path) -> None:
    res = cli("export", SRC, *ARGS, "--to", "all", "--out", tmp_path)
    assert res.code == 1, res.err
    assert not res.has_traceback
    (version,) = numbered_versions(tmp_path)
    manifest = Manifest.read(version)
    assert sorted(manifest.artifacts) == ["torchscript"]
    assert manifest.artifacts["torchscript"].validation["passed"]
    assert "onnx" in manifest.failed
    bad = manifest.failed["onnx"]
    assert bad["error"].startswith("validation failed: onnx: output 'output_0'")
    assert bad["validation"]["passed"] is False
    assert bad["validation"]["outputs"]["output_0"]["max_abs"] > 1.0
    assert not (version / "model.onnx").exists()
    assert "not published" in res.out
    assert "validation failed: onnx: output" in res.out
    on_disk = json.loads((version / "fwx.json").read_text())
    assert set(on_disk["failed"]) == set(manifest.failed)


def test_a_named_target_that_validates_wrong_still_fails_hard(cli: Any, tmp_path: Path) -> None:
    res = cli("export", SRC, *ARGS, "--to", "onnx", "--out", tmp_path)
    assert_refused(res, tmp_path, 1, "validation failed", "onnx")
