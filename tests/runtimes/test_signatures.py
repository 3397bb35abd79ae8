"""Each runtime reads its signature back from the artifact: names, dtypes, dynamic dims."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.formats import Format
from fwx.runtimes import load_runtime
from fwx.signature import is_dynamic

from .models import MLP_SIG


def test_onnx_signature_keeps_dim_params(torch_files: dict[str, Path]) -> None:
    sig = load_runtime(Format.ONNX, torch_files["onnx"]).signature()
    assert sig.input_names == ["x"]
    assert sig.output_names == ["logits"]
    assert sig.inputs[0].dtype == "float32"
    assert sig.inputs[0].shape == ("N", 8)  # the dim_param survives as a symbol
    assert sig.outputs[0].shape == ("N", 4)


def test_onnx_pinned_batch_reads_back_fixed(torch_files: dict[str, Path]) -> None:
    sig = load_runtime(Format.ONNX, torch_files["onnx_pinned"]).signature()
    assert sig.inputs[0].shape == (1, 8)


def test_pt2_signature_has_symbolic_batch(torch_files: dict[str, Path]) -> None:
    rt = load_runtime(Format.PT2, torch_files["pt2"], signature_hint=MLP_SIG)
    sig = rt.signature()
    assert sig.input_names == ["x"]
    assert sig.output_names == ["logits"]
    assert is_dynamic(sig.inputs[0].shape[0])
    assert sig.inputs[0].shape[1] == 8
    assert sig.inputs[0].dtype == "float32"
    assert is_dynamic(sig.outputs[0].shape[0])
    assert sig.outputs[0].shape[1] == 4


def test_pt2_without_hint_uses_placeholder_names(torch_files: dict[str, Path]) -> None:
    sig = load_runtime(Format.PT2, torch_files["pt2"]).signature()
    assert sig.input_names == ["input"]  # nn.Sequential.forward(input)
    assert sig.output_names == ["output_0"]
    assert isinstance(sig.inputs[0].shape[0], str)
    assert sig.inputs[0].shape[0] == sig.outputs[0].shape[0]


def test_torchscript_takes_names_from_hint(torch_files: dict[str, Path]) -> None:
    assert load_runtime(Format.TORCHSCRIPT, torch_files["torchscript"], signature_hint=MLP_SIG).signature() == MLP_SIG
    bare = load_runtime(Format.TORCHSCRIPT, torch_files["torchscript"]).signature()
    assert bare.input_names == ["input"]
    assert bare.outputs == ()


def test_savedmodel_signature(keras_files: dict[str, Path]) -> None:
    sig = load_runtime(Format.SAVEDMODEL, keras_files["savedmodel"]).signature()
    assert sig.input_names == ["x"]
    assert sig.output_names == ["logits"]
    assert sig.inputs[0].shape == (-1, 8)
    assert sig.outputs[0].shape == (-1, 4)
    assert sig.inputs[0].dtype == "float32"


def test_savedmodel_unknown_signature_name(keras_files: dict[str, Path]) -> None:
    from fwx.errors import InputError

    with pytest.raises(InputError, match="serving_default"):
        load_runtime(Format.SAVEDMODEL, keras_files["savedmodel"], signature_name="nope")


def test_tflite_signature_has_minus_one_batch(keras_files: dict[str, Path]) -> None:
    sig = load_runtime(Format.TFLITE, keras_files["tflite"]).signature()
    assert sig.input_names == ["x"]
    assert sig.output_names == ["logits"]
    assert sig.inputs[0].shape == (-1, 8)
    assert sig.inputs[0].dtype == "float32"


def test_tflite_int8_io_is_presented_as_float(keras_files: dict[str, Path]) -> None:
    sig = load_runtime(Format.TFLITE, keras_files["tflite_int8"]).signature()
    assert sig.inputs[0].dtype == "float32"
    assert sig.outputs[0].dtype == "float32"


def test_keras_signature_from_model() -> None:
    from fwx.runtimes.eager_keras import KerasRuntime

    from .models import keras_mlp

    sig = KerasRuntime.from_model(keras_mlp()).signature()
    assert sig.input_names == ["x"]
    assert sig.output_names == ["logits"]
    assert sig.inputs[0].shape == (-1, 8)
    assert KerasRuntime.from_model(keras_mlp(), MLP_SIG).signature().output_names == ["logits"]
