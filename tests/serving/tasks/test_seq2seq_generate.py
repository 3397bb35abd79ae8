"""Generation with seq2seq exports equals transformers' ``generate()``: tiny T5 and BART folders exported with
``--task text2text-generation-with-past`` to ONNX (``NAME-encoder``, ``NAME-decoder``,
``NAME-decoder-with-past``), asked for by ``NAME`` through Triton's generate and generate_stream and OpenAI's
completions, one at a time and eight at once with different prompt lengths; a trio with a part missing, a
chat request, huge max_tokens and invalid UTF-8 are each one clear 4xx."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.exporter import hf_folders as hf
from tests.serving.tasks import text_models as tm

pytestmark = pytest.mark.slow
MODELS = {"t5": hf.t5, "bart": hf.bart}
STEPS = 12


def build(root: Path, name: str) -> Path:
    folder = root / "src" / name
    MODELS[name](folder)
    tm.save_tokenizer(folder)  # its vocabulary covers every id the tiny models emit
    return folder


def export(folder: Path, repo: Path, name: str, fmt: str = "onnx") -> None:
    from fwx.exporter import ExportOptions
    from fwx.exporter.parts import export_all

    results = export_all(str(folder), [fmt], ExportOptions(out=repo, task="text2text-generation-with-past", name=name))
    assert [r.ok for r in results] == [True] * 3, [r.failures for r in results]


def reference_ids(folder: Path, ids: list[int], max_new: int, **settings: Any) -> list[int]:
    """transformers' greedy ``generate`` of the seq2seq model (``settings`` passed on): the new tokens, the
    end-of-sequence one included."""
    import torch

    model = hf.transformers().AutoModelForSeq2SeqLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    x = torch.tensor([ids], dtype=torch.int64)
    with torch.no_grad():
        out = model.generate(
            x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=False, num_beams=1, **settings
        )
    return [int(t) for t in out[0, 1:]]  # after the decoder's start token


def reference_text(folder: Path, prompt: str, max_new: int) -> str:
    """The reference tokens decoded as the server decodes them (the end-of-sequence token is not text)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    new = reference_ids(folder, tok.encode(prompt).ids, max_new)
    eos = hf.transformers().GenerationConfig.from_pretrained(str(folder)).eos_token_id
    if new and new[-1] in (eos if isinstance(eos, list) else [eos]):
        new = new[:-1]
    return str(tok.decode(new, skip_special_tokens=True))


@pytest.fixture(scope="module")
def s2s_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("seq2seq")
    folders = {name: build(root, name) for name in MODELS}
    for name, folder in folders.items():
        export(folder, root / "repo", name)
    # one export with its first decoder gone: "t5broken" has an encoder and a decoder with past only
    for part in ("encoder", "decoder-with-past"):
        shutil.copytree(root / "repo" / f"t5-{part}", root / "repo" / f"t5broken-{part}")
    return root / "repo", folders


@pytest.fixture(scope="module")
def srv(s2s_repo: tuple[Path, dict[str, Path]], live_server: Callable[..., Any]) -> Any:
    return live_server(s2s_repo[0], load_probe=False, grpc_port=0)


@pytest.fixture(scope="module")
def reference(s2s_repo: tuple[Path, dict[str, Path]]) -> Callable[..., str]:
    memo: dict[tuple[str, str, int], str] = {}

    def ref(model: str, prompt: str, steps: int = STEPS) -> str:
        if (model, prompt, steps) not in memo:
            memo[model, prompt, steps] = reference_text(s2s_repo[1][model], prompt, steps)
        return memo[model, prompt, steps]

    return ref


def events(text: str) -> list[Any]:
    blocks = [b[len("data: ") :] for b in text.split("\n\n") if b.startswith("data: ")]
    return [orjson.loads(b) for b in blocks if b != "[DONE]"]


@pytest.mark.parametrize("model", list(MODELS))
def test_greedy_text_equals_transformers_generate(srv: Any, reference: Any, model: str) -> None:
    prompt = tm.words(20, 31, 42, 53, 64)
    want = reference(model, prompt)
    assert want  # the tiny model says something
    r = srv.request("POST", f"/v2/models/{model}/generate", json={"text_input": prompt, "max_tokens": STEPS})
    assert r.status_code == 200, r.text
    assert r.json()["text_output"] == want
    assert r.json()["model_name"] == model
    r = srv.request("POST", f"/v2/models/{model}/generate_stream", json={"text_input": prompt, "max_tokens": STEPS})
    assert r.status_code == 200, r.text
    chunks = events(r.text)
    assert "".join(c["text_output"] for c in chunks) == want
    assert chunks[-1]["finish_reason"] in ("length", "stop")
    body = {"model": model, "prompt": prompt, "max_tokens": STEPS, "temperature": 0}
    r = srv.request("POST", "/v1/completions", json=body)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["choices"][0]["text"] == want
    assert doc["usage"]["prompt_tokens"] == 5
    r = srv.request("POST", "/v1/completions", json={**body, "stream": True})
    assert "".join(c["choices"][0]["text"] for c in events(r.text) if c["choices"]) == want


