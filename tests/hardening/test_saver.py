"""A TF1 saver whose restore op runs a save: TF runs ``restore_op_name`` at load, so it is never a save.

The attack: ``saver_def.restore_op_name`` names a ``NoOp`` that depends only on
the saver's ``SaveV2`` (no ``RestoreV2`` anywhere on that path). The restore side
fails its own check, and the ``SaveV2`` used to stay exempt as the save side's:
loading the model then wrote ``<prefix>.index``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.errors import UnsafeModelError
from fwx.formats import Format
from fwx.safety import check_model

from .test_allowlists import _tf1_savedmodel


def test_a_restore_op_that_runs_the_save_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    from tensorflow.core.protobuf import saved_model_pb2

    path = _tf1_savedmodel(tmp_path / "tf1")
    check_model(Format.SAVEDMODEL, path, trust=False)  # the honest saver passes
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((path / "saved_model.pb").read_bytes())
    mg = sm.meta_graphs[0]
    (save,) = [n.name for n in mg.graph_def.node if n.op == "SaveV2"]
    hijack = mg.graph_def.node.add()
    hijack.name, hijack.op = "restore_all_hijacked", "NoOp"
    hijack.input.append(f"^{save}")
    mg.saver_def.restore_op_name = hijack.name
    (path / "saved_model.pb").write_bytes(sm.SerializeToString())
    with pytest.raises(UnsafeModelError, match="SaveV2"):
        check_model(Format.SAVEDMODEL, path, trust=False)
