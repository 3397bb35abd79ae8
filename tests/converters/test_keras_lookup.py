"""Keras ``IntegerLookup``/``StringLookup`` reach every format that can hold them (issue 12 item 5).

The tables are static, so fwx freezes them into ONNX ops (integers: a dense
table read with ``Gather``, or key comparisons; strings: ``ai.onnx.ml``
``LabelEncoder``). IntegerLookup then reaches all five targets; StringLookup
reaches SavedModel, TFLite (its builtin HASHTABLE ops) and ONNX, and the torch
formats are skipped naming the layer. Validation samples draw from the
vocabulary plus out-of-vocabulary values, so hits and misses are compared.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ITEMS = [3, 17, 42, 1001, 7]  # within 2**20 consecutive ids: a dense table read with Gather
SPARSE = [5, 77, 10**9, 3 * 10**10]  # spread too wide for a dense table: compared with every key
WORDS = ["cat", "dog", "bird", "fish"]


def _head(keras: Any, idx: Any, vocab: int) -> Any:
    """Embedding -> pooled Dense, weights of order 1 so a wrong index changes the outputs visibly."""
    init = keras.initializers.RandomUniform(-1.0, 1.0, seed=0)
    e = keras.layers.Embedding(vocab, 8, embeddings_initializer=init)(idx)
    return keras.layers.Dense(2, name="score")(keras.layers.GlobalAveragePooling1D()(e))


@pytest.fixture(scope="module")
def lookup_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import keras

    keras.utils.set_random_seed(0)
    root = tmp_path_factory.mktemp("lookup")
    x = keras.Input((4,), dtype="int64", name="item_ids")
    ints = keras.Model(x, _head(keras, keras.layers.IntegerLookup(vocabulary=ITEMS, name="item_lookup")(x), 6))
    s = keras.Input((3,), dtype="string", name="words")
    strs = keras.Model(s, _head(keras, keras.layers.StringLookup(vocabulary=WORDS, name="word_lookup")(s), 5))
    out = {"int.keras": root / "int.keras", "str.keras": root / "str.keras"}
    ints.save(out["int.keras"])
    strs.save(out["str.keras"])
    a, b = keras.Input((2,), dtype="int64", name="user"), keras.Input((2,), dtype="string", name="tag")
    ua = keras.layers.IntegerLookup(vocabulary=[10, 20, 30], name="users")(a)
    tb = keras.layers.StringLookup(vocabulary=["x", "y"], name="tags")(b)
    both = keras.layers.Concatenate(axis=1)([ua, tb])  # one embedding reads both index ranges
    y = keras.Input((3,), dtype="int64", name="product_ids")
    sparse = keras.Model(y, _head(keras, keras.layers.IntegerLookup(vocabulary=SPARSE, name="products")(y), 5))
    out["sparse.keras"] = root / "sparse.keras"
    sparse.save(out["sparse.keras"])
    z = keras.Input((3,), dtype="int64", name="idx")
    out["invert.keras"] = root / "invert.keras"
    keras.Model(z, keras.layers.StringLookup(vocabulary=WORDS, invert=True, name="to_words")(z)).save(
        out["invert.keras"]
    )
    out["mixed.keras"] = root / "mixed.keras"
    keras.Model([a, b], _head(keras, both, 4)).save(out["mixed.keras"])
    out["int_sm"], out["str_sm"] = root / "int_sm", root / "str_sm"
    ints.export(str(out["int_sm"]), verbose=False)
    strs.export(str(out["str_sm"]), verbose=False)
    return out


def _export(src: Path, targets: list[str], out: Path) -> Any:
    from fwx import ui
    from fwx.exporter import ExportOptions, export

    ui.state.quiet = True
    try:
        return export(src, targets, ExportOptions(out=out, name=src.name.split(".")[0]))
    finally:
        ui.state.quiet = False


@pytest.mark.slow
def test_integer_lookup_reaches_all_five_targets(lookup_models: dict[str, Path], tmp_path: Path) -> None:
    import keras
    import onnx
    import onnxruntime as ort

    result = _export(lookup_models["int.keras"], ["all"], tmp_path)
    assert result.ok, result.failures
    assert not result.manifest.skipped
    for target in ("torchscript", "pt2", "savedmodel", "onnx", "tflite"):
        assert result.manifest.artifacts[target].validation["passed"], target
    onnx_path = Path(result.version_dir) / result.manifest.artifacts["onnx"].path
    model = onnx.load(str(onnx_path))
    assert [i.name for i in model.graph.input] == ["item_ids"]
    assert "LookupTableFindV2" not in {n.op_type for n in model.graph.node}
    assert "IntegerLookup layer 'item_lookup'" in {n.name for n in model.graph.node}
    # every key, both neighbours of the key range and far-away ids: hits and misses as Keras has them
    ids = np.array([[3, 17, 42, 1001], [7, 2, 1002, -5], [0, 500, 7, 10**12]], np.int64)
    want = keras.saving.load_model(lookup_models["int.keras"])(ids).numpy()
    got = ort.InferenceSession(str(onnx_path)).run(None, {"item_ids": ids})[0]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.abs(want[0] - want[2]).max() > 1e-2  # in- and out-of-vocabulary rows differ: the table matters


@pytest.mark.slow
def test_string_lookup_savedmodel_tflite_onnx_and_torch_skipped_by_name(
    lookup_models: dict[str, Path], tmp_path: Path
) -> None:
    import onnxruntime as ort
    import tensorflow as tf

    result = _export(lookup_models["str_sm"], ["all"], tmp_path)
    assert result.ok, result.failures
    for target in ("savedmodel", "onnx", "tflite"):
        assert result.manifest.artifacts[target].validation["passed"], target
    for target, name in (("torchscript", "TorchScript"), ("pt2", ".pt2")):
        why = result.manifest.skipped[target]
        assert "StringLookup layer 'word_lookup" in why, why
        assert f"{name}" in why, why
        assert "has no string tensors" in why, why
    onnx_path = Path(result.version_dir) / result.manifest.artifacts["onnx"].path
    words = np.array([[b"cat", b"zebra", b"fish"], [b"dog", b"bird", b""]], dtype=object)
    serving = tf.saved_model.load(str(lookup_models["str_sm"])).signatures["serving_default"]
    want = next(iter(serving(words=tf.constant(words)).values())).numpy()
    got = ort.InferenceSession(str(onnx_path)).run(None, {"words": words.astype(str)})[0]
    np.testing.assert_allclose(got, want, atol=1e-5)
    # fwx validate draws from the same vocabulary the export did (fwx.json "samples"), not "sample 0".."sample N"
    from fwx.validators.pipeline import ValidateOptions, validate

    assert set(WORDS) < set(result.manifest.samples["input_values"]["words"])
    assert validate([result.version_dir], ValidateOptions(device="cpu")).passed


@pytest.mark.slow
def test_a_named_torch_target_fails_with_the_layer_and_an_integer_savedmodel_reaches_onnx(
    lookup_models: dict[str, Path], tmp_path: Path
) -> None:
    from fwx.errors import ExportError

    with pytest.raises(ExportError, match=r"StringLookup layer 'word_lookup'.*TorchScript has no string tensors"):
        _export(lookup_models["str.keras"], ["torchscript"], tmp_path / "a")
    assert not list((tmp_path / "a").rglob("*.pt"))
    result = _export(lookup_models["int_sm"], ["onnx", "tflite"], tmp_path / "b")
    assert result.ok, result.failures
    assert result.manifest.artifacts["tflite"].validation["passed"]


@pytest.mark.slow
def test_sparse_integer_keys_are_compared_one_by_one(lookup_models: dict[str, Path], tmp_path: Path) -> None:
    import keras
    import onnx
    import onnxruntime as ort

    result = _export(lookup_models["sparse.keras"], ["onnx", "torchscript"], tmp_path)
    assert result.ok, result.failures
    assert result.manifest.artifacts["torchscript"].validation["passed"]
    onnx_path = Path(result.version_dir) / result.manifest.artifacts["onnx"].path
    ops = {n.op_type for n in onnx.load(str(onnx_path)).graph.node}
    assert "Equal" in ops
    assert "ReduceSum" in ops
    ids = np.array([[5, 10**9, 3 * 10**10], [6, 10**9 + 1, -1], [77, 77, 2**62]], np.int64)
    want = keras.saving.load_model(lookup_models["sparse.keras"])(ids).numpy()
    got = ort.InferenceSession(str(onnx_path)).run(None, {"product_ids": ids})[0]
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.slow
def test_a_sparse_vocabulary_too_large_to_freeze_is_refused_naming_the_layer(tmp_path: Path) -> None:
    import keras

    from fwx.converters._lookup_ops import COMPARE_LIMIT, DENSE_LIMIT
    from fwx.errors import ExportError

    x = keras.Input((2,), dtype="int64", name="ids")
    vocab = [i * (DENSE_LIMIT // 8) for i in range(COMPARE_LIMIT + 1)]  # too many keys, spread too wide
    idx = keras.layers.IntegerLookup(vocabulary=vocab, name="huge_lookup")(x)
    path = tmp_path / "huge.keras"
    keras.Model(x, _head(keras, idx, len(vocab) + 1)).save(path)
    # the failure told is the path that got furthest (Keras -> SavedModel -> ONNX), where Keras' reload of the
    # SavedModel numbers the layer's name
    with pytest.raises(ExportError, match=r"IntegerLookup layer 'huge_lookup(_\d+)?': 4097 integer keys"):
        _export(path, ["onnx"], tmp_path / "out")


def test_lookup_inputs_are_sampled_from_the_vocabulary_and_beyond(lookup_models: dict[str, Path]) -> None:
    from fwx.signature import Signature
    from fwx.sources.load import load_source
    from fwx.sources.lookup_tables import OOV_STRING, lookup_values
    from fwx.sources.samples import InputConfig, generate_inputs

    for key, want in (("int.keras", {*ITEMS, 2, 1002}), ("str_sm", {w.encode() for w in WORDS} | {OOV_STRING})):
        src = load_source(lookup_models[key])
        assert src.inputs is not None
        assert src.outputs is not None
        sig = Signature(src.inputs, src.outputs)
        values = lookup_values(src, sig)
        assert set(values[sig.inputs[0].name]) == want, key
        drawn = generate_inputs(sig, InputConfig(values=values, samples=8))
        seen = {v for sample in drawn for v in sample[sig.inputs[0].name].ravel().tolist()}
        assert seen <= want, seen  # keys and out-of-vocabulary values, nothing else
        assert len(seen) >= 4, seen


def test_tables_of_different_dtypes_are_each_read_with_their_own(lookup_models: dict[str, Path]) -> None:
    """An int64 and a string table in one model: exporting a table with the other's dtypes aborts TF."""
    from fwx.converters._lookup_ops import LookupFreezer
    from fwx.converters._tf import keras_fn, tf_function
    from fwx.signature import Signature
    from fwx.sources.load import load_source

    src = load_source(lookup_models["mixed.keras"])
    assert src.inputs is not None
    assert src.outputs is not None
    sig = Signature(src.inputs, src.outputs)
    freezer = LookupFreezer(tf_function(keras_fn(src.obj, sig), sig), src.obj)
    tables = {t.label: sorted(t.keys.tolist()) for t in freezer.tables.values()}
    assert tables == {"IntegerLookup layer 'users'": [10, 20, 30], "StringLookup layer 'tags'": [b"x", b"y"]}


