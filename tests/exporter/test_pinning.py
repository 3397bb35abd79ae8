"""Signature pinning helpers: symbols for dynamic dims, probe sizes, output specs."""

from __future__ import annotations

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.exporter.pinning import check_against_model, output_specs, signature_from_examples
from fwx.signature import parse_tensor_spec, spec_from_dims
from fwx.sources.samples import make_feeds, probe_sizes


def test_framework_dims_become_symbols() -> None:
    assert str(spec_from_dims("ids", "int64", [None, None])) == "ids:int64[N,ids_d1]"
    assert str(spec_from_dims("x", "float32", [-1, "unk__3", "seq", 4])) == "x:float32[N,x_d1,seq,4]"


def test_examples_pin_dtype_shape_and_a_dynamic_batch() -> None:
    (spec,) = signature_from_examples({"ids": np.zeros((2, 7), np.int32)})
    assert str(spec) == "ids:int32[N,7]"


def test_probe_sizes_differ_and_avoid_0_and_1() -> None:
    specs = [parse_tensor_spec("a:float32[N,S]"), parse_tensor_spec("b:float32[N,4]")]
    first, second = probe_sizes(specs)
    assert min(first.values()) >= 2
    assert len(set(first.values())) == 2
    assert all(second[k] != first[k] for k in first)


def test_examples_are_tiled_to_the_probe_size() -> None:
    spec = parse_tensor_spec("ids:int64[N,3]")
    ex = {"ids": np.array([[5, 6, 7]])}
    feeds = make_feeds([spec], {"N": 4}, ex)
    assert feeds["ids"].shape == (4, 3)
    assert set(feeds["ids"].ravel()) == {5, 6, 7}


def test_output_dims_follow_the_input_symbol_that_drives_them() -> None:
    sizes = [{"N": 2, "S": 3}, {"N": 6, "S": 7}]
    runs = [[np.zeros((2, 3, 8)), np.zeros((2, 5))], [np.zeros((6, 7, 8)), np.zeros((6, 9))]]
    a, b = output_specs(["h", "z"], runs, sizes)
    assert a.shape == ("N", "S", 8)
    assert b.shape == ("N", "z_d1")


def test_model_signature_checks_name_rank_and_fixed_dims() -> None:
    model = [parse_tensor_spec("x:float32[N,8]")]
    check_against_model([parse_tensor_spec("x:float32[4,8]")], model, rename_ok=False)
    with pytest.raises(InputError, match="axis 1 is fixed to 8"):
        check_against_model([parse_tensor_spec("x:float32[N,9]")], model, rename_ok=False)
    with pytest.raises(InputError, match="not an input of the model"):
        check_against_model([parse_tensor_spec("y:float32[N,8]")], model, rename_ok=False)
    with pytest.raises(InputError, match="takes 1"):
        check_against_model(model * 2, model, rename_ok=True)
