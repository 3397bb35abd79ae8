"""What a model brings across the boundary: a loose ONNX file's data files, a hub cache revision's links.

A loose ``model.onnx`` saved in a home folder must not read ``.ssh/id_rsa`` or
``.env`` beside it; the layouts ONNX writers use (one data file, one file per
tensor, aligned with zero padding) keep working; a Hugging Face hub cache
revision (``snapshots/<rev>/`` links into ``../../blobs/``) is admitted, and a
link anywhere else is refused.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fwx import ui
from fwx.errors import FwxError, InputError
from fwx.safety import snapshot

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

SECRET = b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"


def _model(weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """y = x + w0 + w1 + ...: every weight reaches the output, so its bytes would show in an answer."""
    nodes, last = [], "x"
    for i, name in enumerate(weights):
        out = "y" if i == len(weights) - 1 else f"s{i}"
        nodes.append(helper.make_node("Add", [last, name], [out]))
        last = out
    n = next(iter(weights.values())).size
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [numpy_helper.from_array(w, name) for name, w in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _point(model: onnx.ModelProto, location: str, offsets: list[int], length: int) -> onnx.ModelProto:
    """Every initializer made external: ``location`` at ``offsets[i]``, ``length`` bytes each."""
    for tensor, offset in zip(model.graph.initializer, offsets, strict=True):
        tensor.ClearField("raw_data")
        tensor.ClearField("float_data")
        tensor.data_location = TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    return model


def _home_with_secret(tmp_path: Path, location: str) -> Path:
    home = tmp_path / "home"
    secret = home / location
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_bytes(SECRET)
    n = len(SECRET) // 4
    model = _point(_model({"w": np.zeros(n, np.float32)}), location, [0], len(SECRET))
    path = home / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("location", [".ssh/id_rsa", ".env", ".git/config", "sub/plain.bin"])
def test_a_loose_onnx_never_reads_its_hidden_or_nested_neighbours(tmp_path: Path, location: str) -> None:
    path = _home_with_secret(tmp_path, location)
    with pytest.raises(InputError, match="external data location") as info:
        snapshot.take(path, parent=tmp_path)
    assert len(str(info.value).splitlines()) == 1
    assert not list(tmp_path.glob("fwx-snapshot-*")), "a refused snapshot leaves nothing behind"


def test_the_cli_refuses_it_in_one_line_and_the_secret_goes_nowhere(tmp_path: Path) -> None:
    path = _home_with_secret(tmp_path, ".env")
    out = tmp_path / "out"
    env = {**os.environ, "HOME": str(path.parent)}
    proc = subprocess.run(
        [sys.executable, "-m", "fwx", "export", str(path), "--to", "onnx", "--out", str(out)],
        capture_output=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert proc.returncode != 0
    lines = [x for x in proc.stderr.decode().splitlines() if x.strip()]
    assert len([x for x in lines if x.startswith("error:")]) == 1, proc.stderr.decode()
    assert "'.env'" in proc.stderr.decode()
    assert b"Traceback" not in proc.stderr
    assert b"OPENSSH" not in proc.stdout + proc.stderr
    leaked = [p for p in out.rglob("*") if p.is_file() and b"OPENSSH" in p.read_bytes()] if out.exists() else []
    assert not leaked


def _runs(path: Path) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"x": np.zeros(4, np.float32)})[0])


@pytest.mark.parametrize("one_file", [True, False], ids=["model.onnx.data", "file-per-tensor"])
def test_the_writers_own_layouts_keep_working(tmp_path: Path, one_file: bool) -> None:
    weights = {"w0": np.arange(4, dtype=np.float32), "w1": np.full(4, 10, np.float32)}
    folder = tmp_path / "dl"
    folder.mkdir()
    onnx.save_model(
        _model(weights),
        str(folder / "model.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=one_file,
        location="model.onnx.data",
        size_threshold=0,
    )
    (folder / ".env").write_bytes(SECRET)  # a neighbour nobody named: never copied
    snap = snapshot.take(folder / "model.onnx", parent=tmp_path)
    try:
        assert sorted(p.name for p in snap.path.parent.iterdir()) == sorted(["model.onnx", *snap.companions])
        assert len(snap.companions) == (1 if one_file else 2)
        np.testing.assert_array_equal(_runs(snap.path), weights["w0"] + weights["w1"])
    finally:
        snap.discard()


@pytest.mark.parametrize(("gap", "ok"), [(b"\0" * 48, True), (b"x" * 48, False)], ids=["zero-padding", "extra-bytes"])
def test_bytes_no_tensor_names_must_be_padding(tmp_path: Path, gap: bytes, ok: bool) -> None:
    folder = tmp_path / "dl"
    folder.mkdir()
    w0, w1 = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    (folder / "weights.bin").write_bytes(w0.tobytes() + gap + w1.tobytes() + gap)
    model = _point(_model({"w0": w0, "w1": w1}), "weights.bin", [0, 16 + len(gap)], 16)
    (folder / "m.onnx").write_bytes(model.SerializeToString())
    if not ok:
        with pytest.raises(InputError, match="no tensor names"):
            snapshot.take(folder / "m.onnx", parent=tmp_path)
        return
    snap = snapshot.take(folder / "m.onnx", parent=tmp_path)
    try:
        np.testing.assert_array_equal(_runs(snap.path), w0 + w1)
    finally:
        snap.discard()


def test_an_explicit_data_folder_widens_the_rule(tmp_path: Path) -> None:
    folder = tmp_path / "dl"
    (folder / "weights").mkdir(parents=True)
    w = np.arange(4, dtype=np.float32)
    (folder / "weights" / "w.bin").write_bytes(w.tobytes() + b"trailer")  # not covered: the user vouched for it
    (folder / "m.onnx").write_bytes(_point(_model({"w": w}), "weights/w.bin", [0], 16).SerializeToString())
    with pytest.raises(InputError, match="not a file name"):
        snapshot.take(folder / "m.onnx", parent=tmp_path)
    snap = snapshot.take(folder / "m.onnx", parent=tmp_path, external_data=folder)
    try:
        np.testing.assert_array_equal(_runs(snap.path), w)
    finally:
        snap.discard()


def _hub_cache(tmp_path: Path) -> tuple[Path, Path]:
    """A ``models--org--name`` folder laid out the way huggingface_hub's cache writes it."""
    repo = tmp_path / "hub" / "models--org--tiny"
    rev = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / rev
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    (snap / "onnx").mkdir(parents=True)
    w = np.arange(4, dtype=np.float32)
    model = _point(_model({"w": w}), "model.onnx.data", [0], 16).SerializeToString()
    for rel, data in (("onnx/model.onnx", model), ("onnx/model.onnx.data", w.tobytes()), ("config.json", b"{}")):
        blob = hashlib.sha256(data).hexdigest()  # the hub names a blob by its content
        (repo / "blobs" / blob).write_bytes(data)
        depth = rel.count("/") + 2
        (snap / rel).symlink_to(os.path.join(*([".."] * depth), "blobs", blob))
    return repo, snap