@pytest.mark.slow
def test_a_model_with_both_lookups_reaches_onnx_and_tflite_through_it(
    lookup_models: dict[str, Path], tmp_path: Path
) -> None:
    import keras
    import onnxruntime as ort

    result = _export(lookup_models["mixed.keras"], ["all"], tmp_path)
    assert result.ok, result.failures
    assert sorted(result.manifest.artifacts) == ["onnx", "savedmodel", "tflite"]
    # TFLite's builtin tables map strings only: the direct converter refuses the int table, naming it ...
    tflite = result.manifest.artifacts["tflite"]
    assert tflite.validation["passed"]
    # ... and the path through ONNX (int table frozen into ops, LabelEncoder back to a string table) holds both
    assert [h["target"] for h in tflite.hops] == ["onnx", "savedmodel", "tflite"]
    onnx_path = Path(result.version_dir) / result.manifest.artifacts["onnx"].path
    users = np.array([[10, 31], [30, 9]], np.int64)
    tags = np.array([["y", "z"], ["x", "x"]], dtype=object)
    want = keras.saving.load_model(lookup_models["mixed.keras"])([users, tags]).numpy()
    got = ort.InferenceSession(str(onnx_path)).run(None, {"user": users, "tag": tags.astype(str)})[0]
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.slow
def test_string_outputs_of_an_inverted_lookup_are_compared_and_published(
    lookup_models: dict[str, Path], tmp_path: Path
) -> None:
    """``StringLookup(invert=True)``: Keras calls its output int64, it is strings; SavedModel and TFLite hold it."""
    result = _export(lookup_models["invert.keras"], ["all"], tmp_path)
    assert result.ok, result.failures
    assert result.signature.outputs[0].dtype == "bytes"
    for target in ("savedmodel", "tflite"):
        entry = result.manifest.artifacts[target]
        assert entry.validation["passed"], target
    assert re.search(
        r"StringLookup layer 'to_words(_\d+)?': a lookup to string values", result.manifest.skipped["onnx"]
    )


