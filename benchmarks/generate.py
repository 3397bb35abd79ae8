"""Benchmark: generation throughput and time to first token, continuous batching against one at a time.

Two Llama-style decoders with random weights, each saved with ``save_pretrained``, exported with
``fwx export --task text-generation-with-past --to onnx``, and served by ``fwx serve``'s server in a child
process: ``small`` (4 layers, hidden 128, vocabulary 512), whose step cost is ONNX Runtime's per-op
overhead, and ``wide`` (4 layers, hidden 512, vocabulary 16384, about 110 MB of weights), whose step cost
is reading its weights, as a served LLM's decode step is. The client (this process) opens 1, 8 and 32
concurrent ``generate_stream`` requests (16-token prompts, 32 new tokens each, end-of-sequence ignored)
and measures tokens per second over the whole burst, each stream's time to its first token, and tokens per
CPU second the server spent (its process's user and system time over the burst, all threads): on a machine
shared with other jobs the CPU figure is far steadier than wall time.

Two modes on the same artifact and server code: ``continuous`` (rows join and leave the running batch
between steps, up to 64 rows) and ``one_at_a_time`` (the engine runs one row per step, the way a server
without iteration-level batching serves requests). The two modes alternate burst by burst (two servers
side by side over HTTP) so both see the same machine load. Also transformers' own ``generate()`` in a loop
over the same prompts, for scale. Each figure is the median (with min-max) of ``--repeats`` runs.

Prints a table and writes benchmarks/results/generate.json (date, commit, machine: _provenance.py).
    python benchmarks/generate.py [--repeats 3] [--streams 1,8,32] [--tokens 32] [--models small,wide]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._provenance import provenance, spread  # noqa: E402
from fwx.sources.hf import import_transformers  # noqa: E402  (transformers beside a CUDA torchvision)
from tests.exporter.hf_folders import tiny_config  # noqa: E402  (the one set of tiny Hugging Face shapes)

CONTEXT, PROMPT = 256, 16
#: name -> (hidden, intermediate, layers, vocabulary): per-op overhead bound, then weight-read bound.
MODELS = {"small": (128, 256, 4, 512), "wide": (512, 1408, 4, 16384)}


def build(folder: Path, name: str) -> None:
    """The decoder's folder, with a word-level tokenizer covering every id (``w0``, ``w1``, ...)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    hidden, inter, layers, vocab = MODELS[name]
    tf = import_transformers()
    cfg = tiny_config(  # the tests' Llama shape, scaled up so that a step costs what batching can save
        "LlamaConfig",
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=CONTEXT,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    tf.LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w3"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tf.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w3", pad_token="w0").save_pretrained(folder)


def export(folder: Path, repo: Path) -> None:
    cmd = [sys.executable, "-m", "fwx", "export", str(folder), "--task", "text-generation-with-past"]
    subprocess.run([*cmd, "--to", "onnx", "--out", str(repo), "--name", "lm"], check=True, capture_output=True)


