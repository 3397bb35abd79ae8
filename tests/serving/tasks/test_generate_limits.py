"""Continuous batching and its bounds, driven step by step: rows that arrive together share the first
step, rows that arrive later join the running batch, the cache budget refuses with 503, a client that goes
away is cancelled (and drain stops waiting for it), and hostile requests get one clear 4xx while the server
keeps serving.

The engine runs the real ONNX Runtime session; ``Gate`` only holds each call until the test lets it pass,
so the order of steps is the test's, not the clock's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fwx.errors import InputError, UnavailableError
from fwx.serving.tasks.assets import assets_of
from fwx.serving.tasks.sampling import SamplingParams
from fwx.serving.tasks.scheduler import EngineOptions
from tests.serving.tasks import text_models as tm

pytestmark = pytest.mark.slow
WAIT_S = 60.0


class Gate:
    """A runtime wrapper whose ``infer`` waits for a permit: the test decides when each model call runs."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.permits = threading.Semaphore(0)
        self.calls = 0

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.permits.acquire(timeout=WAIT_S), "the test never let this step run"
        self.calls += 1
        return dict(self.runtime.infer(feeds))

    def allow(self, n: int = 1) -> None:
        for _ in range(n):
            self.permits.release()


def wait_for(cond: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.fixture(scope="module")
def srv(text_repo: tuple[Path, dict[str, Path]], live_server: Callable[..., Any]) -> Any:
    # the hostile templates below come in requests: the server must be told to take them
    return live_server(text_repo[0], load_probe=False, allow_request_chat_template=True)


@pytest.fixture
def gated(srv: Any) -> Any:
    """The llama engine with its runtime behind a gate (restored afterwards, all permits granted)."""
    tasks = srv.dataplane.tasks
    model = srv.dataplane.manager.get("llama", None)
    engine = tasks.engine(model)
    real, options = engine.runtime, engine.options
    gate = Gate(real)
    engine.runtime = gate
    yield srv, model, engine, gate
    gate.allow(10_000)
    wait_for(lambda: engine.running == 0 and engine.reserved == 0, "the engine to go idle")
    engine.runtime, engine.options = real, options


def _reference(text_repo: tuple[Path, dict[str, Path]], prompts: list[str], steps: int) -> list[str]:
    return [tm.reference_text(text_repo[1]["llama"], p, steps)[0] for p in prompts]


def test_rows_that_arrive_together_share_steps_and_later_ones_join(gated: Any, text_repo: Any) -> None:
    srv, model, engine, gate = gated
    tasks = srv.dataplane.tasks
    prompts = [tm.words(*range(20, 21 + i)) for i in range(8)]
    params = SamplingParams(max_tokens=6, greedy=True)

    async def scenario() -> list[str]:
        assets = assets_of(model)
        first = [await tasks.generate(model, assets, p, params) for p in prompts[:4]]  # one tick: one prefill
        gate.allow(2)  # one iteration: their prefill, then one decode step (tokens arrive after both)
        streams = [g.deltas() for g in first]
        heads = [await s.__anext__() for s in streams]  # every early row has its first tokens
        assert gate.calls == 2
        later = [await tasks.generate(model, assets, p, params) for p in prompts[4:]]
        gate.allow(10_000)

        async def rest(head: Any, stream: Any) -> str:
            return head.text + "".join([d.text async for d in stream])

        texts = await asyncio.gather(*(rest(h, s) for h, s in zip(heads, streams, strict=True)))
        return [*texts, *(await asyncio.gather(*(g.text() for g in later)))]

    texts = srv.call(scenario())
    got = [t if isinstance(t, str) else t[0] for t in texts]
    rows = dict(zip(engine.stats.rows.bounds, engine.stats.rows.counts, strict=False))
    assert rows[4] >= 1  # the four that came together prefilled as one batch
    assert rows[8] >= 1  # 5 to 8 rows: the later four decoded in the same steps as the first ones
    assert got == _reference(text_repo, prompts, 6)


def test_the_cache_budget_refuses_with_503_and_a_request_that_never_fits_with_400(gated: Any) -> None:
    srv, model, engine, gate = gated
    need = (3 + 8) * engine.layout.bytes_per_token
    engine.options = EngineOptions(cache_bytes=need + need // 2)
    params = SamplingParams(max_tokens=8, greedy=True)

    async def scenario() -> None:
        held = engine.submit([20, 21, 22], params, frozenset())
        with pytest.raises(UnavailableError, match="cache is full"):
            engine.submit([20, 21, 22], params, frozenset())
        with pytest.raises(InputError, match="budget"):
            engine.submit(list(range(20, 60)), params, frozenset())
        r = await srv._client.post("/v2/models/llama/generate", json={"text_input": "w20 w21 w22", "max_tokens": 8})
        assert r.status_code == 503
        assert "cache is full" in r.json()["error"]
        assert r.headers["retry-after"]
        engine.cancel(held)

    srv.call(scenario())


def test_a_client_that_goes_away_is_cancelled_and_no_longer_in_flight(gated: Any) -> None:
    srv, model, engine, gate = gated
    dp = srv.dataplane
    body = {
        "model": "llama",
        "prompt": "w20 w21",
        "max_tokens": 40,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    gate.allow(2)  # the first iteration (prefill, one decode step) reaches the client, then the engine waits
    with httpx.Client(timeout=WAIT_S) as client, client.stream("POST", f"{srv.url}/v1/completions", json=body) as r:
        assert r.status_code == 200
        # Held until the client leaves: an abandoned iter_lines() generator, once collected, closes httpcore's
        # stream and with it the connection, and the server would see the client go before the checks below.
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                break
        assert "error" not in line
        (seq,) = engine.sequences
        assert dp.inflight == 1, line
        del lines
    wait_for(lambda: seq.cancelled, "the disconnect to cancel the request")
    wait_for(lambda: dp.inflight == 0, "the request to leave the in-flight count")
    gate.allow(10_000)
    wait_for(lambda: engine.running == 0 and engine.reserved == 0, "the row to leave the batch")
    assert seq.generated < 40


HOSTILE = [
    ("/v1/completions", {"model": "llama", "prompt": "w20", "max_tokens": 10**12}, "max_tokens"),
    ("/v1/completions", {"model": "llama", "prompt": "w20", "max_tokens": 10_000}, "context"),
    ("/v1/completions", {"model": "llama", "prompt": tm.words(*([20] * 70)), "max_tokens": 1}, "context"),
    ("/v1/completions", {"model": "llama", "prompt": [5, 99999], "max_tokens": 2}, "token ids"),
    ("/v1/completions", {"model": "llama", "prompt": "w20", "n": 3}, "'n'"),
    # a setting fwx would ignore changes the text the client asked for: refused unless it is the neutral value
    ("/v1/completions", {"model": "llama", "prompt": "w20", "frequency_penalty": 0.5}, "frequency_penalty"),
    ("/v1/completions", {"model": "llama", "prompt": "w20", "logit_bias": {"5": 100}}, "logit_bias"),
    ("/v2/models/llama/generate", {"text_input": "w20", "repetition_penalty": 1.3}, "repetition_penalty"),
    ("/v1/completions", {"model": "llama", "prompt": "w20", "stream": "yes"}, "'stream'"),
    ("/v1/chat/completions", {"model": "llama", "messages": [], "ignore_eos": 1}, "'ignore_eos'"),
    ("/v1/completions", {"model": "bert", "prompt": "w20"}, "text-generation-with-past"),
    ("/v2/models/llama/generate", {"text_input": 5}, "text_input"),
    ("/v2/models/llama/generate", {"text_input": "w20", "temperature": -1}, "temperature"),
    ("/v1/chat/completions", {"model": "llama", "messages": "hi"}, "messages"),
    (
        "/v1/chat/completions",
        {"model": "llama", "messages": [{"role": "user", "content": "x"}], "chat_template": "{{ ''.__class__ }}"},
        "chat template",
    ),
    (
        "/v1/chat/completions",
        {
            "model": "llama",
            "messages": [{"role": "user", "content": "x"}],
            "chat_template": "{{ messages.__class__.__mro__[1].__subclasses__() }}",
        },
        "chat template",
    ),
    (
        "/v1/chat/completions",
        {
            "model": "llama",
            "messages": [{"role": "user", "content": "x"}],
            "chat_template": "{% set _ = messages.append(1) %}{{ cycler.__init__.__globals__ }}",
        },
        "chat template",
    ),
    (
        "/v1/chat/completions",
        {
            "model": "llama",
            "messages": [{"role": "user", "content": "x"}],
            "chat_template": "{% for i in range(10**9) %}{% endfor %}",
        },
        "chat template",
    ),
]


@pytest.mark.parametrize(("path", "body", "says"), HOSTILE, ids=[f"{i}" for i in range(len(HOSTILE))])
def test_hostile_requests_get_one_clear_400_and_the_server_keeps_serving(
    srv: Any, path: str, body: dict[str, Any], says: str
) -> None:
    r = srv.request("POST", path, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    message = error["message"] if path.startswith("/v1/") else error  # OpenAI's error shape on its routes
    assert says in message
    assert "\n" not in message
    ok = srv.request("POST", "/v2/models/llama/generate", json={"text_input": "w20 w21", "max_tokens": 2})
    assert ok.status_code == 200


def test_invalid_utf8_and_unknown_models_are_refused(srv: Any) -> None:
    r = srv.request("POST", "/v1/completions", content=b'{"model": "llama", "prompt": "\xff\xfe"}')
    assert r.status_code == 400
    r = srv.request("POST", "/v1/completions", json={"model": "nope", "prompt": "w20"})
    assert r.status_code == 404