def test_onnx_label_encoder_becomes_a_tf_hash_table(tmp_path: Path) -> None:
    """ONNX -> TF translates ``ai.onnx.ml`` ``LabelEncoder`` (string -> int64), saved and reloaded."""
    import onnx
    import onnxruntime as ort
    import tensorflow as tf
    from onnx import TensorProto, helper

    from fwx.converters.onnx_tf.translate import translate

    enc = helper.make_node(
        "LabelEncoder",
        ["w"],
        ["i"],
        domain="ai.onnx.ml",
        keys_strings=["cat", "dog"],
        values_int64s=[1, 2],
        default_int64=0,
    )
    cast = helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT)
    graph = helper.make_graph(
        [enc, cast],
        "g",
        [helper.make_tensor_value_info("w", TensorProto.STRING, ["N", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)], ir_version=8
    )
    onnx.checker.check_model(model)
    words = np.array([["dog", "cow"], ["cat", ""]], dtype=object)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"w": words.astype(str)})[0]
    np.testing.assert_array_equal(want, [[2, 0], [1, 0]])
    tr = translate(model)
    np.testing.assert_array_equal(tr({"w": words.astype(bytes)})["y"], want)
    tr.save(tmp_path / "sm")
    fn = tf.saved_model.load(str(tmp_path / "sm")).signatures["serving_default"]
    np.testing.assert_array_equal(fn(w=tf.constant(words.astype(bytes)))["y"].numpy(), want)


