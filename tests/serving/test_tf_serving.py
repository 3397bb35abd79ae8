"""TF Serving REST: instances/inputs bodies, b64, and TF Serving's response and metadata shapes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(
        tmp_path_factory.mktemp("tfs") / "repo", {"linear": ["linear", "linear"], "multi": "multi", "text": "text"}
    )
    return live_server(repo, load_probe=False)


def _predict(srv: Any, path: str, body: Any) -> Any:
    return srv.request("POST", f"/v1/models/{path}:predict", content=json.dumps(body))


def test_instances_single_output_unwrapped(srv: Any) -> None:
    r = _predict(srv, "linear", {"instances": [[4.0], [0.5]]})
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": [[9.0], [2.0]]}


def test_inputs_columnar_single_output(srv: Any) -> None:
    assert _predict(srv, "linear", {"inputs": [[1.0]]}).json() == {"outputs": [[3.0]]}
    assert _predict(srv, "linear", {"inputs": {"x": [[1.0], [2.0]]}}).json() == {"outputs": [[3.0], [5.0]]}


def test_named_instances_and_multiple_outputs(srv: Any) -> None:
    body = {"instances": [{"a": [1, 5, 2], "b": [1, 1, 1]}, {"a": [0, 0, 9], "b": [2, 2, 2]}]}
    r = _predict(srv, "multi", body)
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": [{"sum": [2.0, 6.0, 3.0], "idx": 1}, {"sum": [2.0, 2.0, 11.0], "idx": 2}]}
    cols = _predict(srv, "multi", {"inputs": {"a": [[1, 5, 2]], "b": [[1, 1, 1]]}}).json()
    assert cols == {"outputs": {"sum": [[2.0, 6.0, 3.0]], "idx": [1]}}


def test_versioned_predict_and_signature_name(srv: Any) -> None:
    r = _predict(srv, "linear/versions/2", {"signature_name": "serving_default", "instances": [[4.0]]})
    assert r.json() == {"predictions": [[9.0]]}
    bad = _predict(srv, "linear", {"signature_name": "other", "instances": [[4.0]]})
    assert bad.status_code == 400
    assert "signature_name" in bad.json()["error"]


def test_b64_bytes(srv: Any) -> None:
    r = _predict(srv, "text", {"instances": [{"b64": "aGk="}, "plain"]})
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": ["hi", "plain"]}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"instances": [[4.0]], "inputs": [[4.0]]}, "exactly one"),
        ({}, "exactly one"),
        ({"instances": []}, "instances must have at least 1 item"),
        ({"instances": [["four"]]}, "float32"),
        ({"instances": [[1.0, 2.0]]}, "dimension 1 must be 1"),
        ({"inputs": {"z": [[1.0]]}}, "unknown input"),
        ({"instances": [{"a": [1, 2, 3]}, {"b": [1, 2, 3]}]}, "same keys"),
    ],
)
def test_bad_predict_bodies_are_400(srv: Any, body: Any, fragment: str) -> None:
    r = _predict(srv, "linear", body)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]


def test_model_status_shape(srv: Any) -> None:
    status = srv.request("GET", "/v1/models/linear").json()
    assert status == {
        "model_version_status": [
            {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
            {"version": "1", "state": "END", "status": {"error_code": "OK", "error_message": ""}},
        ]
    }
    one = srv.request("GET", "/v1/models/linear/versions/2").json()
    assert [s["version"] for s in one["model_version_status"]] == ["2"]
    assert srv.request("GET", "/v1/models/nope").status_code == 404


def test_model_status_reads_a_zero_padded_version_as_the_number(srv: Any) -> None:
    # /v2/models/linear/versions/02/ready means version 2; so must the TF Serving status route
    padded = srv.request("GET", "/v1/models/linear/versions/02").json()
    assert [s["version"] for s in padded["model_version_status"]] == ["2"]


def test_metadata_signature_def(srv: Any) -> None:
    meta = srv.request("GET", "/v1/models/multi/metadata").json()
    assert meta["model_spec"] == {"name": "multi", "signature_name": "", "version": "1"}
    sig = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["method_name"] == "tensorflow/serving/predict"
    assert sig["inputs"]["b"]["dtype"] == "DT_INT64"
    assert sig["inputs"]["a"]["tensor_shape"]["dim"] == [{"size": "-1", "name": ""}, {"size": "3", "name": ""}]
    assert sig["outputs"]["idx"]["dtype"] == "DT_INT64"


def test_metadata_tensor_names_are_tfs(srv: Any) -> None:
    sig = srv.request("GET", "/v1/models/multi/metadata").json()["metadata"]["signature_def"]["signature_def"]
    sd = sig["serving_default"]
    assert {k: v["name"] for k, v in sd["inputs"].items()} == {"a": "serving_default_a:0", "b": "serving_default_b:0"}
    outs = {k: v["name"] for k, v in sd["outputs"].items()}
    assert sorted(outs.values()) == [f"StatefulPartitionedCall:{i}" for i in range(len(outs))]
    assert [outs[k] for k in sorted(outs)] == sorted(outs.values())  # numbered in sorted key order


@pytest.mark.slow
def test_tensor_names_match_a_real_savedmodel(tmp_path: Path) -> None:
    """What tf.saved_model.save writes into saved_model.pb is what fwx reports."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    from fwx.serving.rest.tf_serving import tf_tensor_names
    from fwx.signature import Signature, TensorSpec

    class M(tf.Module):  # with a variable, like every trained model: a stateful call op
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(2.0)

        @tf.function(
            input_signature=[
                tf.TensorSpec([None, 2], tf.float32, name="image"),
                tf.TensorSpec([None, 2], tf.float32, name="input-ids.0"),
                tf.TensorSpec([None, 2], tf.float32, name="2nd"),
            ]
        )
        def serve(self, image: tf.Tensor, ids: tf.Tensor, second: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"probs": image + ids, "logits": image * self.w, "a_first": second}

    m = M()
    tf.saved_model.save(m, str(tmp_path / "sm"), signatures={"serving_default": m.serve})
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((tmp_path / "sm" / "saved_model.pb").read_bytes())
    real = proto.meta_graphs[0].signature_def["serving_default"]
    spec = ("N", 2)
    sig = Signature(
        tuple(TensorSpec(n, "float32", spec) for n in ("image", "input-ids.0", "2nd")),
        tuple(TensorSpec(n, "float32", spec) for n in ("probs", "logits", "a_first")),
    )
    ins, outs = tf_tensor_names(sig)
    assert ins == {k: t.name for k, t in real.inputs.items()}
    assert outs == {k: t.name for k, t in real.outputs.items()}


@pytest.mark.parametrize("doc", [{"inputs": {"x": [[1.0]], "a\nb": 1}}, {"instances": [{"x": [1.0], "a\nb": 1}]}])
def test_unknown_input_named_with_a_newline_stays_on_one_line(doc: dict[str, Any]) -> None:
    # the decoder fuzz found it: the unknown name was echoed raw, splitting the 400 message in two
    from fwx.errors import InputError
    from fwx.serving.rest.tf_serving import parse_predict
    from fwx.signature import Signature, TensorSpec

    sig = Signature((TensorSpec("x", "float32", ("N", 1)),), (TensorSpec("y", "float32", ("N", 1)),))
    with pytest.raises(InputError, match="unknown input") as info:
        parse_predict(json.dumps(doc).encode(), "m", None, sig, None)
    assert "\n" not in str(info.value)
