"""Items 7 and 8: any malformed fwx.json is one InputError naming the file and the field, never another exception."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fwx.errors import InputError
from fwx.manifest import ArtifactEntry, Manifest, SourceInfo
from fwx.signature import Signature, TensorSpec

SIG = Signature((TensorSpec("x", "float32", (-1, 3)),), (TensorSpec("y", "float32", (-1, 1)),))
JUNK: list[Any] = [None, -1, 0, 2**70, 1e30, float("nan"), "", "../../x", "x" * 5000, [], [1, 2], {}, {"a": 1}, True]


def _good() -> dict[str, Any]:
    entry = ArtifactEntry(
        format="onnx",
        path="model.onnx",
        sha256="0" * 64,
        size_bytes=10,
        opset=17,
        signature=SIG.to_json(),
        files={"w.bin": "1" * 64},
    )
    return Manifest(
        name="m",
        version=1,
        source=SourceInfo("src.onnx", "", "onnx", "onnx"),
        signature=SIG.to_json(),
        artifacts={"onnx": entry},
    ).to_json()


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def _read(tmp_path: Path, data: Any) -> Manifest:
    folder = tmp_path / "m" / "1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fwx.json").write_text(json.dumps(data, allow_nan=True))
    return Manifest.read(folder)


def test_the_good_manifest_reads(tmp_path: Path) -> None:
    assert _read(tmp_path, _good()).sig() == SIG


def test_every_field_set_to_junk_is_one_clear_error_or_accepted(tmp_path: Path) -> None:
    """~40 fields x 14 junk values: only ``InputError`` (naming fwx.json) may escape; nothing else."""
    good = _good()
    messages: list[tuple[Any, Any, str]] = []
    for path in _paths(good):
        for junk in JUNK:
            data = copy.deepcopy(good)
            _set(data, path, junk)
            try:
                _read(tmp_path, data)
            except InputError as exc:
                messages.append((path, junk, exc.message))
    assert len(messages) > 300  # the schema really refuses most of them
    bad = [m for m in messages if "fwx.json" not in m[2] or "\n" in m[2]]
    assert bad == []


@pytest.mark.parametrize(
    "text", ["[" * 50_000 + "]" * 50_000, '{"a": ' * 50_000 + "1" + "}" * 50_000, "not json", "", "\x00\xff"]
)
def test_unparseable_text_is_one_error(tmp_path: Path, text: str) -> None:
    folder = tmp_path / "m" / "1"
    folder.mkdir(parents=True)
    (folder / "fwx.json").write_text(text, encoding="latin-1")
    with pytest.raises(InputError, match="fwx.json"):
        Manifest.read(folder)


def test_version_must_match_the_folder_and_a_renamed_model_folder_still_reads(tmp_path: Path) -> None:
    data = _good()
    data["version"] = 2
    with pytest.raises(InputError, match="folder is version 1"):
        _read(tmp_path, data)
    data = _good()
    data["name"] = "renamed-elsewhere"  # a safe name that differs from the folder: served under the folder's name
    assert _read(tmp_path, data).name == "renamed-elsewhere"


def test_a_loose_copy_is_not_compared_with_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "copied-version"
    folder.mkdir()
    (folder / "fwx.json").write_text(json.dumps(_good()))
    assert Manifest.read(folder).name == "m"