SERVE = """
import asyncio, sys
from pathlib import Path
from fwx.serving.config import ServerConfig
from fwx.serving.server import Server
from fwx.serving.tasks.scheduler import EngineOptions

async def main():
    cfg = ServerConfig(repository=Path(sys.argv[1]), http_port=0, grpc_port=-1, poll_seconds=0, load_probe=False)
    srv = Server(cfg)
    await srv.start()
    srv.dataplane.tasks.options = EngineOptions(max_rows=int(sys.argv[2]))
    print(srv.http_port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def prompts(n: int, seed: int, vocab: int) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [" ".join(f"w{i}" for i in rng.integers(4, vocab, PROMPT)) for _ in range(n)]


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far, all its threads (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def burst(url: str, pid: int, texts: list[str], tokens: int) -> dict[str, Any]:
    """All ``texts`` at once as streams: tokens per second over the burst, each stream's first-token time."""
    import httpx

    body = {"max_tokens": tokens, "ignore_eos": True}
    firsts: list[float] = []
    counts: list[int] = []

    async def one(client: httpx.AsyncClient, text: str) -> None:
        t0, first, n = time.perf_counter(), None, 0
        async with client.stream("POST", f"{url}/v2/models/lm/generate_stream", json={**body, "text_input": text}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    first = first or time.perf_counter() - t0
                    n += 1
        firsts.append(first or 0.0)
        counts.append(n)

    limits = httpx.Limits(max_connections=len(texts) + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        t0, cpu0, srv0 = time.perf_counter(), time.process_time(), cpu_seconds(pid)
        await asyncio.gather(*(one(client, t) for t in texts))
        wall, cpu, srv = time.perf_counter() - t0, time.process_time() - cpu0, cpu_seconds(pid) - srv0
    firsts.sort()
    return {
        "tokens_per_s": len(texts) * tokens / wall,
        # what the server spent, whatever else ran on the machine: steadier than wall time under load
        "tokens_per_server_cpu_s": len(texts) * tokens / max(srv, 0.01),
        "client_cpu_share": cpu / wall,  # of one core: the client shares the server's cores on one machine
        "ttft_p50_s": statistics.median(firsts),
        "ttft_p99_s": firsts[min(len(firsts) - 1, round(0.99 * (len(firsts) - 1)))],
        "events": sum(counts),
    }


def serve(repo: Path, max_rows: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(repo), str(max_rows)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    if not port.isdigit():
        proc.kill()
        raise SystemExit("the server did not start")
    return proc, f"http://127.0.0.1:{port}"


def engine_parts(repo: Path) -> tuple[Any, Any, Any]:
    """The runtime, cache layout and tokenizer an in-process engine runs on (loaded once per model)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from fwx.manifest import Manifest
    from fwx.serving.tasks.scheduler import CacheLayout

    folder = repo / "lm" / "1"
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as fwx's ONNX runtime serves
    session = ort.InferenceSession(str(folder / "model.onnx"), sess_options=so, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    class Runtime:
        def infer(self, feeds: dict[str, Any]) -> dict[str, Any]:
            return dict(zip(names, session.run(None, feeds), strict=True))

    return Runtime(), CacheLayout.of(Manifest.read(folder).sig()), Tokenizer.from_file(str(folder / "tokenizer.json"))


async def engine_burst(parts: tuple[Any, Any, Any], max_rows: int, texts: list[str], tokens: int) -> dict[str, Any]:
    """The same burst straight into the scheduler, without HTTP: what batching buys at the model."""
    from fwx.serving.tasks.metrics import GenerationStats
    from fwx.serving.tasks.sampling import SamplingParams
    from fwx.serving.tasks.scheduler import Engine, EngineOptions

    runtime, layout, tok = parts
    engine = Engine(runtime, layout, EngineOptions(max_rows=max_rows), GenerationStats("lm", "1"))
    params = SamplingParams(max_tokens=tokens, greedy=True, ignore_eos=True)
    t0, cpu0 = time.perf_counter(), time.process_time()
    firsts: list[float] = []

    async def drain(seq: Any) -> None:
        await seq.tokens.get()
        firsts.append(time.perf_counter() - t0)
        while await seq.tokens.get() is not None:
            pass

    await asyncio.gather(*(drain(engine.submit(tok.encode(t).ids, params, frozenset())) for t in texts))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    firsts.sort()
    return {
        "tokens_per_s": len(texts) * tokens / wall,
        "tokens_per_server_cpu_s": len(texts) * tokens / max(cpu, 0.01),  # this process: the engine, all threads
        "ttft_p50_s": statistics.median(firsts),
        "ttft_p99_s": firsts[min(len(firsts) - 1, round(0.99 * (len(firsts) - 1)))],
    }


def transformers_loop(folder: Path, texts: list[str], tokens: int) -> float:
    """transformers' ``generate()`` over the prompts one after another: tokens per second."""
    import numpy as np
    import torch
    from tokenizers import Tokenizer

    tf = import_transformers()
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    model = tf.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    t0 = time.perf_counter()
    for text in texts:
        ids = torch.from_numpy(np.array([tok.encode(text).ids], dtype=np.int64))
        with torch.no_grad():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
                pad_token_id=0,
            )
    return len(texts) * tokens / (time.perf_counter() - t0)


def _row(model: str, mode: str, n: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"mode": mode, "streams": n}
    for key in ("tokens_per_s", "tokens_per_server_cpu_s", "ttft_p50_s", "ttft_p99_s", "client_cpu_share"):
        if key in runs[0]:
            row[key] = spread([r[key] for r in runs], 4)
    print(
        f"{model:6} {mode:21} {n:3} streams: {row['tokens_per_s']['median']:9.1f} tok/s, TTFT p50 "
        f"{row['ttft_p50_s']['median'] * 1e3:8.1f} ms, p99 {row['ttft_p99_s']['median'] * 1e3:8.1f} ms",
        flush=True,
    )
    return row


def alternated(name: str, prefix: str, run: Any, streams: list[int], repeats: int, vocab: int) -> list[dict[str, Any]]:
    """Continuous then one at a time, burst by burst, so a change in the machine's load hits both modes."""
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for seed in range(repeats):
        for n in streams:
            for mode, max_rows in (("continuous", 64), ("one_at_a_time", 1)):
                runs.setdefault((mode, n), []).append(run(max_rows, prompts(n, seed, vocab)))
    return [_row(name, prefix + mode, n, rs) for (mode, n), rs in sorted(runs.items(), key=lambda kv: kv[0])]


def bench_model(name: str, tmp: Path, streams: list[int], repeats: int, tokens: int) -> dict[str, Any]:
    """Build, export and measure one decoder: engine rows, HTTP rows, transformers' loop, speed-ups."""
    hidden, inter, layers, vocab = MODELS[name]
    folder, repo = tmp / f"{name}-src", tmp / f"{name}-repo"
    build(folder, name)
    export(folder, repo)
    parts = engine_parts(repo)
    asyncio.run(engine_burst(parts, 64, prompts(2, 99, vocab), 4))  # warm the session
    rows = alternated(
        name, "engine_", lambda m, t: asyncio.run(engine_burst(parts, m, t, tokens)), streams, repeats, vocab
    )
    servers = {m: serve(repo, m) for m in (64, 1)}
    try:
        for proc, url in servers.values():
            asyncio.run(burst(url, proc.pid, prompts(2, 99, vocab), 4))  # warm the engine and the connection pool
        rows += alternated(
            name,
            "",
            lambda m, t: asyncio.run(burst(servers[m][1], servers[m][0].pid, t, tokens)),
            streams,
            repeats,
            vocab,
        )
    finally:
        for proc, _ in servers.values():
            proc.kill()
            proc.wait()
    loop = [transformers_loop(folder, prompts(8, seed, vocab), tokens) for seed in range(repeats)]
    rows.append({"mode": "transformers_generate_loop", "streams": 1, "tokens_per_s": spread(loop, 4)})
    print(f"{name:6} transformers generate() in a loop: {statistics.median(loop):9.1f} tok/s", flush=True)

    def ratios(key: str) -> dict[str, float]:
        by = {(r["mode"], r["streams"]): r[key]["median"] for r in rows if key in r}
        return {
            f"{where}{n}": round(by[(f"{prefix}continuous", n)] / by[(f"{prefix}one_at_a_time", n)], 2)
            for where, prefix in (("http_", ""), ("engine_", "engine_"))
            for n in streams
        }

    speedup, per_cpu = ratios("tokens_per_s"), ratios("tokens_per_server_cpu_s")
    print(f"{name:6} speed-up of continuous batching:", speedup, "per server CPU second:", per_cpu, flush=True)
    return {
        "name": name,
        "model": {
            "arch": "llama",
            "layers": layers,
            "hidden": hidden,
            "intermediate": inter,
            "vocab": vocab,
            "context": CONTEXT,
            "weights_mib": round(sum(f.stat().st_size for f in (repo / "lm" / "1").glob("*.onnx*")) / 2**20, 1),
            "format": "onnx",
        },
        "results": rows,
        "speedup_continuous_over_one_at_a_time": speedup,
        "speedup_per_server_cpu_s": per_cpu,
    }


def cpu_flags() -> list[str]:
    """The SIMD flags that decide ONNX Runtime's kernels (AVX2, AVX-512, VNNI, AMX)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                wanted = ("avx", "fma", "amx", "vnni", "f16c", "bf16")
                return sorted(f for f in line.split(":", 1)[1].split() if f.startswith(wanted) or "vnni" in f)
    except OSError:
        pass
    return []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--streams", default="1,8,32")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "generate.json")
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    load_start = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory() as tmp:
        results = [bench_model(m, Path(tmp), streams, args.repeats, args.tokens) for m in args.models.split(",")]
    prov = provenance()
    prov["machine"]["cpu_flags"] = cpu_flags()
    prov["machine"]["load_avg_1m_at_start"] = load_start
    doc = {"provenance": prov, "prompt_tokens": PROMPT, "new_tokens": args.tokens, "models": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
