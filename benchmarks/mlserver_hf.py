"""Benchmark: text classification requests per second, fwx serve against MLServer's Hugging Face runtime.

The same tiny BERT text classifier (tests/serving/tasks/text_models.py: random weights, hidden 32, one
layer, a word-level tokenizer) served two ways: exported by fwx to ONNX and served by ``fwx serve``'s
server (KServe v2 ``BYTES`` text in, the task's answer out), and the source folder served by MLServer 1.7.1
with ``mlserver-huggingface`` (its ``transformers`` pipeline on CPU torch). fwx batches (32 rows, 2 ms);
MLServer runs with its default, no adaptive batching: with it, 1.7.1's Hugging Face runtime hands the merged
texts to the pipeline as separate positional arguments and answers 500 (``--mlserver-batching`` shows it). Each server runs in its own process; this process is the client: C
concurrent closed-loop connections post the same one-text KServe v2 request to ``/v2/models/bert/infer``
for ``--duration`` seconds. Requests per second are the median (with min-max) of ``--repeats`` runs.

Needs ``bash benchmarks/peers/setup_mlserver_hf.sh`` first. Writes benchmarks/results/mlserver_hf.json
(date, commit, machine: _provenance.py).
    python benchmarks/mlserver_hf.py [--repeats 3] [--concurrency 1,8,32] [--duration 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._provenance import provenance, spread  # noqa: E402
from tests.serving.tasks import text_models as tm  # noqa: E402  (the tests' tiny BERT and its tokenizer)

VENV = ROOT / "benchmarks" / "peers" / ".venv-mlserver-hf"
TEXT = tm.words(20, 31, 42, 53, 64, 75)
BODY = {
    "inputs": [
        {"name": "args", "shape": [1], "datatype": "BYTES", "data": [TEXT], "parameters": {"content_type": "str"}}
    ]
}
SERVE = """
import asyncio, sys
from pathlib import Path
from fwx.serving.config import ServerConfig
from fwx.serving.server import Server

async def main():
    cfg = ServerConfig(repository=Path(sys.argv[1]), http_port=int(sys.argv[2]), grpc_port=-1, poll_seconds=0,
                       load_probe=False)  # batching: 32 rows, 2 ms (the defaults)
    srv = Server(cfg)
    await srv.start()
    await asyncio.Event().wait()

asyncio.run(main())
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(proc: subprocess.Popen[bytes], url: str, what: str) -> None:
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/v2/models/bert/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"{what} did not become ready")


def start_fwx(repo: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(repo), str(port)], cwd=ROOT, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    _wait_ready(proc, url, "fwx serve")
    return proc, url


def older_folder(folder: Path, out: Path) -> Path:
    """The folder as transformers 4.41 reads it: the same tokenizer.json under the class name it knows
    (transformers 5 writes ``TokenizersBackend``, which 4.41 has no class for)."""
    shutil.copytree(folder, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def start_mlserver(folder: Path, root: Path, *, batching: bool) -> tuple[subprocess.Popen[bytes], str]:
    http, grpc_port, metrics = _free_port(), _free_port(), _free_port()
    (root / "bert").mkdir(parents=True)
    folder = older_folder(folder, root / "src")
    settings = {
        "name": "bert",
        "implementation": "mlserver_huggingface.HuggingFaceRuntime",
        **({"max_batch_size": 32, "max_batch_time": 0.002} if batching else {}),
        "parameters": {"extra": {"task": "text-classification", "pretrained_model": str(folder), "device": -1}},
    }
    (root / "bert" / "model-settings.json").write_text(json.dumps(settings))
    ports = {"http_port": http, "grpc_port": grpc_port, "metrics_port": metrics, "debug": False}
    (root / "settings.json").write_text(json.dumps(ports))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen(
        [str(VENV / "bin" / "mlserver"), "start", str(root)],
        cwd=root,
        stdout=(root / "mlserver.log").open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{http}"
    try:
        _wait_ready(proc, url, "mlserver")
    except SystemExit:
        print((root / "mlserver.log").read_text()[-12000:], file=sys.stderr)
        raise
    return proc, url


async def load(url: str, concurrency: int, duration: float) -> float:
    """Closed loop: ``concurrency`` clients, each posting the next request when its answer arrives."""
    import httpx

    done = 0
    end = time.perf_counter() + duration

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal done
        while time.perf_counter() < end:
            r = await c.post(f"{url}/v2/models/bert/infer", json=BODY)
            if r.status_code != 200:
                raise SystemExit(f"{url}: {r.status_code} {r.text[:500]}")
            done += 1

    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=60, limits=limits) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c) for _ in range(concurrency)))
        return done / (time.perf_counter() - t0)


def answer(url: str) -> Any:
    import httpx

    r = httpx.post(f"{url}/v2/models/bert/infer", json=BODY, timeout=60)
    r.raise_for_status()
    return json.loads(r.json()["outputs"][0]["data"][0])


def measure(name: str, url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for c in (int(v) for v in args.concurrency.split(",")):
        asyncio.run(load(url, c, 1.0))  # warm up
        runs = [asyncio.run(load(url, c, args.duration)) for _ in range(args.repeats)]
        row = {"server": name, "concurrency": c, "req_per_s": spread(runs, 1)}
        rows.append(row)
        print(f"{name:9} c={c:3}: {row['req_per_s']['median']:8.1f} req/s", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument(
        "--mlserver-batching",
        action="store_true",
        help="MLServer's adaptive batching at fwx's limits (1.7.1's Hugging Face runtime answers 500 with it)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "mlserver_hf.json")
    args = ap.parse_args()
    if not (VENV / "bin" / "mlserver").exists():
        raise SystemExit("run benchmarks/peers/setup_mlserver_hf.sh first")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repo, folders = tm.export(Path(tmp), ["bert"])
        answers = {}
        proc, url = start_fwx(repo)
        try:
            answers["fwx"] = answer(url)
            rows += measure("fwx", url, args)
        finally:
            proc.terminate()
            proc.wait(60)
        proc, url = start_mlserver(folders["bert"], Path(tmp) / "mlserver", batching=args.mlserver_batching)
        try:
            answers["mlserver"] = answer(url)
            rows += measure("mlserver", url, args)
        finally:
            proc.terminate()
            proc.wait(60)
    print("answers:", answers)
    for c in (int(v) for v in args.concurrency.split(",")):
        f, m = (
            {r["server"]: r["req_per_s"]["median"] for r in rows if r["concurrency"] == c}[k]
            for k in ("fwx", "mlserver")
        )
        print(f"c={c:3}: fwx / mlserver = {f / m:.1f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {**provenance(), "answers": answers, "duration_s": args.duration, "rows": rows}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
