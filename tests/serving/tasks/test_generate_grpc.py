"""Generation over gRPC in Triton's decoupled form, with tritonclient unmodified: ``text_input`` in,
``text_output`` deltas out over ``ModelStreamInfer`` (the last one final, with its finish reason and usage),
the whole text over ``ModelInfer`` (and REST ``infer``); greedy text equals transformers' ``generate()``,
also for eight prompts of different lengths on one stream. The same task-plane path as the HTTP routes."""

from __future__ import annotations

import queue
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.serving.tasks import text_models as tm

pytestmark = pytest.mark.slow
STEPS = 10
WAIT_S = 120


@pytest.fixture(scope="module")
def srv(text_repo: tuple[Path, dict[str, Path]], live_server: Callable[..., Any]) -> Any:
    return live_server(text_repo[0], load_probe=False, grpc_port=0)


@pytest.fixture(scope="module")
def reference(text_repo: tuple[Path, dict[str, Path]]) -> Callable[[str, int], str]:
    memo: dict[tuple[str, int], str] = {}

    def ref(prompt: str, steps: int) -> str:
        if (prompt, steps) not in memo:
            memo[prompt, steps] = tm.reference_text(text_repo[1]["llama"], prompt, steps)[0]
        return memo[prompt, steps]

    return ref


def inputs(prompt: str, max_tokens: int, *, stream: bool | None = None) -> list[Any]:
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=object))
    steps = grpcclient.InferInput("max_tokens", [1], "INT32")
    steps.set_data_from_numpy(np.array([max_tokens], dtype=np.int32))
    out = [text, steps]
    if stream is not None:
        flag = grpcclient.InferInput("stream", [1], "BOOL")
        flag.set_data_from_numpy(np.array([stream]))
        out.append(flag)
    return out


def streamed(srv: Any, requests: list[tuple[str, list[Any]]]) -> dict[str, list[Any]]:
    """Send every request on one stream; the replies (results or errors) by request id, in arrival order."""
    replies: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    try:
        for rid, ins in requests:
            client.async_stream_infer("llama", ins, request_id=rid)
    finally:
        client.stop_stream()  # the server ends the stream once every request has its last reply
        client.close()
    by_id: dict[str, list[Any]] = {rid: [] for rid, _ in requests}
    while not replies.empty():
        result, error = replies.get_nowait()
        assert error is None, error
        by_id[result.get_response().id].append(result)
    return by_id


def text_of(result: Any) -> str:
    return "".join(x.decode() for x in result.as_numpy("text_output"))


def test_a_stream_sends_text_deltas_whose_last_is_final(srv: Any, reference: Any) -> None:
    prompt = tm.words(20, 31, 42, 53, 64)
    (replies,) = streamed(srv, [("a", inputs(prompt, STEPS, stream=True))]).values()
    assert "".join(text_of(r) for r in replies) == reference(prompt, STEPS)
    params = [r.get_response().parameters for r in replies]
    assert [p["triton_final_response"].bool_param for p in params] == [False] * (len(params) - 1) + [True]
    assert params[-1]["finish_reason"].string_param in ("length", "stop")
    assert params[-1]["prompt_tokens"].int64_param == 5


def test_eight_generations_on_one_stream_each_equal_transformers(srv: Any, reference: Any) -> None:
    prompts = [tm.words(*range(12 + i, 12 + 2 * i + 1)) for i in range(8)]
    requests = [(f"r{i}", inputs(p, STEPS - i, stream=i % 2 == 0)) for i, p in enumerate(prompts)]
    by_id = streamed(srv, requests)
    for i, p in enumerate(prompts):
        replies = by_id[f"r{i}"]
        if i % 2:  # not streamed: one reply with the whole text
            assert len(replies) == 1
        assert "".join(text_of(r) for r in replies) == reference(p, STEPS - i), f"prompt {i}"


def test_model_infer_answers_the_whole_text_over_grpc_and_rest(srv: Any, reference: Any) -> None:
    prompt = tm.words(25, 26, 27)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        result = client.infer("llama", inputs(prompt, STEPS), client_timeout=WAIT_S)
    finally:
        client.close()
    assert text_of(result) == reference(prompt, STEPS)
    body = {
        "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [prompt]}],
        "parameters": {"max_tokens": STEPS},
    }
    r = srv.request("POST", "/v2/models/llama/infer", json=body)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["outputs"][0]["data"] == [reference(prompt, STEPS)]
    assert doc["parameters"]["finish_reason"] in ("length", "stop")


def test_a_refused_generation_is_one_error_reply_and_the_stream_goes_on(srv: Any, reference: Any) -> None:
    replies: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    try:
        client.async_stream_infer("llama", inputs("w20 w21", 10**9, stream=True), request_id="huge")
        client.async_stream_infer("llama", inputs("w20 w21", 3, stream=True), request_id="fine")
    finally:
        client.stop_stream()
        client.close()
    got = [replies.get_nowait() for _ in range(replies.qsize())]
    errors = [e for _, e in got if e is not None]
    assert len(errors) == 1
    assert "max_tokens" in str(errors[0])
    texts = "".join(text_of(r) for r, e in got if e is None)
    assert texts == reference("w20 w21", 3)
