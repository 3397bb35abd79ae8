"""The scanners in ``fwx.safety`` on their own: what they refuse, and what they must NOT refuse."""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import time
from pathlib import Path
from typing import Any

import pytest

from fwx.errors import InputError, UnsafeModelError
from fwx.formats import Format
from fwx.repository import TMP_PREFIX, Repository
from fwx.safety import check_model, pt2_bytes
from fwx.safety.pickles import UNRESOLVED, PickleScanError, pickle_globals, torch_safe_globals, unsafe_globals

from . import hostile
from .hostile_allow import vocab_savedmodel

# --- pickles -------------------------------------------------------------------------------------------------


def test_reduce_payload_names_the_global(tmp_path: Path) -> None:
    data = pickle.dumps(hostile.Payload(tmp_path / "s"), protocol=4)
    assert pickle_globals(data) == ["posix.system"]


def test_memo_confusion_is_unresolvable() -> None:
    """STACK_GLOBAL fed from a memo slot that held a non-string: refused, not guessed (picklescan#14)."""
    ops = (
        b"\x80\x04"
        + b"\x8c\x08builtins"
        + b"\x94"  # 'builtins' memo 0
        + b"]"
        + b"\x94"  # [] memo 1
        + b"h\x01"
        + b"\x8c\x04eval"
        + b"\x93"
        + b"."
    )  # BINGET 1 (a list), 'eval', STACK_GLOBAL
    assert pickle_globals(ops) == [UNRESOLVED]


def test_memoized_strings_resolve() -> None:
    """Python's pickler reuses a memoized module string via BINGET: the name is still traced exactly."""
    data = pickle.dumps([os.getcwd, os.getpid], protocol=4)
    assert set(pickle_globals(data)) == {"posix.getcwd", "posix.getpid"}
    assert "BINGET" in "".join(op.name for op, _, _ in pickletools.genops(data))


def test_truncated_pickle_is_an_error() -> None:
    with pytest.raises(PickleScanError):
        pickle_globals(pickle.dumps({"a": 1}, protocol=4)[:-3])


def test_torch_weights_pass_and_legacy_payload_fails(tmp_path: Path) -> None:
    import torch

    allowed = torch_safe_globals()
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf, _use_new_zipfile_serialization=False)  # legacy: pickles back to back
    assert unsafe_globals(buf.getvalue(), allowed) == []
    buf = io.BytesIO()
    torch.save(hostile.Payload(tmp_path / "s"), buf, _use_new_zipfile_serialization=False)
    assert unsafe_globals(buf.getvalue(), allowed) == ["posix.system"]


# --- .pt2 ----------------------------------------------------------------------------------------------------


def test_clean_pt2_passes_and_trust_skips_the_scan(corpus: Any) -> None:
    assert pt2_bytes(corpus.clean_pt2, trust=False)[:4] == b"PK\x03\x04"
    assert pt2_bytes(corpus.files["pt2_weights"], trust=True)  # the user vouched for it: bytes, unscanned


def test_pt2_native_code_and_torchscript_objects_are_refused(corpus: Any, tmp_path: Path) -> None:
    import zipfile

    for member, why in (
        ("clean/data/aotinductor/model/model.so", "native code"),
        ("clean/data/constants/custom_obj_0", "TorchScript object"),
    ):
        bad = tmp_path / f"{why.split()[0]}.pt2"
        hostile._rewrite_zip(corpus.clean_pt2, bad, lambda m, k=member: m.update({k: b"\x7fELF"}))
        with pytest.raises(UnsafeModelError, match=why):
            pt2_bytes(bad, trust=False)
        assert zipfile.is_zipfile(bad)