@pytest.mark.parametrize("model", list(MODELS))
def test_eight_prompts_of_different_lengths_at_once_each_equal_transformers(
    srv: Any, reference: Any, model: str
) -> None:
    prompts = [tm.words(*range(12 + i, 12 + 2 * i + 1)) for i in range(8)]  # 1 to 8 words

    async def all_at_once() -> list[Any]:
        bodies = [
            {"model": model, "prompt": p, "max_tokens": STEPS - i, "temperature": 0} for i, p in enumerate(prompts)
        ]
        return list(await asyncio.gather(*(srv._client.post("/v1/completions", json=b) for b in bodies)))

    answers = srv.call(all_at_once())
    for i, r in enumerate(answers):
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == reference(model, prompts[i], STEPS - i), f"prompt {i}"
    rows = srv.request("GET", "/metrics").text
    assert f'fwx_generate_step_rows_count{{model="{model}",version="1"}}' in rows


def test_a_stop_string_and_seeded_sampling_work_as_for_decoders(srv: Any, reference: Any) -> None:
    prompt = tm.words(20, 31, 42, 53, 64)
    full = reference("bart", prompt)
    stop = full.split(" ")[2]
    body = {"model": "bart", "prompt": prompt, "max_tokens": STEPS, "temperature": 0, "stop": stop}
    choice = srv.request("POST", "/v1/completions", json=body).json()["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == (full[: full.index(stop)], "stop")
    sampled = {"model": "t5", "prompt": prompt, "max_tokens": 8, "temperature": 1.5, "top_k": 20, "seed": 7}
    texts = [srv.request("POST", "/v1/completions", json=sampled).json()["choices"][0]["text"] for _ in range(2)]
    assert texts[0] == texts[1]


def test_a_trio_with_a_part_missing_is_one_clear_line(srv: Any) -> None:
    r = srv.request("POST", "/v2/models/t5broken/generate", json={"text_input": "w20", "max_tokens": 2})
    assert r.status_code == 404, r.text
    assert "t5broken-decoder" in r.json()["error"]
    assert "\n" not in r.json()["error"]
    r = srv.request("POST", "/v1/completions", json={"model": "t5broken", "prompt": "w20", "max_tokens": 2})
    assert r.status_code == 404
    assert "t5broken-decoder" in r.json()["error"]["message"]
    r = srv.request("POST", "/v2/models/t5/versions/7/generate", json={"text_input": "w20", "max_tokens": 2})
    assert r.status_code == 404, r.text
    assert "version 7" in r.json()["error"]


def test_hostile_requests_are_one_clear_4xx_and_the_server_keeps_serving(srv: Any, reference: Any) -> None:
    r = srv.request("POST", "/v1/completions", json={"model": "t5", "prompt": "w20", "max_tokens": 1 << 20})
    assert r.status_code == 400, r.text
    assert "max_tokens" in r.json()["error"]["message"]
    r = srv.request("POST", "/v1/completions", json={"model": "bart", "prompt": "w20 " * 100, "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert "positions hold 64" in r.json()["error"]["message"]
    bad = b'{"text_input": "w20 \xff\xfe", "max_tokens": 2}'
    r = srv.request("POST", "/v2/models/t5/generate", content=bad, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    r = srv.request("POST", "/v1/completions", json={"model": "t5", "prompt": [20, 96], "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert "[0, 96)" in r.json()["error"]["message"]
    r = srv.request("POST", "/v1/completions", json={"model": "t5", "prompt": [20, 31], "max_tokens": 2})
    assert r.status_code == 200, r.text  # token ids are a prompt too
    chat = {"model": "t5", "messages": [{"role": "user", "content": "w20"}], "max_tokens": 2}
    r = srv.request("POST", "/v1/chat/completions", json=chat)
    assert r.status_code == 400
    assert "prompt" in r.json()["error"]["message"]
    prompt = tm.words(20, 31, 42, 53, 64)
    r = srv.request("POST", "/v2/models/t5/generate", json={"text_input": prompt, "max_tokens": STEPS})
    assert r.json()["text_output"] == reference("t5", prompt)


def test_grpc_stream_infer_and_the_openai_model_list(srv: Any, reference: Any) -> None:
    """Triton's decoupled form over gRPC (tritonclient unmodified) for ``NAME``; ``GET /v1/models`` lists the
    exports a request can name (``t5broken`` has a part missing, so it is not listed)."""
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    prompt = tm.words(20, 31, 42, 53, 64)
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=object))
    steps = grpcclient.InferInput("max_tokens", [1], "INT32")
    steps.set_data_from_numpy(np.array([STEPS], dtype=np.int32))
    flag = grpcclient.InferInput("stream", [1], "BOOL")
    flag.set_data_from_numpy(np.array([True]))
    replies: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    try:
        client.async_stream_infer("bart", [text, steps, flag], request_id="r1")
    finally:
        client.stop_stream()  # the server ends the stream once the request has its last reply
        client.close()
    parts = []
    while not replies.empty():
        result, error = replies.get_nowait()
        assert error is None, error
        parts.append(result.as_numpy("text_output")[0].decode())
    assert "".join(parts) == reference("bart", prompt)
    listed = {m["id"] for m in srv.request("GET", "/v1/models").json()["data"]}
    assert {"t5", "bart"} <= listed
    assert "t5broken" not in listed


# ------------------------------------------------------------------ the engine on its own, no server
def run_engine(
    repo: Path,
    folder: Path,
    scenario: Callable[[Any], Any],
    options: Any = None,
    forced: tuple[Any, Any] = (None, None),
) -> tuple[Any, Any]:
    """``scenario(engine)`` on a T5-or-BART engine over the exported ONNX files (``forced``: the first and
    last tokens), with ``options`` or the defaults; its result and the stats."""
    import json

    from fwx.runtimes.onnx import OnnxRuntime
    from fwx.serving.tasks.metrics import GenerationStats
    from fwx.serving.tasks.scheduler import EngineOptions
    from fwx.serving.tasks.seq2seq_engine import Seq2SeqEngine, Seq2SeqParts, layout_of

    name = folder.name
    enc, dec, later = (OnnxRuntime.load(repo / f"{name}-{p}" / "1" / "model.onnx") for p in PARTS)
    config = json.loads((folder / "config.json").read_text())
    parts = Seq2SeqParts(enc, dec, later, config["decoder_start_token_id"], config["pad_token_id"], True, *forced)
    stats = GenerationStats(name, "1")
    try:
        engine = Seq2SeqEngine(parts, layout_of(later.signature()), options or EngineOptions(), stats)
        return asyncio.run(scenario(engine)), stats
    finally:
        for rt in (enc, dec, later):
            rt.close()


PARTS = ("encoder", "decoder", "decoder-with-past")


async def tokens(seq: Any, engine: Any, cancel_after: int = 0, started: asyncio.Event | None = None) -> list[int]:
    """The tokens ``seq`` gets (cancelled once it has ``cancel_after``); ``started`` is set at its first."""
    got: list[int] = []
    while (item := await asyncio.wait_for(seq.tokens.get(), 120)) is not None:
        assert isinstance(item, tuple), item
        got.append(item[0])
        if started is not None:
            started.set()
        if len(got) == cancel_after:
            engine.cancel(seq)
            break
    return got


@pytest.mark.parametrize("model", list(MODELS))
def test_rows_of_one_cohort_and_a_later_cohort_each_generate_what_transformers_does(
    s2s_repo: tuple[Path, dict[str, Path]], model: str
) -> None:
    """Four prompts of different lengths submitted together share steps (one cohort, the encoder right-padded);
    one of them is cancelled after two tokens and leaves; a prompt submitted once the first tokens are out
    starts a cohort of its own (beside the first while that one still runs). Every row that runs to its end
    has transformers' tokens."""
    from fwx.serving.tasks.sampling import SamplingParams

    repo, folders = s2s_repo
    config = hf.transformers().AutoConfig.from_pretrained(str(folders[model]))
    eos = frozenset([config.eos_token_id])
    prompts = [list(range(20, 21 + n)) for n in (1, 6, 3, 8, 4)]
    params = SamplingParams(max_tokens=STEPS, greedy=True)

    async def scenario(engine: Any) -> list[list[int]]:
        started = asyncio.Event()
        first = [engine.submit(p, params, eos) for p in prompts[:4]]
        runs = [
            asyncio.ensure_future(tokens(s, engine, 2 if i == 2 else 0, started if i == 0 else None))
            for i, s in enumerate(first)
        ]
        await asyncio.wait_for(started.wait(), 120)  # the first cohort is running
        late = asyncio.ensure_future(tokens(engine.submit(prompts[4], params, eos), engine))
        return list(await asyncio.gather(*runs, late))

    got, stats = run_engine(repo, folders[model], scenario)
    for i, prompt in enumerate(prompts):
        want = reference_ids(folders[model], prompt, STEPS)
        assert got[i] == (want[:2] if i == 2 else want), f"prompt {i}"
    assert stats.rows.sum > stats.rows.count  # rows did share steps


def test_forced_first_and_last_tokens_are_transformers(s2s_repo: tuple[Path, dict[str, Path]]) -> None:
    """A generation config's ``forced_bos_token_id`` and ``forced_eos_token_id`` (BART, mBART, Marian) force the
    first token and the last one ``max_tokens`` allows, as ``generate()`` does; a row that ends earlier at its
    end-of-sequence token ends there."""
    from fwx.serving.tasks.sampling import SamplingParams

    repo, folders = s2s_repo
    prompts = [[20, 21, 22], list(range(30, 37))]
    params = SamplingParams(max_tokens=STEPS, greedy=True)

    async def scenario(engine: Any) -> list[list[int]]:
        seqs = [engine.submit(p, params, frozenset([3])) for p in prompts]
        return list(await asyncio.gather(*(tokens(s, engine) for s in seqs)))

    got, _ = run_engine(repo, folders["bart"], scenario, forced=(50, 3))
    for prompt, row in zip(prompts, got, strict=True):
        assert row[0] == 50
        assert row == reference_ids(folders["bart"], prompt, STEPS, forced_bos_token_id=50, forced_eos_token_id=3)


def test_the_cache_budget_refuses_with_503_when_spent_and_400_when_a_request_never_fits(
    s2s_repo: tuple[Path, dict[str, Path]],
) -> None:
    """Reserved per request when it arrives: the encoder's tokens (the cross-attention cache) plus max_tokens
    (the decoder's own), returned when the request ends."""
    from fwx.errors import InputError, UnavailableError
    from fwx.serving.tasks.sampling import SamplingParams
    from fwx.serving.tasks.scheduler import EngineOptions

    repo, folders = s2s_repo
    params = SamplingParams(max_tokens=8, greedy=True, ignore_eos=True)
    per_token = 2 * 2 * 4 * 8 * 4  # BART's decoder: 2 layers, key and value, 4 heads of 8, float32

    async def scenario(engine: Any) -> list[int]:
        first = engine.submit([20, 21], params, frozenset())
        with pytest.raises(UnavailableError, match="cache is full"):
            engine.submit([20, 21], params, frozenset())
        with pytest.raises(InputError, match="budget"):
            engine.submit(list(range(20, 40)), params, frozenset())
        got = await tokens(first, engine)
        assert engine.reserved == 0  # returned with the step that delivered the row's last token
        return got + await tokens(engine.submit([20, 21], params, frozenset()), engine)

    got, stats = run_engine(repo, folders["bart"], scenario, options=EngineOptions(cache_bytes=10 * per_token))
    assert len(got) == 16
    assert stats.rejected == 1


def test_a_client_that_goes_away_is_cancelled_and_its_cache_returned(srv: Any) -> None:
    """The decoder with past behind a gate (``Gate``: the real runtime, each call held until the test lets it
    run): the client reads the first token and hangs up; its row is cancelled, leaves the in-flight count and
    the cohort, and its reservation is returned."""
    import dataclasses

    import httpx

    from fwx.serving.tasks import seq2seq
    from tests.serving.tasks.test_generate_limits import Gate, wait_for

    assert srv.request("POST", "/v2/models/t5/generate", json={"text_input": "w20", "max_tokens": 1}).status_code == 200
    engine = seq2seq._ENGINES[seq2seq.find(srv.dataplane.manager, "t5", None).later]
    real = engine.parts.later
    gate = Gate(real)
    engine.parts = dataclasses.replace(engine.parts, later=gate)
    body = {"model": "t5", "prompt": "w20 w21", "max_tokens": 40, "temperature": 0, "stream": True, "ignore_eos": True}
    try:
        with httpx.Client(timeout=120) as client, client.stream("POST", f"{srv.url}/v1/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()  # held until the client leaves (a collected generator would close it early)
            for line in lines:
                if line.startswith("data: "):
                    break
            assert "error" not in line
            (seq,) = engine.sequences
            assert srv.dataplane.inflight == 1
            del lines
        wait_for(lambda: seq.cancelled, "the disconnect to cancel the request")
        wait_for(lambda: srv.dataplane.inflight == 0, "the request to leave the in-flight count")
        gate.allow(10_000)
        wait_for(lambda: engine.running == 0 and engine.reserved == 0, "the row to leave its cohort")
        assert seq.generated < 40
    finally:
        gate.allow(10_000)
        engine.parts = dataclasses.replace(engine.parts, later=real)