def test_a_hub_cache_revision_is_admitted(tmp_path: Path) -> None:
    _, rev = _hub_cache(tmp_path)
    folder = snapshot.take(rev, parent=tmp_path)
    try:
        assert (folder.path / "onnx" / "model.onnx").is_file()
        assert not (folder.path / "onnx" / "model.onnx").is_symlink()
        assert (folder.path / "config.json").read_bytes() == b"{}"
    finally:
        folder.discard()
    loose = snapshot.take(rev / "onnx" / "model.onnx", parent=tmp_path)
    try:
        assert loose.path.name == "model.onnx"  # the name in the revision, not the blob's
        assert loose.companions == ("model.onnx.data",)
        np.testing.assert_array_equal(_runs(loose.path), np.arange(4, dtype=np.float32))
    finally:
        loose.discard()


@pytest.mark.parametrize("target", ["refs", "other-model", "outside", "absolute", "chained"])
def test_a_hub_link_anywhere_but_its_own_blobs_is_refused(tmp_path: Path, target: str) -> None:
    repo, rev = _hub_cache(tmp_path)
    (tmp_path / "secret").write_bytes(SECRET)
    other = tmp_path / "hub" / "models--evil--x" / "blobs"
    other.mkdir(parents=True)
    (other / "b").write_bytes(SECRET)
    (repo / "blobs" / "hop").symlink_to("../../../secret")
    text = {
        "refs": "../../refs/main",
        "other-model": "../../../models--evil--x/blobs/b",
        "outside": "../../../../secret",
        "absolute": str(tmp_path / "secret"),
        "chained": "../../blobs/hop",
    }[target]
    (rev / "extra.txt").symlink_to(text)
    with pytest.raises(FwxError):
        snapshot.take(rev, parent=tmp_path)
    assert not list(tmp_path.glob("fwx-snapshot-*"))