def test_pt2_scanner_bypasses_are_closed(corpus: Any, tmp_path: Path) -> None:
    """A protocol-0 pickle (no header) as a pickled weight, and a member declared both raw and pickled."""
    import json

    proto0 = pickle.dumps(hostile.Payload(tmp_path / "s"), protocol=0)
    assert not proto0.startswith(b"\x80")

    def headerless(m: dict[str, bytes]) -> None:
        cfg_name = hostile._member(m, "model_weights_config.json")
        cfg = json.loads(m[cfg_name])
        meta = next(iter(cfg["config"].values()))
        meta["use_pickle"] = True
        m[cfg_name.rsplit("/", 1)[0] + "/" + meta["path_name"]] = proto0
        m[cfg_name] = json.dumps(cfg).encode()

    def both_ways(m: dict[str, bytes]) -> None:
        cfg_name = hostile._member(m, "model_weights_config.json")
        cfg = json.loads(m[cfg_name])
        meta = next(iter(cfg["config"].values()))
        cfg["config"]["alias"] = {**meta, "use_pickle": True}  # same member, now also unpickled
        m[cfg_name.rsplit("/", 1)[0] + "/" + meta["path_name"]] = hostile._torch_save(hostile.Payload(tmp_path / "s"))
        m[cfg_name] = json.dumps(cfg).encode()

    for edit in (headerless, both_ways):
        bad = hostile._rewrite_zip(corpus.clean_pt2, tmp_path / f"{edit.__name__}.pt2", edit)
        with pytest.raises(UnsafeModelError, match="posix.system"):
            pt2_bytes(bad, trust=False)


def test_pt2_that_is_not_a_zip(tmp_path: Path) -> None:
    p = tmp_path / "junk.pt2"
    p.write_bytes(b"\x80\x04junk")
    with pytest.raises(InputError, match="not a zip archive"):
        pt2_bytes(p, trust=False)


# --- SavedModel ----------------------------------------------------------------------------------------------


def _scan_dir(path: Path) -> list[str]:
    from tensorflow.core.protobuf import saved_model_pb2

    from fwx.safety.tfgraph import scan_saved_model

    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((path / "saved_model.pb").read_bytes())
    return [str(f) for f in scan_saved_model(sm)]


def test_savedmodels_written_by_tf_and_keras_pass(tmp_path: Path, keras_files: dict[str, Path]) -> None:
    """No false positive on the saver graph: SaveV2/RestoreV2 live in the __traced_save/restore functions."""
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self) -> None:
            self.v = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32)])
        def __call__(self, x: Any) -> Any:
            return {"y": x * self.v + 1.0}

    tf.saved_model.save(M(), str(tmp_path / "plain"))
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((tmp_path / "plain" / "saved_model.pb").read_bytes())
    ops = {n.op for f in sm.meta_graphs[0].graph_def.library.function for n in f.node_def}
    assert {"SaveV2", "RestoreV2"} <= ops  # the exemption is really exercised
    assert _scan_dir(tmp_path / "plain") == []
    assert _scan_dir(keras_files["savedmodel"]) == []  # Keras model.export(), as the runtime tests build it
    check_model(Format.SAVEDMODEL, keras_files["savedmodel"], trust=False)


def test_print_to_a_file_is_refused(tmp_path: Path) -> None:
    import tensorflow as tf

    class P(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x: Any) -> Any:
            tf.print(x, output_stream=f"file://{tmp_path / 'leak.txt'}")
            return {"y": x}

    tf.saved_model.save(P(), str(tmp_path / "p"))
    assert any("PrintV2" in f and "file://" in f for f in _scan_dir(tmp_path / "p"))


