"""Seq2seq generation over the three models in other formats than ONNX (test_seq2seq_generate): the engine
calls each part's own runtime with Optimum's names, so a T5 export to TorchScript or TFLite generates
transformers' greedy text, one request alone and prompts of different lengths at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.serving.tasks import text_models as tm
from tests.serving.tasks.test_seq2seq_generate import build, export, reference_text

pytestmark = pytest.mark.slow
FORMATS = ("torchscript", "tflite")
STEPS = 10


@pytest.fixture(scope="module")
def fmt_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("seq2seq_formats")
    folder = build(root, "t5")
    for fmt in FORMATS:
        export(folder, root / "repo", f"t5-{fmt}", fmt)
    return root / "repo", folder


@pytest.fixture(scope="module")
def srv(fmt_repo: tuple[Path, Path], live_server: Callable[..., Any]) -> Any:
    return live_server(fmt_repo[0], load_probe=False)


@pytest.mark.parametrize("fmt", FORMATS)
def test_greedy_text_in_each_format_equals_transformers_generate(
    srv: Any, fmt_repo: tuple[Path, Path], fmt: str
) -> None:
    for part in ("encoder", "decoder", "decoder-with-past"):
        assert srv.request("GET", f"/v2/models/t5-{fmt}-{part}").json()["parameters"]["format"] == fmt
    prompts = [tm.words(*range(30 - n, 30)) for n in (5, 1, 3)]

    async def all_at_once() -> list[Any]:
        bodies = [{"model": f"t5-{fmt}", "prompt": p, "max_tokens": STEPS, "temperature": 0} for p in prompts]
        return list(await asyncio.gather(*(srv._client.post("/v1/completions", json=b) for b in bodies)))

    alone = srv.request("POST", f"/v2/models/t5-{fmt}/generate", json={"text_input": prompts[0], "max_tokens": STEPS})
    assert alone.status_code == 200, alone.text
    assert alone.json()["text_output"] == reference_text(fmt_repo[1], prompts[0], STEPS)
    for prompt, r in zip(prompts, srv.call(all_at_once()), strict=True):
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == reference_text(fmt_repo[1], prompt, STEPS), prompt
