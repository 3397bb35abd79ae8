"""The hostile corpus, built once per session (tests/hardening/hostile.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import hostile, hostile_allow


@dataclass
class Corpus:
    root: Path
    sentinels: Path
    files: dict[str, Path] = field(default_factory=dict)  # hostile model files by kind
    good_onnx: Path | None = None
    clean_pt2: Path | None = None
    manifests: dict[str, str] = field(default_factory=dict)  # bad-manifest model name -> needle
    repo: Path | None = None  # every hostile artifact as a version whose checksums match
    secret: Path | None = None  # a host file whose bytes must never show up in any output

    def ran(self) -> list[str]:
        """Sentinels created so far: any entry means hostile code ran."""
        return sorted(p.name for p in self.sentinels.iterdir())


def _good_onnx(path: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "lin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [
            numpy_helper.from_array(np.array([2.0], np.float32), "w"),
            numpy_helper.from_array(np.array([1.0], np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime of any supported version reads
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    root = tmp_path_factory.mktemp("hostile")
    c = Corpus(root, root / "sentinels")
    c.sentinels.mkdir()
    files = root / "files"
    files.mkdir()
    c.clean_pt2 = hostile.clean_pt2(root / "clean.pt2")
    c.good_onnx = _good_onnx(root / "good.onnx")
    c.files.update(hostile.pt2_variants(c.clean_pt2, files, c.sentinels))
    c.files["pt_pickle"] = hostile.pickled_pt(files, c.sentinels)
    c.files.update(hostile.keras_files(files, c.sentinels, root / "armed"))
    c.files.update(hostile.savedmodels(files, c.sentinels))
    c.files["onnx_custom"] = hostile.onnx_custom(files)
    c.files["tflite_custom"] = hostile.tflite_custom(files)
    c.secret = root / "secret.txt"
    c.secret.write_text(f"FWX-SECRET-{os.getpid()}-{id(c)}\n")
    c.files.update(hostile_allow.pt2_graphs(c.clean_pt2, files, c.sentinels))
    c.files.update(hostile_allow.pt2_names(c.clean_pt2, files, c.sentinels))
    c.files.update(hostile_allow.zip_bombs(c.clean_pt2, files))
    c.files.update(hostile_allow.savedmodels(files, c.sentinels, root / "secret_ckpt"))
    c.repo = root / "repo"
    for kind, fmt in ARTIFACT_KINDS.items():
        hostile.version_folder(c.repo, kind, c.files[kind], fmt)
    hostile.version_folder(c.repo, "good", c.good_onnx, "onnx")
    c.manifests = hostile.bad_manifests(c.repo, c.good_onnx, root / "outside-fwx.json")
    assert c.ran() == [], "building the corpus must not run its payloads"
    (root / "armed").touch()
    return c


#: Hostile artifacts that can sit in a version folder (the formats fwx serves), with their format.
ARTIFACT_KINDS = {
    "pt2_sample_inputs": "pt2",
    "pt2_weights": "pt2",
    "pt2_constants": "pt2",
    "pt2_opaque": "pt2",
    "sm_signature": "savedmodel",
    "sm_nested": "savedmodel",
    "pt2_from_file_write": "pt2",
    "pt2_from_file_read": "pt2",
    "pt2_guards": "pt2",
    "pt2_sympy": "pt2",
    "pt2_json_name": "pt2",
    "pt2_extra_name": "pt2",
    "pt2_casefold": "pt2",
    "pt2_protocol0": "pt2",
    "pt2_bomb": "pt2",
    "pt2_liar": "pt2",
    "sm_save_op": "savedmodel",
    "sm_graph_from_string": "savedmodel",
    "sm_saver_hijack": "savedmodel",
    "sm_symlink_asset": "savedmodel",
    "onnx_custom": "onnx",
    "tflite_custom": "tflite",
}