def test_a_vocabulary_table_over_the_savedmodels_own_asset_passes_and_one_over_a_host_path_is_refused(
    tmp_path: Path,
) -> None:
    """The seeds' "SavedModel signatures and assets": ``tf.lookup.TextFileInitializer`` copies its file into
    ``assets/`` and the loader hands the initializer that copy, so reading it stays inside the model. An
    asset entry edited to name a host path (absolute, or out through ``..``) reads whatever it names, and is
    refused."""
    import shutil

    from tensorflow.core.protobuf import saved_model_pb2

    from fwx.errors import UnsafeModelError

    vocab_savedmodel(tmp_path / "asset", "the\ncat\nsat\n")
    assert (tmp_path / "asset" / "assets" / "asset_vocab.txt").is_file()
    assert _scan_dir(tmp_path / "asset") == []
    check_model(Format.SAVEDMODEL, tmp_path / "asset", trust=False)
    for key, target in (("absolute", "/etc/hostname"), ("escape", "../../../etc/hostname")):
        shutil.copytree(tmp_path / "asset", tmp_path / key)
        sm = saved_model_pb2.SavedModel()
        sm.ParseFromString((tmp_path / key / "saved_model.pb").read_bytes())
        sm.meta_graphs[0].asset_file_def[0].filename = target
        (tmp_path / key / "saved_model.pb").write_bytes(sm.SerializeToString())
        found = _scan_dir(tmp_path / key)
        assert any("InitializeTableFromTextFileV2 (reads a vocabulary file" in f for f in found), (key, found)
        with pytest.raises(UnsafeModelError, match="reads a vocabulary file"):
            check_model(Format.SAVEDMODEL, tmp_path / key, trust=False)


# --- ONNX and TFLite -----------------------------------------------------------------------------------------


def _onnx(nodes: list[Any], domains: dict[str, int], functions: list[Any] | None = None) -> Any:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in domains.items()], functions=functions or []
    )


def test_onnx_domains() -> None:
    from onnx import helper

    from fwx.safety.onnx_ops import nonstandard_ops

    ms = _onnx([helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")], {"": 17, "com.microsoft": 1})
    assert nonstandard_ops(ms) == []  # onnxruntime's own contrib ops
    fn = helper.make_function(
        "local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])], [helper.make_opsetid("", 17)]
    )
    local = _onnx([helper.make_node("Twice", ["x"], ["y"], domain="local")], {"": 17, "local": 1}, [fn])
    assert nonstandard_ops(local) == []  # a model-local function expands to standard ops
    body = helper.make_graph(
        [helper.make_node("Pwn", ["x"], ["z"], domain="com.evil", name="deep")],
        "b",
        [],
        [helper.make_tensor_value_info("z", 1, [1])],
    )
    nested = _onnx([helper.make_node("If", ["x"], ["y"], then_branch=body, else_branch=body)], {"": 17, "com.evil": 1})
    assert nonstandard_ops(nested) == ["com.evil::Pwn (node deep)"] * 2  # found inside If branches


def test_tflite_builtin_only_passes(keras_files: dict[str, Path]) -> None:
    from fwx.safety.tflite_ops import custom_ops, operator_codes

    data = keras_files["tflite"].read_bytes()
    assert operator_codes(data)
    assert custom_ops(data) == []
    check_model(Format.TFLITE, keras_files["tflite"], trust=False)


# --- repository temp folders (item 13) ----------------------------------------------------------------------


def test_temp_folder_of_a_killed_export_is_swept_at_once(tmp_path: Path) -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that no longer exists: the SIGKILLed exporter
    repo = Repository(tmp_path)
    from fwx.repository import _HOST

    dead = tmp_path / "m" / f"{TMP_PREFIX}{_HOST}-{child.pid}-{'0' * 32}"
    live = tmp_path / "m" / f"{TMP_PREFIX}{_HOST}-{os.getppid()}-{'1' * 32}"
    foreign = tmp_path / "m" / f"{TMP_PREFIX}otherhost-{child.pid}-{'2' * 32}"
    for d in (dead, live, foreign):
        d.mkdir(parents=True)
        (d / "half.onnx").write_bytes(b"x")
    assert repo.sweep_stale("m") == [dead]
    old = time.time() - 7200
    os.utime(foreign, (old, old))
    assert repo.sweep_stale("m") == [foreign]  # another host's pid cannot be checked: only age retires it
    assert live.exists()
