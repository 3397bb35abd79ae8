"""Pairing artifact tensors with reference tensors by the names converters keep (pure, no framework)."""

from __future__ import annotations

import numpy as np

from fwx.validators.locate import _first_confirmed, align
from fwx.validators.locate_match import Probe, pair, sanitize, torch_scope
from fwx.validators.mismatch import NodeError


def test_torch_onnx_scopes_become_module_names() -> None:
    assert torch_scope("/layer1/layer1.0/conv1/Conv") == "layer1.0.conv1"
    assert torch_scope("/inner/layer1/layer1.0/Add") == "layer1.0"  # fwx's export wrapper is not the model's
    assert torch_scope("/Relu") == ""
    assert torch_scope("functional_1/c1_1/Relu") == ""  # not a torch.onnx name


def _probes(names: list[str]) -> list[Probe]:
    return [Probe(n, n, "op") for n in names]


def test_a_module_pairs_with_the_last_node_inside_it_and_a_folded_layer_is_an_alternative() -> None:
    ref = _probes(["stem", "layer1.0.conv1", "layer1.0.bn", "layer1.0", "fc"])  # hook order
    cand = _probes(
        ["/inner/stem/Conv", "/inner/layer1/layer1.0/conv1/Conv", "/inner/layer1/layer1.0/Relu"]
        + ["/inner/layer1/layer1.0/Add", "/inner/fc/Gemm"]
    )
    pairs, how = pair(ref, cand, [8] * 5, [8] * 5)
    assert how == "layer names"
    got = {cand[p.cand].node: [ref[r].node for r in p.refs] for p in pairs}
    assert got == {
        "/inner/stem/Conv": ["stem"],
        "/inner/layer1/layer1.0/conv1/Conv": ["layer1.0.conv1", "layer1.0.bn"],  # BN folded into the conv
        "/inner/layer1/layer1.0/Add": ["layer1.0"],
        "/inner/fc/Gemm": ["fc"],
    }


def test_tf_names_pair_with_keras_layers_and_translated_onnx_nodes() -> None:
    keras = _probes(["c1", "bn", "c2"])
    tflite = _probes(["functional_1/c1_1/Relu;functional_1/c1_1/convolution", "functional_1/c2_1/convolution1"])
    pairs, _ = pair(keras, tflite, [4, 4, 4], [4, 4])
    assert [(p.cand, p.refs[0]) for p in pairs] == [(0, 0), (1, 2)]
    onnx = _probes(["/stem/Conv", "/Relu", "/fc/Gemm"])
    assert sanitize("/stem/Conv") == "stem_Conv"
    tf_ops = _probes(["PartitionedCall/inner_stem_Conv/BiasAdd", "PartitionedCall/inner_fc_Gemm/add"])
    pairs, _ = pair(onnx, tf_ops, [4, 4, 2], [4, 2])
    assert [(p.cand, p.refs[0]) for p in pairs] == [(0, 0), (1, 2)]


def test_without_shared_names_tensors_pair_by_size_in_order() -> None:
    pairs, how = pair(_probes(["a", "b", "c"]), _probes(["x", "y"]), [12, 5, 3], [12, 3])
    assert how.startswith("shape")
    assert [(p.cand, p.refs) for p in pairs] == [(0, (0,)), (1, (2,))]


def test_align_moves_channels_last_back() -> None:
    ref = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    got = align(ref, np.ascontiguousarray(ref.transpose(0, 2, 3, 1)))
    assert got is not None
    assert np.array_equal(got, ref)
    assert align(ref, np.zeros((5,), np.float32)) is None


def _node(name: str, ratio: float) -> NodeError:
    return NodeError(name, "op", name, "", name, 0.0, 1.0, ratio, "atol")


def test_a_divergence_the_next_node_downstream_undoes_is_not_the_fault() -> None:
    """A converter's fused partial tensor (BN's mul before its add moved into the next conv) differs, then heals."""
    cand = [Probe("a", "a", "op"), Probe("b", "b", "op", inputs=("a",)), Probe("c", "c", "op", inputs=("b",))]
    assert _first_confirmed([_node("a", 50.0), _node("b", 0.1), _node("c", 0.2)], cand) is None
    found = _first_confirmed([_node("a", 0.1), _node("b", 9.0), _node("c", 4.0)], cand)
    assert found is not None
    assert found.node == "b"
