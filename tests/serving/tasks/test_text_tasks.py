"""KServe v2 inference with text in answers what transformers' pipeline answers for the same folder:
label and score, entities with offsets, top tokens for a mask, answer spans (against the model's own logits: transformers 5 dropped that pipeline), pooled
embeddings; over REST
and gRPC (tritonclient), batched with the version's other requests; the tensor interface stays as it was."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.serving.tasks import text_models as tm

pytestmark = pytest.mark.slow
TEXTS = [tm.words(20, 21, 22), tm.words(30, 40, 50, 60, 70, 80), tm.words(90)]


@pytest.fixture(scope="module")
def srv(text_repo: tuple[Path, dict[str, Path]], live_server: Callable[..., Any]) -> Any:
    return live_server(text_repo[0], load_probe=False, grpc_port=0)


def infer(srv: Any, model: str, inputs: dict[str, list[str]]) -> list[Any]:
    body = {"inputs": [{"name": k, "datatype": "BYTES", "shape": [len(v)], "data": v} for k, v in inputs.items()]}
    r = srv.request("POST", f"/v2/models/{model}/infer", json=body)
    assert r.status_code == 200, r.text
    (out,) = r.json()["outputs"]
    assert out["name"] == "output"
    assert out["parameters"]["content_type"] == "hg_jsonlist"
    return [orjson.loads(d) for d in out["data"]]


def close(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), (a, b)
        for k in a:
            close(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            close(x, y)
    elif isinstance(a, float):
        assert math.isclose(a, float(b), rel_tol=1e-4, abs_tol=1e-5), (a, b)
    else:
        assert a == b


def test_text_classification_equals_the_pipeline_over_rest_and_grpc(srv: Any, text_repo: Any) -> None:
    want = tm.pipeline(text_repo[1]["bert"], "text-classification")(TEXTS)
    close(infer(srv, "bert", {"args": TEXTS}), want)

    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        tensor = grpcclient.InferInput("text_inputs", [len(TEXTS)], "BYTES")
        tensor.set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=object))
        result = client.infer("bert", [tensor])
        close([orjson.loads(x) for x in result.as_numpy("output")], want)
    finally:
        client.close()


def test_token_classification_fill_mask_and_features_equal_the_pipeline(srv: Any, text_repo: Any) -> None:
    folders = text_repo[1]
    close(
        infer(srv, "bert_tokens", {"args": TEXTS}), tm.pipeline(folders["bert_tokens"], "token-classification")(TEXTS)
    )
    masked = [tm.words(20, 21) + " [MASK] " + tm.words(23), "[MASK] " + tm.words(40)]
    close(infer(srv, "bert_mask", {"args": masked}), tm.pipeline(folders["bert_mask"], "fill-mask")(masked))
    got = infer(srv, "bert_features", {"args": TEXTS})
    hidden = tm.pipeline(folders["bert_features"], "feature-extraction")(TEXTS)
    for answer, states in zip(got, hidden, strict=True):
        close(answer["embedding"], [float(v) for v in np.asarray(states[0]).mean(axis=0)])


def _best_span(folder: Path, question: str, context: str) -> tuple[int, int, str, float]:
    """transformers' model on the same pair, and the best span by brute force: start x end probability over
    context tokens, at most 15 tokens long (transformers 5 dropped the question-answering pipeline)."""
    import torch
    from tokenizers import Tokenizer

    enc = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(question, context)
    model = tm.hf.transformers().AutoModelForQuestionAnswering.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([enc.ids]),
            attention_mask=torch.tensor([enc.attention_mask]),
            token_type_ids=torch.tensor([enc.type_ids]),
        )
    ctx = [i for i, sid in enumerate(enc.sequence_ids) if sid == 1]
    start = torch.softmax(out.start_logits[0, ctx].double(), 0)
    end = torch.softmax(out.end_logits[0, ctx].double(), 0)
    score, a, b = max(
        (float(start[i] * end[j]), i, j) for i in range(len(ctx)) for j in range(i, min(i + 15, len(ctx)))
    )
    lo, hi = enc.offsets[ctx[a]][0], enc.offsets[ctx[b]][1]
    return lo, hi, context[lo:hi], score


def test_question_answering_finds_the_models_best_span(srv: Any, text_repo: Any) -> None:
    question, context = tm.words(20, 21), tm.words(30, 31, 32, 33, 34, 35, 36)
    got = infer(srv, "bert_qa", {"question": [question], "context": [context]})[0]
    start, end, answer, score = _best_span(text_repo[1]["bert_qa"], question, context)
    assert (got["start"], got["end"], got["answer"]) == (start, end, answer)
    assert math.isclose(got["score"], score, rel_tol=1e-3)


def test_the_tensor_interface_is_unchanged_and_bad_text_is_a_400(srv: Any) -> None:
    ids = [[4, 20, 21, 5]]
    body = {
        "inputs": [
            {"name": n, "datatype": "INT64", "shape": [1, 4], "data": d}
            for n, d in (("input_ids", ids), ("attention_mask", [[1] * 4]), ("token_type_ids", [[0] * 4]))
        ]
    }
    r = srv.request("POST", "/v2/models/bert/infer", json=body)
    assert r.status_code == 200
    assert r.json()["outputs"][0]["shape"] == [1, 3]
    raw = b"\xff\xfe\x00"
    header = orjson.dumps(
        {
            "inputs": [
                {"name": "args", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 4 + len(raw)}}
            ]
        }
    )
    payload = header + len(raw).to_bytes(4, "little") + raw
    r = srv.request(
        "POST", "/v2/models/bert/infer", content=payload, headers={"Inference-Header-Content-Length": str(len(header))}
    )
    assert r.status_code == 400
    assert "UTF-8" in r.json()["error"]
    r = srv.request(
        "POST",
        "/v2/models/bert/infer",
        json={"inputs": [{"name": "args", "datatype": "BYTES", "shape": [1], "data": [tm.words(*[20] * 80)]}]},
    )
    assert r.status_code == 400
    assert "at most 64" in r.json()["error"]
