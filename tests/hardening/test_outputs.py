"""Outputs are created by the publisher alone, at the end: the loader writes only its private stages.

Run as real command lines (the command's process stages, its loader writes the
stage behind the walls, the command's process publishes): a refused export
leaves no ``OUT/NAME`` (nor ``OUT``), a failed validation no 0-byte report, and
a task writing sibling models (``NAME-encoder``, ``NAME-decoder``) publishes both.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fwx.repository import Outbox

from .conftest import _good_onnx


def _fwx(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fwx", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )


def _leftovers(folder: Path) -> list[Path]:
    return list(folder.rglob(".fwx-*"))


def test_a_refused_export_leaves_nothing_and_a_good_one_publishes(tmp_path: Path) -> None:
    (tmp_path / "bad.onnx").write_bytes(b"garbage")
    res = _fwx("export", "bad.onnx", "--to", "onnx", "--out", "repo/deep", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert not (tmp_path / "repo").exists(), "a refused export created its output folders"
    _good_onnx(tmp_path / "good.onnx")
    res = _fwx("export", "good.onnx", "--to", "onnx", "--out", "repo", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "repo" / "good" / "1" / "fwx.json").is_file()
    assert "written to repo/good/1" in res.stdout + res.stderr
    res = _fwx("export", "bad.onnx", "--to", "onnx", "--out", "repo", "--name", "good", cwd=tmp_path)
    assert res.returncode == 2
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["good"]
    assert sorted(p.name for p in (tmp_path / "repo" / "good").iterdir()) == ["1"]
    assert not _leftovers(tmp_path)


def test_a_failed_validation_writes_no_report(tmp_path: Path) -> None:
    _good_onnx(tmp_path / "good.onnx")
    res = _fwx("validate", "good.onnx", "--report", "out/r.html", "--report", "r.json", cwd=tmp_path)
    assert res.returncode == 2, res.stderr  # one file: nothing to compare
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "r.json").exists()
    _good_onnx(tmp_path / "again.onnx")
    res = _fwx("validate", "good.onnx", "again.onnx", "--report", "out/r.html", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert not _leftovers(tmp_path)


def test_the_publisher_moves_only_plain_finished_versions(tmp_path: Path) -> None:
    """What the loader left in its stage is data: a link or an unfinished version is not published."""
    box = Outbox.plan([tmp_path / "repo"], [tmp_path / "r.json"])
    stage = box.stage_of(tmp_path / "repo")
    assert stage is not None
    (stage / "m" / "1").mkdir(parents=True)
    (stage / "m" / "1" / "fwx.json").write_text("{}")
    (stage / "m" / "2").mkdir()  # no fwx.json: unfinished
    (tmp_path / "elsewhere").mkdir()
    (stage / "evil").symlink_to(tmp_path / "elsewhere")
    box.staged(tmp_path / "r.json").symlink_to("/etc/hostname")
    assert box.publish() == []  # not marked done: nothing
    box.mark_done()
    assert box.publish() == [tmp_path / "repo" / "m" / "1"]
    box.discard()
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["m"]
    assert not (tmp_path / "r.json").exists()
    assert not _leftovers(tmp_path)


@pytest.mark.slow
def test_text2text_publishes_both_siblings(tmp_path: Path) -> None:
    from tests.exporter import hf_folders as hf

    folder, task = hf.t5(tmp_path / "t5")
    assert task == "text2text-generation"
    res = _fwx("export", folder, "--to", "onnx", "--out", "repo", "--name", "t5", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    published = sorted(p.name for p in (tmp_path / "repo").iterdir())
    assert published == ["t5-decoder", "t5-encoder"]
    assert all((tmp_path / "repo" / name / "1" / "fwx.json").is_file() for name in published)
    assert not _leftovers(tmp_path / "repo")


def test_an_output_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    _good_onnx(tmp_path / "good.onnx")
    res = _fwx("validate", "good.onnx", "good.onnx", "--report", "r.json", "--report", "/proc/r.json", cwd=tmp_path)
    assert res.returncode == 2
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1, res.stderr
    assert errors[0].startswith("error: cannot write /proc")
    assert not _leftovers(tmp_path)
