from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fwx.errors import ChecksumError, InputError, UsageError
from fwx.manifest import ArtifactEntry, Manifest, SourceInfo, sha256_path
from fwx.repository import TMP_PREFIX, Repository


def _manifest(name: str, entry: ArtifactEntry | None = None) -> Manifest:
    m = Manifest(
        name=name,
        version=0,
        source=SourceInfo("src.pt", "0" * 64, "pytorch", "torch"),
        signature={"inputs": [], "outputs": []},
    )
    if entry:
        m.artifacts[entry.format] = entry
    return m


def test_publish_is_atomic_and_numbered(tmp_path: Path) -> None:
    repo = Repository(tmp_path)
    for expected in (1, 2):
        with repo.staging("m") as st:
            (st.path / "model.onnx").write_bytes(b"abc")
            entry = ArtifactEntry("onnx", "model.onnx", sha256_path(st.path / "model.onnx"), 3)
            final = st.publish(_manifest("m", entry))
        assert final.name == str(expected)
    assert repo.versions("m") == [1, 2]
    man = repo.manifest("m", 2)
    assert man.version == 2
    man.verify(repo.version_dir("m", 2))
    assert not [p for p in (tmp_path / "m").iterdir() if p.name.startswith(TMP_PREFIX)]


def test_failure_inside_staging_leaves_nothing(tmp_path: Path) -> None:
    repo = Repository(tmp_path)

    def half_written() -> None:
        with repo.staging("m") as st:
            (st.path / "half.onnx").write_bytes(b"x")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        half_written()
    assert not (tmp_path / "m").exists()  # not even an empty model folder (issue 13, item 13)
    assert repo.versions("m") == []


def test_killed_writer_leaves_no_version(tmp_path: Path) -> None:
    code = (
        "import time, sys\nfrom fwx.repository import Repository\n"
        f"r = Repository({str(tmp_path)!r})\n"
        "with r.staging('m') as st:\n"
        "    (st.path / 'model.onnx').write_bytes(b'x' * 1000)\n"
        "    print('staged', flush=True)\n"
        "    time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "staged"
    proc.kill()
    proc.wait()
    proc.stdout.close()
    repo = Repository(tmp_path)
    assert repo.versions("m") == []
    assert not any(p.name.isdigit() for p in (tmp_path / "m").iterdir())
    # a later export sweeps stale temp folders
    for p in (tmp_path / "m").iterdir():
        old = time.time() - 7200
        os.utime(p, (old, old))
    repo.sweep_stale("m")
    assert list((tmp_path / "m").iterdir()) == []


def test_checksum_mismatch_detected(tmp_path: Path) -> None:
    repo = Repository(tmp_path)
    with repo.staging("m") as st:
        (st.path / "model.onnx").write_bytes(b"abc")
        final = st.publish(_manifest("m", ArtifactEntry("onnx", "model.onnx", sha256_path(st.path / "model.onnx"))))
    (final / "model.onnx").write_bytes(b"abd")
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        Manifest.read(final).verify(final)


def test_entry_escaping_folder_is_refused(tmp_path: Path) -> None:
    repo = Repository(tmp_path)
    (tmp_path / "secret").write_bytes(b"s")
    with repo.staging("m") as st:
        manifest = _manifest("m", ArtifactEntry("onnx", "../../secret", sha256_path(tmp_path / "secret")))
        final = st.publish(manifest)
    with pytest.raises(InputError, match="artifacts/onnx/path"):  # the schema refuses it when read
        Manifest.read(final)
    with pytest.raises(ChecksumError, match="outside"):  # and verify() still refuses it on its own
        manifest.verify(final)


def test_explicit_version_is_immutable(tmp_path: Path) -> None:
    repo = Repository(tmp_path)
    with repo.staging("m", version=5) as st:
        st.publish(_manifest("m"))
    with pytest.raises(InputError, match="already exists"), repo.staging("m", version=5):
        pass
    assert repo.next_version("m") == 6


@pytest.mark.parametrize("name", ["..", "a/b", "", "x" * 200, ".fwx-tmp-1"])
def test_bad_model_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(UsageError):
        Repository(tmp_path).model_dir(name)


def test_incomplete_folders_are_not_versions(tmp_path: Path) -> None:
    (tmp_path / "m" / "3").mkdir(parents=True)  # no fwx.json
    (tmp_path / "m" / "03").mkdir()
    (tmp_path / "m" / "abc").mkdir()
    assert Repository(tmp_path).versions("m") == []


def test_manifest_schema_version_guard(tmp_path: Path) -> None:
    m = _manifest("m")
    data = m.to_json()
    data["schema_version"] = 99
    (tmp_path / "fwx.json").write_text(__import__("json").dumps(data))
    with pytest.raises(InputError, match="schema version 99"):
        Manifest.read(tmp_path)
