"""The one sample generator: tracing feeds and validation samples agree, and sizes are bounded before allocating."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwx.errors import FwxError, InputError
from fwx.signature import Signature, TensorSpec
from fwx.sources.samples import InputConfig, generate_inputs, make_feeds, probe_sizes

HUGE = 2**40


def test_tracing_feeds_keep_integer_inputs_small_and_floats_normal() -> None:
    specs = (TensorSpec("ids", "int64", ("N", "S")), TensorSpec("x", "float32", ("N", 4)))
    feeds = make_feeds(specs, probe_sizes(specs)[0])
    assert feeds["ids"].shape == (2, 3)
    assert set(np.unique(feeds["ids"])) <= {0, 1}
    assert feeds["x"].dtype == np.float32
    assert feeds["x"].shape == (2, 4)


def test_a_huge_fixed_dim_is_one_line_naming_the_input() -> None:
    sig = Signature((TensorSpec("x", "float32", ("N", HUGE)),))
    with pytest.raises(InputError, match=r"input 'x': a sample of shape \[1, 1099511627776\]"):
        generate_inputs(sig, InputConfig(samples=1))
    with pytest.raises(InputError, match="input 'x'"):
        make_feeds(sig.inputs, {"N": 2})


def test_onnx_source_with_a_2_pow_40_dim_fails_cleanly(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from fwx.exporter import ExportOptions, export

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "huge",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", HUGE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", HUGE])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "huge.onnx")
    with pytest.raises(FwxError) as info:
        export(tmp_path / "huge.onnx", ["onnx"], ExportOptions(out=tmp_path / "repo"))
    assert "'x'" in info.value.message
    assert "\n" not in info.value.message
    assert not (tmp_path / "repo" / "huge").exists() or not any((tmp_path / "repo" / "huge").iterdir())
