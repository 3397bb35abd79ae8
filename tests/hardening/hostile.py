"""Build the hostile-file corpus at test time: every place a model file can carry code or host I/O.

Each payload, if it ever ran, creates its own file under ``sentinels/`` (the
path is baked into the file), so a test proves "no code ran" by that file's
absence. ``build(root)`` writes everything once per session (a few seconds of
torch/TF/Keras work); ``tests/hardening/test_corpus_potency.py`` proves the
pickle payloads are live by running them through the unguarded torch loaders.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

from fwx.manifest import ArtifactEntry, Manifest, SourceInfo, sha256_path, size_of
from fwx.signature import Signature, TensorSpec

SIG = Signature((TensorSpec("x", "float32", (-1, 1)),), (TensorSpec("y", "float32", (-1, 1)),))


class Payload:
    """Unpickling this runs ``touch <sentinel>`` (os.system, the classic ``__reduce__`` gadget)."""

    def __init__(self, sentinel: Path) -> None:
        self.cmd = f"touch {sentinel}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (self.cmd,))


def _torch_save(obj: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def clean_pt2(path: Path) -> Path:
    """A Linear(1,1) with w=2, b=1 as a .pt2 (turns 4 into 9)."""
    import torch

    lin = torch.nn.Linear(1, 1)
    with torch.no_grad():
        lin.weight.fill_(2.0)
        lin.bias.fill_(1.0)
    ep = torch.export.export(lin.eval(), (torch.ones(2, 1),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(ep, str(path))
    return path


def _rewrite_zip(src: Path, dst: Path, edit: Any) -> Path:
    """Copy ``src`` to ``dst`` letting ``edit(members: dict[name, bytes])`` change, add or drop members."""
    with zipfile.ZipFile(src) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    edit(members)
    with zipfile.ZipFile(dst, "w") as out:
        for name, data in members.items():
            out.writestr(name, data)
    return dst


def _member(members: dict[str, bytes], suffix: str) -> str:
    return next(n for n in members if n.endswith(suffix))


def pt2_variants(clean: Path, out: Path, sentinels: Path) -> dict[str, Path]:
    """Code-running pickles in each member ``torch.export.load`` unpickles."""

    def sample_inputs(m: dict[str, bytes]) -> None:
        m[_member(m, "sample_inputs/model.pt")] = _torch_save(Payload(sentinels / "pt2_sample_inputs"))

    def weights(m: dict[str, bytes]) -> None:
        cfg_name = _member(m, "model_weights_config.json")
        cfg = json.loads(m[cfg_name])
        fqn, meta = next(iter(cfg["config"].items()))
        meta["use_pickle"] = True
        m[cfg_name.rsplit("/", 1)[0] + "/" + meta["path_name"]] = _torch_save(Payload(sentinels / "pt2_weights"))
        m[cfg_name] = json.dumps(cfg).encode()
        del fqn

    def _constant(m: dict[str, bytes], path_name: str, blob: bytes) -> None:
        cfg_name = _member(m, "model_constants_config.json")
        cfg = json.loads(m[cfg_name])
        cfg["config"]["evil"] = {"path_name": path_name, "is_param": False, "use_pickle": True, "tensor_meta": None}
        m[cfg_name.rsplit("/", 1)[0] + "/" + path_name] = blob
        m[cfg_name] = json.dumps(cfg).encode()

    def constants(m: dict[str, bytes]) -> None:
        _constant(m, "tensor_99", _torch_save(Payload(sentinels / "pt2_constants")))

    def opaque(m: dict[str, bytes]) -> None:
        _constant(m, "opaque_obj_0", pickle.dumps(Payload(sentinels / "pt2_opaque"), protocol=2))

    edits = {
        "pt2_sample_inputs": sample_inputs,
        "pt2_weights": weights,
        "pt2_constants": constants,
        "pt2_opaque": opaque,
    }
    return {k: _rewrite_zip(clean, out / f"{k}.pt2", e) for k, e in edits.items()}


def pickled_pt(out: Path, sentinels: Path) -> Path:
    path = out / "evil_module.pt"
    path.write_bytes(_torch_save(Payload(sentinels / "pt_pickle")))
    return path


def keras_files(out: Path, sentinels: Path, armed: Path) -> dict[str, Path]:
    """A Lambda layer (.keras and legacy .h5) and a config naming a foreign module.

    Keras calls the Lambda while building the model, so the payload only fires
    once ``armed`` exists (the fixture creates it after building).
    """
    import keras

    cmd = f"test -e {armed} && touch {sentinels / 'keras_lambda'}"
    lam = eval(f"lambda x: (__import__('os').system({cmd!r}), x)[1]")  # noqa: S307 - the hostile payload itself
    model = keras.Sequential([keras.Input((1,)), keras.layers.Lambda(lam), keras.layers.Dense(1)])
    files = {"keras_lambda": out / "lambda.keras", "h5_lambda": out / "lambda.h5"}
    model.save(files["keras_lambda"])
    model.save(files["h5_lambda"])
    layer = {"module": "os", "class_name": "system", "config": {}, "registered_name": "os>system"}
    config = {"module": "keras.src.models.functional", "class_name": "Functional", "config": {"layers": [layer]}}
    files["keras_module"] = out / "foreign.keras"
    with zipfile.ZipFile(files["keras_module"], "w") as zf:
        zf.writestr("config.json", json.dumps(config))
        zf.writestr("metadata.json", "{}")
        zf.writestr("model.weights.h5", b"")
    return files


def savedmodels(out: Path, sentinels: Path) -> dict[str, Path]:
    """``tf.io.write_file`` in the serving signature itself and in a function it calls."""
    import tensorflow as tf

    spec = [tf.TensorSpec([None, 1], tf.float32, name="x")]
    direct_target = str(sentinels / "sm_signature")
    nested_target = str(sentinels / "sm_nested")

    class Direct(tf.Module):
        @tf.function(input_signature=spec)
        def serve(self, x: Any) -> Any:
            tf.io.write_file(direct_target, tf.strings.as_string(tf.reduce_sum(x)))
            return {"y": x * 2.0 + 1.0}

    class Nested(tf.Module):
        @tf.function
        def helper(self, x: Any) -> Any:
            tf.io.write_file(nested_target, tf.strings.as_string(tf.reduce_sum(x)))
            return x * 2.0

        @tf.function(input_signature=spec)
        def serve(self, x: Any) -> Any:
            return {"y": self.helper(x) + 1.0}

    files = {}
    for key, mod in (("sm_signature", Direct()), ("sm_nested", Nested())):
        files[key] = out / f"{key}.savedmodel"
        tf.saved_model.save(mod, str(files[key]), signatures={"serving_default": mod.serve})
    return files


def onnx_custom(out: Path) -> Path:
    """A node in a custom domain: it can only run through a custom-op library."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Pwn", ["x"], ["y"], domain="com.evil", name="pwn")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.evil", 1)])
    model.ir_version = 8
    path = out / "custom_op.onnx"
    onnx.save(model, str(path))
    return path


