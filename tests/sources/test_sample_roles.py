"""Integer inputs sampled by what they are: masks, ids within the vocabulary, user ranges and values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.errors import UsageError
from fwx.signature import Signature, TensorSpec
from fwx.sources.samples import (
    InputConfig,
    check_names,
    generate_inputs,
    make_feeds,
    parse_input_range,
    parse_input_values,
)

SIG = Signature(
    (
        TensorSpec("input_ids", "int64", ("N", "S")),
        TensorSpec("attention_mask", "int64", ("N", "S")),
        TensorSpec("token_type_ids", "int64", ("N", "S")),
    ),
    (TensorSpec("h", "float32", ("N", "S", 4)),),
)


def test_a_mask_is_ones_with_padding_at_the_end_and_never_an_empty_row() -> None:
    for sample in generate_inputs(SIG, InputConfig(samples=6, batch_sizes=(1, 5), dim_sizes=(8, 12))):
        mask = sample["attention_mask"]
        assert set(np.unique(mask)) <= {0, 1}
        assert mask[0].all()
        for row in mask:
            assert row[0] == 1
            assert list(row) == sorted(row, reverse=True)  # 1s first, padding at the end
    assert any((s["attention_mask"] == 0).any() for s in generate_inputs(SIG, InputConfig(samples=6)))


def test_ranges_and_values_bound_integer_inputs() -> None:
    cfg = InputConfig(ranges={"input_ids": (100, 105)}, values={"token_type_ids": (0.0, 1.0)})
    for sample in generate_inputs(SIG, cfg) + [make_feeds(SIG.inputs, {"N": 2, "S": 3}, cfg=cfg)]:
        assert sample["input_ids"].min() >= 100
        assert sample["input_ids"].max() < 105
        assert set(np.unique(sample["token_type_ids"])) <= {0, 1}
        assert sample["token_type_ids"].dtype == np.int64


def test_cli_spellings_and_their_errors() -> None:
    assert parse_input_range("input_ids:0,30522") == ("input_ids", (0, 30522))
    assert parse_input_values("token_type_ids:0,1") == ("token_type_ids", (0.0, 1.0))
    for bad in ("input_ids", "input_ids:5,5", "input_ids:a,b", ":0,3"):
        with pytest.raises(UsageError, match="--input-range"):
            parse_input_range(bad)
    with pytest.raises(UsageError, match="--input-values"):
        parse_input_values("x:")
    with pytest.raises(UsageError, match="--input-range names ids, not an input of the model"):
        check_names(InputConfig(ranges={"ids": (0, 3)}), SIG)


def test_onnx_ids_take_the_vocabulary_of_the_gather_they_feed(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from fwx.sources.input_roles import id_ranges
    from fwx.sources.load import load_source

    table = numpy_helper.from_array(np.zeros((37, 4), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["h"])],
        "emb",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", "S"])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", "S", 4])],
        [table],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "emb.onnx")
    src = load_source(tmp_path / "emb.onnx")
    sig = Signature(src.inputs or (), src.outputs or ())
    assert id_ranges(src, sig) == {"input_ids": (0, 37)}


def test_torch_ids_take_the_table_each_one_indexes() -> None:
    torch = pytest.importorskip("torch")
    from fwx.formats import Format
    from fwx.sources.input_roles import id_ranges
    from fwx.sources.load import LoadedSource

    class Bert(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.words, self.types = torch.nn.Embedding(300, 4), torch.nn.Embedding(2, 4)

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.words(input_ids) + self.types(token_type_ids)

    src = LoadedSource(Format.PYTORCH, Format.PYTORCH, None, "test", "torch", "", obj=Bert())
    assert id_ranges(src, SIG) == {"input_ids": (0, 300), "token_type_ids": (0, 2)}


def test_offsets_are_bag_starts_into_the_flat_ids() -> None:
    """``nn.EmbeddingBag(ids, offsets)``: offsets start at 0, never decrease and stay within the ids (an
    empty bag is allowed); for validation samples and for tracing feeds alike."""
    sig = Signature(
        (TensorSpec("item_ids", "int64", ("n",)), TensorSpec("offsets", "int64", ("b",))),
        (TensorSpec("y", "float32", ("b", 1)),),
    )
    feeds = [*generate_inputs(sig, InputConfig(samples=4)), make_feeds(sig.inputs, {"n": 5, "b": 3})]
    for sample in feeds:
        offsets, n = sample["offsets"], len(sample["item_ids"])
        assert offsets[0] == 0
        assert np.all(np.diff(offsets) >= 0)
        assert offsets.max() <= n
    given = make_feeds(sig.inputs, {"n": 5, "b": 2}, cfg=InputConfig(values={"offsets": (0.0,)}))
    assert given["offsets"].tolist() == [0, 0]  # --input-values wins, in tracing feeds as in samples