def test_a_tflite_lookup_model_answers_a_first_request_of_one_word(tmp_path: Path) -> None:
    """A vocabulary lookup feeding a mean over a dynamic number of words (a ``tf.lookup`` table over the
    SavedModel's own vocabulary asset). LiteRT cannot prepare that graph when its very first run has one
    word ("XNNPack delegate failed to reshape"), which is exactly a server's warm-up: it passed the export
    (validated at 8 and 12 words) and every server fell back to ONNX. The runtime primes it once."""
    import tensorflow as tf

    from fwx.formats import Format
    from fwx.runtimes.base import load_runtime

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(WORDS) + "\n")

    class Bag(tf.Module):
        def __init__(self) -> None:
            init = tf.lookup.TextFileInitializer(
                str(vocab), tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER
            )
            self.table = tf.lookup.StaticHashTable(init, -1)
            self.emb = tf.Variable(tf.random.stateless_normal([len(WORDS) + 1, 4], seed=[0, 1]))

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.string, name="words")])
        def serve(self, words: Any) -> Any:
            return {"vec": tf.reduce_mean(tf.gather(self.emb, self.table.lookup(words) + 1), 1)}

    bag = Bag()
    tf.saved_model.save(bag, str(tmp_path / "bag"), signatures={"serving_default": bag.serve})
    result = _export(tmp_path / "bag", ["tflite"], tmp_path / "repo")
    assert result.ok, result.failures
    one = np.array([[WORDS[1].encode()]], dtype=object)
    want = bag.serve(tf.constant(one))["vec"].numpy()
    rt = load_runtime(Format.TFLITE, Path(result.version_dir) / result.manifest.artifacts["tflite"].path)
    try:
        np.testing.assert_allclose(rt.infer({"words": one})["vec"], want, atol=1e-6)
    finally:
        rt.close()
