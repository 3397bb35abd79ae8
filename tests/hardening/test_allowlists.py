"""The allow-lists of issue 24 on their own: derived from the installed frameworks, legit models pass,
and a zip bomb is refused without ever allocating what it declares."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fwx.errors import UnsafeModelError
from fwx.formats import Format
from fwx.safety import check_model, pt2_bytes

from . import hostile_allow

ROOT = Path(__file__).resolve().parents[2]


def test_weights_only_opcodes_are_the_ones_torch_implements() -> None:
    """The opcode list is torch's own: read back from its unpickler's source, so a torch upgrade that
    changes it fails here instead of silently widening or narrowing the rule."""
    import inspect

    from torch import _weights_only_unpickler as wou

    from fwx.safety.pickles import WEIGHTS_ONLY_OPCODES

    src = inspect.getsource(wou.Unpickler.load)
    names = set(re.findall(r"key\[0\] == ([A-Z_0-9]+)\[0\]", src))
    for group in re.findall(r"key\[0\] in \[([A-Z_0-9\[\], ]+)\]", src):
        names |= set(re.findall(r"([A-Z_0-9]+)\[0\]", group))
    assert names == set(WEIGHTS_ONLY_OPCODES)


@pytest.mark.slow
def test_tf_allow_list_matches_the_installed_tensorflow() -> None:
    from fwx.safety.tf_allowed_ops import ALLOWED_OPS, HOST_OPS, derive

    assert derive() == ALLOWED_OPS, (
        "regenerate with: python -c 'from fwx.safety.tf_allowed_ops import *; print(render(derive()))'"
    )
    assert not set(HOST_OPS) & ALLOWED_OPS
    assert {"WriteFile", "ReadFile", "DatasetFromGraph", "PyFunc", "XlaCallModule", "SaveV2", "RestoreV2"}.isdisjoint(
        ALLOWED_OPS
    )


def test_pt2_op_allow_list_is_derived_from_torch() -> None:
    from fwx.safety.pt2_graph import target_allowed

    for ok in (
        "torch.ops.aten.linear.default",
        "torch.ops.aten.add_.Tensor",
        "torch.ops.aten.__and__.Tensor",
        "torch.ops.aten.scaled_dot_product_attention.default",
        "torch.ops.aten._assert_scalar.default",
        "torch.ops.higher_order.cond",
        "_operator.getitem",
        "torch.sym_max",
    ):
        assert target_allowed(ok), ok
    for bad in (
        "torch.ops.aten.from_file.default",
        "torch.ops.aten._pin_memory.default",
        "torch.ops.aten.save.default",
        "torch.ops.aten._print.default",
        "torch.ops.aten.set_.source_Storage",
        "torch.ops.higher_order.print",
        "torch.ops.higher_order.invoke_leaf_function",
        "torch.ops.mylib.evil.default",
        "torch.ops.aten.__class__.__init__",
        "torch.load",
        "#evil:op",
    ):
        assert not target_allowed(bad), bad


def _tf1_savedmodel(path: Path) -> Path:
    import tensorflow as tf

    v1 = tf.compat.v1
    with tf.Graph().as_default(), v1.Session() as sess:
        x = v1.placeholder(tf.float32, [None, 1], name="x")
        w = v1.get_variable("w", initializer=2.0, use_resource=False)
        y = tf.identity(x * w + 1.0, name="y")
        sess.run(v1.global_variables_initializer())
        builder = v1.saved_model.Builder(str(path))
        sig = v1.saved_model.predict_signature_def({"x": x}, {"y": y})
        builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": sig})
        builder.save()
    return path


def test_tf1_saver_passes_and_the_hijacked_one_is_refused(tmp_path: Path) -> None:
    """The TF1 Saver's own restore (RestoreV2 reading the fed file name) passes; the same model whose
    restore_op_name points at a subgraph restoring from a path of the attacker's choosing does not."""
    check_model(Format.SAVEDMODEL, _tf1_savedmodel(tmp_path / "tf1"), trust=False)
    files = hostile_allow.savedmodels(tmp_path, tmp_path, tmp_path / "secret")
    with pytest.raises(UnsafeModelError, match="reads a checkpoint other than the one the loader feeds"):
        check_model(Format.SAVEDMODEL, files["sm_saver_hijack"], trust=False)


def test_a_hard_linked_savedmodel_file_is_refused(tmp_path: Path, keras_files: dict[str, Path]) -> None:
    import os
    import shutil

    sm = shutil.copytree(keras_files["savedmodel"], tmp_path / "sm")
    os.link(sm / "saved_model.pb", tmp_path / "elsewhere.pb")
    with pytest.raises(UnsafeModelError, match="hard links"):
        check_model(Format.SAVEDMODEL, sm, trust=False)


_RSS_CHILD = """
import resource, sys
from fwx.errors import FwxError
from fwx.safety import pt2_bytes
import torch  # the scanner's allow-list comes from torch: count its import in the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
lines = []
for p in sys.argv[1:]:
    try:
        pt2_bytes(p, trust=False)
        lines.append("loaded")
    except FwxError as exc:
        lines.append(exc.message)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) // 1024)
print("\\n".join(lines))
"""


@pytest.mark.slow
def test_zip_bombs_are_refused_without_inflating(tmp_path: Path, corpus: Any) -> None:
    """A ~1 MiB .pt2 whose member inflates to 1 GiB, declared (budget) or hidden (declares 1 KiB):
    one line each, and the child's peak RSS grows by far less than the GiB."""
    bombs = [corpus.files["pt2_bomb"], corpus.files["pt2_liar"]]
    assert all(b.stat().st_size < 2 << 20 for b in bombs)
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, *map(str, bombs)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    grew_mib, budget, liar = proc.stdout.strip().splitlines()
    assert "inflate budget" in budget, budget
    assert "1024.0 MiB" in budget, budget
    assert "inflates past its declared 1024 bytes" in liar, liar
    assert int(grew_mib) < 64, f"peak RSS grew by {grew_mib} MiB while refusing the bombs"


def test_inflate_budget_is_configurable(corpus: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FWX_MAX_INFLATE_MB", "0.001")
    with pytest.raises(UnsafeModelError, match="inflate budget"):
        pt2_bytes(corpus.clean_pt2, trust=True)  # bounds hold even for a trusted file
    monkeypatch.delenv("FWX_MAX_INFLATE_MB")
    assert pt2_bytes(corpus.clean_pt2, trust=False)
