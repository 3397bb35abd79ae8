"""validate_runtimes on real artifacts: passes, deliberate failures, overrides, int8, layouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from runtimes import models

from fwx.formats import Format
from fwx.runtimes import Runtime, load_runtime
from fwx.signature import Signature
from fwx.validators import Policy, Tolerance, validate_runtimes


def test_torch_formats_pass(torch_ref: Runtime, torch_candidates: dict[str, Runtime]) -> None:
    report = validate_runtimes(torch_ref, torch_candidates, signature=models.MLP_SIG)
    assert report.passed, report.failures()
    assert report.failures() == []
    assert [a.key for a in report.artifacts] == ["onnx", "torchscript", "pt2"]
    shapes = sorted({s["x"]["shape"][0] for s in report.inputs})
    assert shapes == [1, 3]  # the dynamic batch was exercised at two sizes
    row = report.artifact("onnx").outputs[0]
    assert row.name == "logits"
    assert row.metrics["max_abs"] < 1e-5
    assert row.metrics["cosine"] > 0.999999
    assert row.metrics["top1"] == 1.0
    json.dumps(report.to_json())  # serialisable as is
    entry = report.for_artifact("onnx")
    assert entry["passed"] is True
    assert entry["provider"] == "CPUExecutionProvider"
    assert entry["outputs"]["logits"]["atol"] == 1e-4
    assert "PASS" in report.table()


def test_keras_to_savedmodel_and_tflite_pass(keras_ref: Runtime, keras_files: dict[str, Path]) -> None:
    cands = {
        "savedmodel": load_runtime(Format.SAVEDMODEL, keras_files["savedmodel"]),
        "tflite": load_runtime(Format.TFLITE, keras_files["tflite"]),
    }
    report = validate_runtimes(keras_ref, cands, signature=models.MLP_SIG)
    assert report.passed, report.failures()


def test_perturbed_weights_fail_and_others_still_measured(
    torch_ref: Runtime, torch_files: dict[str, Path], torch_candidates: dict[str, Runtime]
) -> None:
    cands = {"bad": load_runtime(Format.ONNX, torch_files["onnx_perturbed"]), **torch_candidates}
    report = validate_runtimes(torch_ref, cands, signature=models.MLP_SIG)
    assert not report.passed
    failures = report.failures()
    assert len(failures) == 1
    assert failures[0].startswith("bad: output 'logits': max abs err")
    assert "needs atol >=" in failures[0]
    bad = report.artifact("bad").outputs[0]
    assert bad.metrics["min_atol"] > 1e-4
    assert all(report.artifact(k).passed for k in torch_candidates)
    assert "FAIL" in report.table()


def test_pinned_batch_caught_by_second_size(torch_ref: Runtime, torch_files: dict[str, Path]) -> None:
    report = validate_runtimes(
        torch_ref, {"onnx": load_runtime(Format.ONNX, torch_files["onnx_pinned"])}, signature=models.MLP_SIG
    )
    assert not report.passed
    failures = "\n".join(report.failures())
    assert "axis 0 is fixed to 1" in failures
    assert "x[3, 8]" in failures
    assert "crashed" in failures
    assert report.artifact("onnx").outputs[0].metrics["max_abs"] < 1e-5  # batch 1 still measured


def test_per_output_and_global_tolerance_override(torch_ref: Runtime, torch_files: dict[str, Path]) -> None:
    bad = {"bad": load_runtime(Format.ONNX, torch_files["onnx_perturbed"])}
    assert not validate_runtimes(torch_ref, bad, signature=models.MLP_SIG).passed
    loose = Policy(per_output={"logits": Tolerance(0.5, 0.0)})
    report = validate_runtimes(torch_ref, bad, signature=models.MLP_SIG, policy=loose)
    assert report.passed, report.failures()
    assert report.artifact("bad").outputs[0].tolerance == Tolerance(0.5, 0.0)
    assert validate_runtimes(torch_ref, bad, signature=models.MLP_SIG, policy=Policy(atol=0.5)).passed
    other = Policy(per_output={"other": Tolerance(0.5, 0.0)})
    assert not validate_runtimes(torch_ref, bad, signature=models.MLP_SIG, policy=other).passed


def test_int8_judged_by_cosine_and_top1(keras_ref: Runtime, keras_files: dict[str, Path]) -> None:
    cand = {"tflite_int8": load_runtime(Format.TFLITE, keras_files["tflite_int8"])}
    report = validate_runtimes(keras_ref, cand, signature=models.MLP_SIG, precisions={"tflite_int8": "int8"})
    row = report.artifact("tflite_int8").outputs[0]
    assert row.tolerance is None
    assert row.metrics["cosine"] > 0.99
    assert report.passed, report.failures()
    as_fp32 = validate_runtimes(keras_ref, cand, signature=models.MLP_SIG)
    assert not as_fp32.passed  # the same numbers break an fp32 tolerance


def test_int8_with_labels_uses_accuracy(keras_ref: Runtime, keras_files: dict[str, Path]) -> None:
    cand = {"q": load_runtime(Format.TFLITE, keras_files["tflite_int8"])}
    x = np.random.default_rng(5).standard_normal((64, 8)).astype(np.float32)
    labels = np.argmax(np.asarray(keras_ref.infer({"x": x})["logits"]), axis=1)
    report = validate_runtimes(
        keras_ref, cand, signature=models.MLP_SIG, precisions={"q": "int8"}, inputs=[{"x": x}], labels=[labels]
    )
    m = report.artifact("q").outputs[0].metrics
    assert m["accuracy_ref"] == 1.0
    assert 0.9 < m["accuracy"] <= 1.0
    impossible = Policy(max_accuracy_drop=-1.0)  # proves the accuracy rule, not top-1, decided
    worse = validate_runtimes(
        keras_ref,
        cand,
        signature=models.MLP_SIG,
        precisions={"q": "int8"},
        inputs=[{"x": x}],
        labels=[labels],
        policy=impossible,
    )
    assert any("below the reference's 100.00%" in f for f in worse.failures())


class _Flaky(Runtime):
    """A runtime that crashes on batches larger than one (a stand-in for a broken artifact)."""

    format = Format.ONNX

    def __init__(self, inner: Runtime) -> None:
        super().__init__(None)
        self.inner = inner

    def _load(self) -> None: ...

    def signature(self) -> Signature:
        return self.inner.signature()

    def infer(self, inputs: dict[str, Any]) -> dict[str, Any]:
        if next(iter(inputs.values())).shape[0] > 1:
            raise RuntimeError("boom\nsecond line")
        return self.inner.infer(inputs)


def test_crash_is_a_failure_row_not_an_exception(torch_ref: Runtime, torch_candidates: dict[str, Runtime]) -> None:
    cands = {"flaky": _Flaky(torch_candidates["onnx"]), "pt2": torch_candidates["pt2"]}
    report = validate_runtimes(torch_ref, cands, signature=models.MLP_SIG)
    failures = report.failures()
    assert len(failures) == 2
    assert all("RuntimeError: boom" in f and "second" not in f for f in failures)
    assert report.artifact("pt2").passed


def test_layout_transpose_for_nhwc_artifact(tmp_path: Path) -> None:
    from fwx.runtimes.eager_torch import EagerTorchRuntime

    files = models.layout_artifacts()
    ref = EagerTorchRuntime.from_module(models.torch_cnn(), models.CNN_SIG)
    cand = {"onnx": load_runtime(Format.ONNX, files["cnn_nhwc"])}
    ok = validate_runtimes(ref, cand, signature=models.CNN_SIG, layouts={"onnx": "NHWC"}, reference_layout="NCHW")
    assert ok.passed, ok.failures()
    wrong = validate_runtimes(ref, cand, signature=models.CNN_SIG)  # no layout info: fed NCHW
    assert not wrong.passed

    feat_ref = EagerTorchRuntime.from_module(models.torch_features(), models.FEAT_SIG)
    feat = {"onnx": load_runtime(Format.ONNX, files["features_nhwc"])}
    report = validate_runtimes(
        feat_ref, feat, signature=models.FEAT_SIG, layouts={"onnx": "NHWC"}, reference_layout="NCHW"
    )
    assert report.passed, report.failures()  # the 4-D output came back to NCHW


def test_reference_crash_reported(torch_candidates: dict[str, Runtime]) -> None:
    ref = _Flaky(torch_candidates["onnx"])
    report = validate_runtimes(ref, {"pt2": torch_candidates["pt2"]}, signature=models.MLP_SIG)
    assert not report.passed
    assert any(f.startswith("reference: sample 1") for f in report.failures())
