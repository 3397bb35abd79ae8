"""The engine's steps on the real ONNX Runtime session, without a server: rows that share a step draw
what they draw alone (greedy rows from one argmax over the batch, seeded rows from their own generator),
and one row per step serves every request in turn with the same tokens as a shared batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fwx.runtimes.onnx import OnnxRuntime
from fwx.serving.tasks.metrics import GenerationStats
from fwx.serving.tasks.sampling import SamplingParams
from fwx.serving.tasks.scheduler import CacheLayout, Engine, EngineOptions

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(max_tokens=6, greedy=True, ignore_eos=True)
SAMPLED = SamplingParams(max_tokens=6, greedy=False, temperature=1.5, top_k=20, seed=7, ignore_eos=True)


@pytest.fixture(scope="module")
def runtime(text_repo: tuple[Path, dict[str, Path]]) -> Iterator[Any]:
    rt = OnnxRuntime.load(text_repo[0] / "llama" / "1" / "model.onnx")
    yield rt
    rt.close()


def run(runtime: Any, requests: list[tuple[list[int], SamplingParams]], max_rows: int) -> tuple[list[list[int]], Any]:
    """Every request submitted at once; the tokens each one got, and the engine's stats."""
    stats = GenerationStats("llama", "1")

    async def scenario() -> list[list[int]]:
        engine = Engine(runtime, CacheLayout.of(runtime.signature()), EngineOptions(max_rows=max_rows), stats)

        async def tokens(prompt: list[int], params: SamplingParams) -> list[int]:
            seq, got = engine.submit(prompt, params, frozenset()), []
            while (item := await asyncio.wait_for(seq.tokens.get(), 60)) is not None:
                assert isinstance(item, tuple), item
                got.append(item[0])
            return got

        return await asyncio.gather(*(tokens(p, s) for p, s in requests))

    return asyncio.run(scenario()), stats


PROMPTS = [list(range(20, 21 + n)) for n in (1, 4, 2, 6)]  # different lengths: left-padded rows


def test_greedy_and_seeded_rows_share_steps_and_each_draws_what_it_draws_alone(runtime: Any) -> None:
    requests = [(p, GREEDY if i % 2 else SAMPLED) for i, p in enumerate(PROMPTS)]
    together, stats = run(runtime, requests, max_rows=8)
    alone = [run(runtime, [r], max_rows=8)[0][0] for r in requests]
    assert together == alone
    assert all(len(t) == 6 for t in together)
    assert together[0] != run(runtime, [(PROMPTS[0], GREEDY)], max_rows=8)[0][0]  # the seeded row did sample
    assert stats.rows.sum > stats.rows.count  # the rows did share steps


def test_one_row_per_step_serves_every_request_in_turn_with_the_same_tokens(runtime: Any) -> None:
    requests = [(p, GREEDY) for p in PROMPTS]
    one, stats = run(runtime, requests, max_rows=1)
    assert stats.rows.count > 0
    assert stats.rows.sum == stats.rows.count  # never two rows in a step
    assert one == run(runtime, requests, max_rows=8)[0]
