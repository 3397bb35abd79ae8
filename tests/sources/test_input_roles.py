"""Each integer input takes the range of the table it indexes, and a mask is known by what it feeds.

Before, every integer input of a PyTorch or Keras model was bounded by the
model's smallest embedding (a BERT's ``input_ids`` drawn from {0, 1} because
``token_type_ids`` has 2 rows) and a mask was known only by its name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.formats import Format
from fwx.signature import Signature, TensorSpec
from fwx.sources.input_roles import input_roles
from fwx.sources.load import LoadedSource
from fwx.sources.samples import InputConfig, generate_inputs, hints_from_json, hints_to_json

torch = pytest.importorskip("torch")

NAMES = ("input_ids", "keep", "token_type_ids", "mask_id")
SIG = Signature(
    tuple(TensorSpec(n, "int64", ("N", "S")) for n in NAMES),
    (TensorSpec("h", "float32", ("N", "S", 8)),),
)


class Bertish(torch.nn.Module):  # type: ignore[misc]
    """Words (50 rows), token types (2), positions from ``cumsum(ids != 0)`` (RoBERTa's way, 64 rows: it
    must not bound the ids), a mask named ``keep`` used as one, and an id input named like a mask."""

    def __init__(self) -> None:
        super().__init__()
        self.words, self.types = torch.nn.Embedding(50, 8), torch.nn.Embedding(2, 8)
        self.pos, self.masks = torch.nn.Embedding(64, 8), torch.nn.Embedding(7, 8)

    def forward(
        self, input_ids: torch.Tensor, keep: torch.Tensor, token_type_ids: torch.Tensor, mask_id: torch.Tensor
    ) -> torch.Tensor:
        positions = torch.cumsum((input_ids != 0).long(), dim=1)
        h = self.words(input_ids) + self.types(token_type_ids) + self.pos(positions) + self.masks(mask_id)
        bias = (1.0 - keep[:, :, None].to(h.dtype)) * -1e4
        return h + bias


def _src(obj: Any, fmt: Format = Format.PYTORCH) -> LoadedSource:
    return LoadedSource(fmt, Format.PYTORCH, None, "test", "torch", "", obj=obj)


def _check(roles: Any) -> None:
    assert roles.ranges == {"input_ids": (0, 50), "token_type_ids": (0, 2), "mask_id": (0, 7)}
    assert roles.masks == frozenset({"keep"})
    assert "indexes" in roles.notes["input_ids"]
    assert "50" in roles.notes["input_ids"]
    assert "feeds" in roles.notes["keep"]  # by use, not by name


def test_eager_ids_take_the_table_they_index_and_a_mask_is_known_by_use() -> None:
    _check(input_roles(_src(Bertish().eval()), SIG))


def test_torchscript_inputs_are_followed_in_the_graph() -> None:
    _check(input_roles(_src(torch.jit.script(Bertish().eval()), Format.TORCHSCRIPT), SIG))


def test_pt2_program_inputs_are_followed_in_a_traced_run() -> None:
    from fwx.sources.torch_source import program_module

    args = tuple(torch.ones(2, 5, dtype=torch.long) for _ in NAMES)
    n, s = torch.export.Dim("n"), torch.export.Dim("s", min=2, max=32)
    ep = torch.export.export(Bertish().eval(), args, dynamic_shapes=tuple({0: n, 1: s} for _ in NAMES))
    _check(input_roles(_src(program_module(ep), Format.PT2), SIG))


def test_samples_follow_the_roles_and_survive_fwx_json() -> None:
    roles = input_roles(_src(Bertish().eval()), SIG)
    cfg = InputConfig(ranges=roles.ranges, masks=roles.masks, notes=roles.notes, samples=6)
    back = hints_from_json(hints_to_json(cfg), SIG)
    assert back.masks == cfg.masks
    assert back.notes == cfg.notes
    assert back.ranges == cfg.ranges
    drawn = generate_inputs(SIG, back)
    ids = np.concatenate([s["input_ids"].ravel() for s in drawn])
    assert ids.max() >= 2
    assert ids.max() < 50
    assert all(set(np.unique(s["mask_id"])) <= set(range(7)) for s in drawn)
    assert any((s["keep"] == 0).any() for s in drawn)  # padding, not random ids


def test_keras_inputs_are_followed_in_the_layer_graph() -> None:
    keras = pytest.importorskip("keras")
    ids = keras.Input((None,), dtype="int32", name="input_ids")
    types = keras.Input((None,), dtype="int32", name="token_type_ids")
    keep = keras.Input((None,), dtype="int32", name="keep")
    h = keras.layers.Embedding(50, 8)(ids) + keras.layers.Embedding(2, 8)(types)
    h = keras.layers.MultiHeadAttention(2, 4)(h, h, attention_mask=keras.layers.Reshape((1, -1))(keep))
    model = keras.Model([ids, types, keep], h)
    sig = Signature(
        tuple(TensorSpec(n, "int32", ("N", "S")) for n in ("input_ids", "token_type_ids", "keep")),
        (TensorSpec("h", "float32", ("N", "S", 8)),),
    )
    roles = input_roles(LoadedSource(Format.KERAS, Format.KERAS, None, "t", "keras", "", obj=model), sig)
    assert roles.ranges == {"input_ids": (0, 50), "token_type_ids": (0, 2)}
    assert roles.masks == frozenset({"keep"})
    assert "attention_mask" in roles.notes["keep"]


def test_onnx_ids_are_followed_through_casts_and_masks_by_where(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from fwx.sources.load import load_source

    table = numpy_helper.from_array(np.zeros((37, 4), np.float32), "table")
    zero = numpy_helper.from_array(np.zeros((1,), np.float32), "zero")
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
        helper.make_node("Gather", ["table", "ids32"], ["e"]),
        helper.make_node("Cast", ["pad"], ["padb"], to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["padb", "axes"], ["padb3"]),
        helper.make_node("Where", ["padb3", "e", "zero"], ["h"]),
    ]
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["N", "S"]) for n in ("ids", "pad")],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", "S", 4])],
        [table, zero, axes],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    src = load_source(tmp_path / "m.onnx")
    assert src.inputs is not None
    assert src.outputs is not None
    roles = input_roles(src, Signature(src.inputs, src.outputs))
    assert roles.ranges == {"ids": (0, 37)}
    assert roles.masks == frozenset({"pad"})


def test_a_model_that_cannot_be_followed_says_so_and_keeps_the_guess() -> None:
    class Broken(Bertish):
        def forward(self, *args: Any) -> Any:
            raise RuntimeError("no run for you")

    roles = input_roles(_src(Broken().eval()), SIG)
    assert roles.ranges["input_ids"] == (0, 2)  # the smallest table, conservatively
    assert "could not be followed: no run for you" in roles.notes["input_ids"]
    assert roles.masks == frozenset({"mask_id"})  # by name only