@pytest.mark.parametrize("where", ["absolute", "climbing"])
def test_a_manifest_source_path_outside_its_version_is_never_opened(
    tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """fwx.json is data: ``source.path`` naming a host model does not make validate open it."""
    import json

    from fwx.cli import main
    from fwx.manifest import Manifest, SourceInfo, sha256_path

    from .conftest import _good_onnx
    from .hostile import version_folder

    host = tmp_path / "home"
    host.mkdir()
    planted = _good_onnx(host / "model.onnx")  # a model it could load, so only the rule keeps it out
    folder = version_folder(tmp_path / "repo", "m", _good_onnx(tmp_path / "good.onnx"), "onnx")
    manifest = Manifest.read(folder)
    raw = str(planted) if where == "absolute" else os.path.relpath(planted, folder)
    manifest.source = SourceInfo(raw, sha256_path(planted), "onnx", "onnx")
    manifest.write(folder)
    snapshot.discard_all()
    with pytest.raises(SystemExit) as refused:  # one artifact and no source: nothing to compare
        main(["validate", str(folder), "--json"])
    ui.state.json = False
    assert refused.value.code == 2
    assert "only the reference was given" in json.loads(capsys.readouterr().out)["error"]
    assert all(not s.original.is_relative_to(host) for s in snapshot._TAKEN.values())
    try:
        main(["validate", str(folder), "--source-model", str(planted), "--json"])  # named, it is the reference
    finally:
        ui.state.json = False  # --json in process sets it for whoever runs next
        snapshot.discard_all()
    assert json.loads(capsys.readouterr().out)["reference"]["key"] == "source (onnx)"


def test_the_data_files_read_are_listed_and_a_named_folder_widens_the_rule(tmp_path: Path) -> None:
    """fwx export: the summary and fwx.json list the data files read; --external-data-dir reads a subfolder."""
    import json

    folder = tmp_path / "dl"
    (folder / "weights").mkdir(parents=True)
    w = np.arange(4, dtype=np.float32)
    (folder / "weights" / "w.bin").write_bytes(w.tobytes())
    (folder / "m.onnx").write_bytes(_point(_model({"w": w}), "weights/w.bin", [0], 16).SerializeToString())

    def export(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fwx", "export", "dl/m.onnx", "--to", "onnx", "--out", "repo", *extra],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )

    refused = export()
    assert refused.returncode == 2
    assert "--external-data-dir" in refused.stderr
    done = export("--external-data-dir", "dl")
    assert done.returncode == 0, done.stderr
    assert "read with the source: weights/w.bin" in done.stdout + done.stderr
    source = json.loads((tmp_path / "repo" / "m" / "1" / "fwx.json").read_text())["source"]
    assert list(source["files"]) == ["weights/w.bin"]
    assert len(source["files"]["weights/w.bin"]) == 64


def test_an_export_detects_the_format_once_on_the_admitted_copy(tmp_path: Path) -> None:
    """One boundary: the format is detected once, on the private copy; every later step asks the boundary."""
    from fwx import formats
    from fwx.exporter import ExportOptions, export
    from fwx.sources import boundary

    from .conftest import _good_onnx

    src = _good_onnx(tmp_path / "m.onnx")
    seen: list[str] = []

    def count(frame: object, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is formats.detect_format.__code__:  # type: ignore[attr-defined]
            seen.append(str(frame.f_locals["path"]))  # type: ignore[attr-defined]

    sys.setprofile(count)
    try:
        res = export(src, ["onnx"], ExportOptions(out=tmp_path / "repo"))
    finally:
        sys.setprofile(None)
    assert res.ok
    assert len(seen) == 1, seen
    admitted = boundary.admitted(src)
    assert admitted is not None
    assert seen == [str(admitted.path)]  # the copy, never the user's path
    assert admitted.files == ("m.onnx",)
    assert res.manifest is not None
    assert res.manifest.source.sha256 == admitted.sha256
    snapshot.discard_all()


@pytest.mark.parametrize("length", [None, len(SECRET)], ids=["no-length", "length-of-the-file"])
def test_a_plain_neighbour_the_model_cannot_size_is_refused(tmp_path: Path, length: int | None) -> None:
    """A plain name beside the model passes only as exactly the bytes its tensors' shapes hold."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_bytes(SECRET)  # a size the model's author could not know
    model = _point(_model({"w": np.zeros(8, np.float32)}), "notes.txt", [0], length or 0)
    if length is None:  # read to the end of the file, whatever its size
        kept = [e for e in model.graph.initializer[0].external_data if e.key != "length"]
        del model.graph.initializer[0].external_data[:]
        model.graph.initializer[0].external_data.extend(kept)
    (home / "model.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(InputError, match="notes.txt"):
        snapshot.take(home / "model.onnx", parent=tmp_path)
    assert not list(tmp_path.glob("fwx-snapshot-*"))
