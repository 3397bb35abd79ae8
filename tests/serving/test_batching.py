"""Dynamic batching under concurrency: every answer equals the model's answer for that request alone."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import serving_models

MAX_BATCH = 8


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("batch") / "repo", {"cnn": "cnn", "fixed": "fixed", "seq": "seq"})
    return live_server(repo, load_probe=False, max_batch_size=MAX_BATCH)


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("slow") / "repo", {"sleepy": "sleepy"})
    return live_server(repo, load_probe=False, max_queue_size=2)


@pytest.fixture(scope="module")
def cnn_alone() -> Callable[[np.ndarray], np.ndarray]:
    """The single-run answer: onnxruntime on the same model bytes, one request at a time."""
    import onnxruntime as ort

    session = ort.InferenceSession(serving_models.build_cnn()[0])
    return lambda x: session.run(None, {"x": x})[0]


def _stats(srv: Any, model: str) -> dict[str, Any]:
    stats: dict[str, Any] = srv.request("GET", f"/v2/models/{model}/stats").json()["model_stats"][0]
    return stats


def _body(name: str, arr: np.ndarray, datatype: str = "FP32") -> str:
    return json.dumps(
        {"inputs": [{"name": name, "shape": list(arr.shape), "datatype": datatype, "data": arr.ravel().tolist()}]}
    )


def test_64_concurrent_clients_get_their_own_answers(srv: Any, cnn_alone: Callable[[np.ndarray], np.ndarray]) -> None:
    rng = np.random.default_rng(7)
    rows = [int(n) for n in rng.integers(1, 4, size=64)]
    xs = [rng.standard_normal((n, 3, 32, 32)).astype(np.float32) for n in rows]
    before = _stats(srv, "cnn")
    it = iter(range(64))

    async def one(client: Any) -> tuple[int, Any]:
        i = next(it)
        return i, await client.post("/v2/models/cnn/infer", content=_body("x", xs[i]))

    results = srv.gather(one, 64)
    for i, r in results:
        assert r.status_code == 200, r.text
        got = np.asarray(r.json()["outputs"][0]["data"], np.float32).reshape(rows[i], 10)
        np.testing.assert_allclose(got, cnn_alone(xs[i]), rtol=1e-5, atol=1e-6, err_msg=f"client {i}")
    after = _stats(srv, "cnn")
    runs = after["execution_count"] - before["execution_count"]
    assert after["inference_count"] - before["inference_count"] == sum(rows)
    assert runs < 64, "no two requests were merged"
    assert all(b["batch_size"] <= MAX_BATCH for b in after["batch_stats"])


def test_request_bigger_than_max_batch_runs_alone(srv: Any, cnn_alone: Callable[[np.ndarray], np.ndarray]) -> None:
    big = np.random.default_rng(3).standard_normal((MAX_BATCH * 2 + 3, 3, 32, 32)).astype(np.float32)
    small = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
    which = iter([big, small, small, big])

    async def one(client: Any) -> tuple[np.ndarray, Any]:
        x = next(which)
        return x, await client.post("/v2/models/cnn/infer", content=_body("x", x))

    for x, r in srv.gather(one, 4):
        got = np.asarray(r.json()["outputs"][0]["data"], np.float32).reshape(len(x), 10)
        np.testing.assert_allclose(got, cnn_alone(x), rtol=1e-5, atol=1e-6)
    sizes = {b["batch_size"] for b in _stats(srv, "cnn")["batch_stats"]}
    assert len(big) in sizes
    assert not any(MAX_BATCH < s < len(big) for s in sizes)


def test_model_without_batch_axis_runs_one_request_at_a_time(srv: Any) -> None:
    before = _stats(srv, "fixed")
    xs = [np.full((1, 4), float(i), np.float32) for i in range(12)]
    it = iter(range(12))

    async def one(client: Any) -> tuple[int, Any]:
        i = next(it)
        return i, await client.post("/v2/models/fixed/infer", content=_body("x", xs[i]))

    for i, r in srv.gather(one, 12):
        assert r.json()["outputs"][0]["data"] == [3.0 * i] * 4
    after = _stats(srv, "fixed")
    assert after["execution_count"] - before["execution_count"] == 12
    assert {b["batch_size"] for b in after["batch_stats"]} == {1}


def test_requests_with_other_inner_shapes_are_not_mixed(srv: Any) -> None:
    lengths = [3, 5, 3, 7, 5, 3, 1, 7] * 3
    it = iter(range(len(lengths)))

    async def one(client: Any) -> tuple[int, Any]:
        i = next(it)
        x = np.arange(lengths[i], dtype=np.float32).reshape(1, -1) + i
        return i, await client.post("/v2/models/seq/infer", content=_body("x", x))

    for i, r in srv.gather(one, len(lengths)):
        assert r.status_code == 200, r.text
        n = lengths[i]
        assert r.json()["outputs"][0]["data"] == [float(n * (n - 1) // 2 + n * i)]


@pytest.mark.slow
def test_full_queue_is_503_at_once(slow: Any) -> None:
    body = _body("x", np.ones((1, 1), np.float32))

    answered: list[Any] = []  # answers in the order they came back (one client event loop)

    async def one(client: Any) -> Any:
        r = await client.post("/v2/models/sleepy/infer", content=body)
        answered.append(r)
        return r

    slow.gather(one, 6)
    codes = [r.status_code for r in answered]
    assert sorted(codes) == [200, 200, 200, 503, 503, 503], codes
    # "at once" without a clock: every refusal came back while the model was still on its first request
    assert codes[:3] == [503, 503, 503], codes
    for r in answered[:3]:
        assert r.headers["retry-after"] == "1"
        assert "queued" in r.json()["error"]
    assert 'reason="rejected"' in slow.request("GET", "/metrics").text


@pytest.mark.slow
def test_deadline_is_504_and_expired_requests_never_run(slow: Any) -> None:
    before = _stats(slow, "sleepy")["inference_count"]
    body = _body("x", np.ones((1, 1), np.float32))

    async def one(client: Any, timeout_ms: str | None) -> tuple[float, Any]:
        t0 = time.perf_counter()
        headers = {"Inference-Timeout": timeout_ms} if timeout_ms else {}
        r = await client.post("/v2/models/sleepy/infer", content=body, headers=headers)
        return time.perf_counter() - t0, r

    timeouts = iter([None, "20"])
    (t_ok, ok), (t_late, late) = slow.gather(lambda c: one(c, next(timeouts)), 2)
    assert ok.status_code == 200
    assert late.status_code == 504
    assert "deadline" in late.json()["error"]
    assert t_late < t_ok
    # one more request queues behind anything still pending: once it is answered, the expired one
    # would have run before it (the queue is FIFO), so the count is final
    assert slow.request("POST", "/v2/models/sleepy/infer", content=body).status_code == 200
    assert _stats(slow, "sleepy")["inference_count"] - before == 2  # rows run: the expired request's never did
    for params in ({"timeout": 10_000}, {"timeout_ms": 10}):  # Triton's µs, and fwx's ms spelling
        param = json.dumps({"inputs": json.loads(body)["inputs"], "parameters": params})
        r = slow.request("POST", "/v2/models/sleepy/infer", content=param)
        assert r.status_code == 504
