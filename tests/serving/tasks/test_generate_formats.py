"""Continuous batching over the cache graph in every format that exports it: the same engine drives the
version's own runtime (TorchScript, SavedModel, TFLite here; ONNX in test_generate_http), and greedy text
equals transformers' ``generate()``, one request alone and eight prompts of different lengths at once.

``.pt2`` is not among them: ``torch.export`` cannot keep the cache's length and the step's length as two
free sizes (their sum is the attention mask's), so ``text-generation-with-past`` publishes no ``.pt2``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.serving.tasks import text_models as tm

pytestmark = pytest.mark.slow
FORMATS = ("torchscript", "savedmodel", "tflite")
STEPS = 10


@pytest.fixture(scope="module")
def formats_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    return tm.export(tmp_path_factory.mktemp("formats"), ["llama"], FORMATS)


@pytest.fixture(scope="module")
def srv(formats_repo: tuple[Path, dict[str, Path]], live_server: Callable[..., Any]) -> Any:
    return live_server(formats_repo[0], load_probe=False)


@pytest.fixture(scope="module")
def reference(formats_repo: tuple[Path, dict[str, Path]]) -> Callable[[str, int], str]:
    memo: dict[tuple[str, int], str] = {}

    def ref(prompt: str, steps: int) -> str:
        if (prompt, steps) not in memo:
            memo[prompt, steps] = tm.reference_text(formats_repo[1]["llama"], prompt, steps)[0]
        return memo[prompt, steps]

    return ref


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_serves_the_version_it_was_exported_as(srv: Any, fmt: str) -> None:
    doc = srv.request("GET", f"/v2/models/llama-{fmt}").json()
    assert doc["parameters"]["format"] == fmt


@pytest.mark.parametrize("fmt", FORMATS)
def test_greedy_text_in_each_format_equals_transformers_generate(srv: Any, reference: Any, fmt: str) -> None:
    prompt = tm.words(20, 31, 42, 53, 64)
    body = {"model": f"llama-{fmt}", "prompt": prompt, "max_tokens": STEPS, "temperature": 0}
    r = srv.request("POST", "/v1/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == reference(prompt, STEPS)
    r = srv.request("POST", f"/v2/models/llama-{fmt}/generate_stream", json={"text_input": prompt, "max_tokens": 5})
    assert r.status_code == 200, r.text
    chunks = [orjson.loads(b[len("data: ") :]) for b in r.text.split("\n\n") if b.startswith("data: ")]
    assert "".join(c["text_output"] for c in chunks) == reference(prompt, 5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_eight_prompts_at_once_in_each_format(srv: Any, reference: Any, fmt: str) -> None:
    prompts = [tm.words(*range(12 + i, 12 + 2 * i + 1)) for i in range(8)]  # 1 to 8 words

    async def all_at_once() -> list[Any]:
        bodies = [
            {"model": f"llama-{fmt}", "prompt": p, "max_tokens": STEPS - i, "temperature": 0}
            for i, p in enumerate(prompts)
        ]
        return list(await asyncio.gather(*(srv._client.post("/v1/completions", json=b) for b in bodies)))

    for i, r in enumerate(srv.call(all_at_once())):
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == reference(prompts[i], STEPS - i), f"prompt {i}"
