"""What fwx writes into a Dockerfile, YAML or a shell line from user input is quoted or refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fwx.deploy.common import check_image
from fwx.deploy.storage import parse_storage_uri
from fwx.docker import DockerizePlan
from fwx.errors import UsageError


def _fwx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fwx", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_dockerize_refuses_a_tag_that_would_write_a_line(tmp_path: Path) -> None:
    repo = tmp_path / "artifacts"
    repo.mkdir()
    res = _fwx("dockerize", str(repo), "--tag", "x:1\nRUN touch /pwned", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, res.stderr
    assert "--tag" in errors[0]
    assert "not an image reference" in errors[0]
    assert "Traceback" not in res.stderr
    assert sorted(p.name for p in repo.iterdir()) == []  # no Dockerfile


@pytest.mark.parametrize("ref", ["x:1\nRUN touch /pwned", "x; rm -rf /", "$(id)", "Upper:1", "a b", "x:" + "1" * 200])
def test_image_references_are_refused_unless_well_formed(ref: str) -> None:
    with pytest.raises(UsageError, match="not an image reference"):
        check_image(ref, "--image")


@pytest.mark.parametrize("ref", ["fwx-models:latest", "registry.example.com:5000/team/fwx_models:1.2-rc.1", "fwx:cpu"])
def test_ordinary_image_references_pass(ref: str) -> None:
    assert check_image(ref, "--tag") == ref


def test_shell_lines_quote_the_repository_path(tmp_path: Path) -> None:
    plan = DockerizePlan(tmp_path / "my models; rm -rf ~", ["onnx"], tag="fwx-models:1")
    assert plan.build_command().endswith("'" + str(tmp_path / "my models; rm -rf ~") + "'")


def test_storage_uris_with_control_characters_are_refused() -> None:
    with pytest.raises(UsageError, match="control characters"):
        parse_storage_uri("s3://bucket/x\n- name: evil")