def tflite_custom(out: Path) -> Path:
    """A TF op with no TFLite builtin, let through as a custom op (``allow_custom_ops``)."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([1, 1], tf.float32)])
    def fn(x: Any) -> Any:
        return tf.math.igamma(x, x)

    conv = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    conv.allow_custom_ops = True
    path = out / "custom_op.tflite"
    path.write_bytes(conv.convert())
    return path


def version_folder(repo: Path, name: str, artifact: Path, fmt: str, version: int = 1) -> Path:
    """``repo/name/version`` holding ``artifact`` and a fwx.json whose checksums MATCH it."""
    import shutil

    folder = repo / name / str(version)
    folder.mkdir(parents=True)
    dest = folder / ("model." + fmt if fmt != "savedmodel" else "model.savedmodel")
    if artifact.is_dir():
        shutil.copytree(artifact, dest, symlinks=True)  # a symlinked asset stays a link
    else:
        shutil.copy2(artifact, dest)
    entry = ArtifactEntry(
        format=fmt, path=dest.name, sha256=sha256_path(dest), size_bytes=size_of(dest), signature=SIG.to_json()
    )
    Manifest(
        name=name,
        version=version,
        source=SourceInfo("(hostile corpus)", "", fmt, fmt),
        signature=SIG.to_json(),
        artifacts={fmt: entry},
    ).write(folder)
    return folder


def bad_manifests(repo: Path, good_onnx: Path, outside: Path) -> dict[str, str]:
    """Versions whose fwx.json is tampered, malformed or out of bounds -> the field the error must name."""
    cases: dict[str, tuple[Any, str]] = {
        "m_version_negative": (lambda d: d.update(version=-1), "version"),
        "m_name_traversal": (lambda d: d.update(name="../../evil"), "name"),
        "m_size_huge": (lambda d: d["artifacts"]["onnx"].update(size_bytes=1e30), "size_bytes"),
        "m_many_inputs": (
            lambda d: d["signature"].update(
                inputs=[{"name": f"i{i}", "dtype": "float32", "shape": [1]} for i in range(10_000)]
            ),
            "inputs",
        ),
        "m_artifacts_list": (lambda d: d.update(artifacts=[d["artifacts"]["onnx"]]), "artifacts"),
        "m_unknown_format": (lambda d: d["artifacts"]["onnx"].update(format="exe"), "format"),
        "m_bad_dtype": (lambda d: d["signature"]["inputs"][0].update(dtype="evil"), "dtype"),
        "m_tampered": (None, "checksum mismatch"),
        "m_deep": (None, "nested too deeply"),
        "m_symlink": (None, "symbolic link"),
    }
    for name, (edit, _) in cases.items():
        folder = version_folder(repo, name, good_onnx, "onnx")
        manifest = folder / "fwx.json"
        data = json.loads(manifest.read_text())
        if edit is not None:
            edit(data)
            manifest.write_text(json.dumps(data))
        elif name == "m_tampered":
            (folder / "model.onnx").write_bytes(good_onnx.read_bytes() + b"\0")
        elif name == "m_deep":
            manifest.write_text('{"name": "m_deep", "validation": ' + "[" * 100_000 + "]" * 100_000 + "}")
        elif name == "m_symlink":
            outside.write_text(manifest.read_text())
            manifest.unlink()
            manifest.symlink_to(outside)
    return {name: why for name, (_, why) in cases.items()}
