"""A control character in a manifest path is one InputError naming the field, never a ValueError.

``"model.onnx\\u0000.txt"`` passed the schema and reached ``Path.resolve``, which raises
``ValueError: embedded null byte``: ``fwx validate`` said "unexpected ValueError" and ``fwx serve``
logged a traceback. A trailing newline passed too (``$`` matches before it); the schema now refuses
every control character, C0 and DEL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fwx.errors import InputError
from fwx.manifest import ArtifactEntry, Manifest, SourceInfo
from fwx.signature import Signature, TensorSpec

SIG = Signature((TensorSpec("x", "float32", (1, 4)),), (TensorSpec("y", "float32", (1, 4)),))


def _version(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path / "m" / "1"
    folder.mkdir(parents=True)
    entry = ArtifactEntry(format="onnx", path="model.onnx", sha256="0" * 64, size_bytes=1, signature=SIG.to_json())
    data = Manifest(
        name="m", version=1, source=SourceInfo("m.onnx", "", "onnx", "onnx"), signature=SIG.to_json(),
        artifacts={"onnx": entry},
    ).to_json()  # fmt: skip
    return folder, data


@pytest.mark.parametrize("path", ["model.onnx\u0000.txt", "model.onnx\n", "x\n/../../y", "a\x7fb", "\tmodel.onnx"])
@pytest.mark.parametrize("where", ["path", "files"])
def test_a_control_character_in_an_artifact_path_is_one_line_naming_the_field(
    tmp_path: Path, path: str, where: str
) -> None:
    folder, data = _version(tmp_path)
    if where == "path":
        data["artifacts"]["onnx"]["path"] = path
    else:
        data["artifacts"]["onnx"]["files"] = {path: "1" * 64}
    (folder / "fwx.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="artifacts/onnx/") as caught:
        Manifest.read(folder)
    assert "\n" not in caught.value.message


def test_ordinary_names_still_pass(tmp_path: Path) -> None:
    folder, data = _version(tmp_path)
    data["artifacts"]["onnx"]["path"] = "saved model/ünïcode.onnx"
    (folder / "fwx.json").write_text(json.dumps(data))
    assert Manifest.read(folder).artifacts["onnx"].path == "saved model/ünïcode.onnx"
