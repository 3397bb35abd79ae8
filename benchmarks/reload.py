"""Reload latency per format: a new version published while `fwx serve` runs, until it answers.

For each format of the sample CNN, each repeat:

* starts ``fwx serve REPO --prefer FMT --only-formats FMT --poll-seconds P``
  on a repository holding version 1 (exported by ``benchmarks/cold_start.py``),
  waits for ``/v2/health/ready``, then lets it settle (``--settle``, default
  1 s + 1.5 x this run's floor: the time its spare probe child needs to import
  and warm up, since a reload normally comes long after a start), then waits a
  random fraction of the poll period (so the publish lands at a random phase of
  the poll, as it would in production);
* publishes version 2 (the same CNN with other weights, so other checksums: it
  is probed like any new artifact) the way ``fwx export`` does: copy into a
  hidden ``.fwx-tmp-*`` folder beside it, then ``os.rename`` into place; the
  clock starts at the rename;
* sends version-less inferences (``POST /v2/models/cnn/infer``, version policy
  latest), each on a new connection, until one is answered with
  ``model_version`` 2: that is the **reload latency**. Every answer before it
  must come from version 1 (a failed request is counted and reported);
* reads the server log for the split: the probe child's wall time and the
  in-process load + warm-up; what is left (reload - probe - load) is the poll
  wait plus the scan and the swap;
* times version 2's **cold load** two ways, interleaved with the server runs:
  ``floor`` = a fresh process that imports the framework, loads and warms up
  (``cold_start.floor``: the cold-start goal's yardstick), and ``warm`` = load
  + warm-up inside a process that already imported the framework and loaded
  version 1 (what the serving worker itself pays).

The goal (issue 17) is reload <= poll + 1.2 x cold load. "Its cold load" is
taken as the floor, import included: the crash-safety probe loads the new
artifact in a child process first, and a child pays its framework's import
unless one is kept warm. Against ``warm`` (import excluded) the bound is
stricter; both verdicts are printed. ``--before-root`` times another checkout
the same way (e.g. the tree before the spare probe child), and ``--also-arg``
this tree with an extra flag (e.g. ``--no-probe-spare``), interleaved in each
repeat. Writes bench-results/reload.json.

    .venv/bin/python benchmarks/reload.py --repo bench-results/cold-start-repo      # ~1 min to build v2 once
    .venv/bin/python benchmarks/reload.py --formats onnx,tflite --repeats 5 --poll-seconds 1
    .venv/bin/python benchmarks/reload.py --before-root /path/to/old/checkout --also-arg=--no-probe-spare
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import cold_start  # noqa: E402 - the sibling benchmark's builders and floor

WARM = """
import sys, time
from pathlib import Path
from fwx.formats import Format
from fwx.manifest import Manifest
from fwx.runtimes import load_runtime
from fwx.runtimes.base import warmup

def load(version):
    m = Manifest.read(version)
    rt = load_runtime(Format(sys.argv[1]), version / m.artifacts[sys.argv[1]].path, signature_hint=m.sig())
    warmup(rt, m.sig())
    return rt

old = load(Path(sys.argv[2]))
t0 = time.perf_counter()
new = load(Path(sys.argv[3]))
print(f"done {time.perf_counter() - t0:.4f}", flush=True)
"""
LOADED = re.compile(r"model cnn v2 loaded as \S+ in ([\d.]+)s(?:, probe ([\d.]+)s)?")
IMAGE = {"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [0.0] * 3072}]}


def build_v2(v1_repo: Path, out: Path) -> Path:
    """Export the sample CNN with other weights as ``cnn`` version 2 (once; reused when ``out`` exists)."""
    version = out / "cnn" / "2"
    if (version / "fwx.json").exists():
        return version
    sys.path.insert(0, str(ROOT))
    import torch

    from samples import CNN_EXPORT_ARGS
    from samples.models import SEED, build_torch_cnn

    src = out.parent / "reload-src" / "cnn_v2.pt"
    src.parent.mkdir(parents=True, exist_ok=True)
    torch.save(build_torch_cnn(seed=SEED + 1).state_dict(), src)
    cmd = [sys.executable, "-m", "fwx", "export", str(src), *CNN_EXPORT_ARGS, "--to", "all"]
    cmd += ["--out", str(out), "--name", "cnn", "--model-version", "2"]
    subprocess.run(cmd, check=True, cwd=ROOT, env=cold_start._env(ROOT))
    return version


def warm_load(fmt: str, v1: Path, v2: Path) -> float:
    """Load + warm-up of ``v2`` in a process whose framework is imported (it serves ``v1``)."""
    out = subprocess.run(
        [sys.executable, "-c", WARM, fmt, str(v1), str(v2)],
        capture_output=True,
        text=True,
        env=cold_start._env(ROOT),
        cwd=ROOT,
        timeout=300,
    )
    last = (out.stdout.strip().splitlines() or [""])[-1]
    if not last.startswith("done "):
        raise SystemExit(f"warm load of {fmt} failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")
    return float(last.split()[1])


def _infer(port: int) -> tuple[int, str]:
    """One version-less inference on a new connection: (status, model_version)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v2/models/cnn/infer", json.dumps(IMAGE), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, str(json.loads(body).get("model_version", "")) if resp.status == 200 else ""
    finally:
        conn.close()


def reload_once(
    fmt: str,
    v1: Path,
    v2: Path,
    args: argparse.Namespace,
    rng: random.Random,
    variant: tuple[Path, list[str]],
    settle: float,
) -> dict[str, Any]:
    """One server, one publish of v2; returns the reload latency and its split."""
    with tempfile.TemporaryDirectory(prefix="fwx-reload-") as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(v1, repo / "cnn" / "1")
        port = cold_start._free_port()
        cmd = [sys.executable, "-m", "fwx", "serve", str(repo), "--prefer", fmt, "--only-formats", fmt]
        cmd += ["--http-port", str(port), "--grpc-port", "-1", "--poll-seconds", str(args.poll_seconds)]
        cmd += ["--workers", str(args.workers), "--log-level", "info", *variant[1]]
        log_path = Path(tmp) / "serve.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=cold_start._env(variant[0]), cwd=variant[0])
            try:
                cold_start.wait_ready(proc, port, f"fwx serve --prefer {fmt}", poll=0.02)
                time.sleep(settle + rng.uniform(0, args.poll_seconds))  # a random phase of the poll
                staging = repo / "cnn" / f".fwx-tmp-bench-{os.getpid()}"
                shutil.copytree(v2, staging)
                t0 = time.perf_counter()
                os.rename(staging, repo / "cnn" / "2")
                row = _until_v2(port, t0, args.workers)
            finally:
                proc.terminate()
                proc.wait(60)
        text = log_path.read_text(errors="replace")
    loads = [(float(m.group(1)), float(m.group(2) or 0.0)) for m in LOADED.finditer(text)]
    if not loads:
        raise SystemExit(f"no 'model cnn v2 loaded' line in the {fmt} server log:\n{text[-2000:]}")
    load_s, probe_s = loads[0]
    row.update(load=load_s, probe=probe_s, rest=row["reload"] - load_s - probe_s, probes=sum(p > 0 for _, p in loads))
    return row


def _until_v2(port: int, t0: float, workers: int) -> dict[str, Any]:
    """Ask until v2 answers; with several workers, until ``20 x workers`` answers in a row are v2
    (``all_workers``: the first answer of that run, after the last answer from v1)."""
    first = settled = None
    streak = failed = 0
    while time.perf_counter() - t0 < 300:
        status, version = _infer(port)
        now = time.perf_counter() - t0
        time.sleep(0.02)  # ~50 requests/s: enough resolution, little CPU taken from the load being timed
        if status != 200:
            failed += 1
        elif version == "2":
            first = now if first is None else first
            settled = now if streak == 0 else settled
            streak += 1
            if streak >= (1 if workers == 1 else 20 * workers):
                return {"reload": first, "all_workers": settled, "failed": failed}
        else:
            streak = 0
    raise SystemExit("version 2 never answered within 300 s")


def _stats(vals: list[float]) -> dict[str, float]:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def _cell(s: dict[str, float]) -> str:
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", type=Path, default=ROOT / "bench-results" / "cold-start-repo", help="v1 (built once)")
    ap.add_argument("--v2-repo", type=Path, default=ROOT / "bench-results" / "reload-v2-repo", help="v2 (built once)")
    ap.add_argument("--formats", default=",".join(cold_start.FORMATS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--poll-seconds", type=float, default=2.0, help="fwx serve's default")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0, help="seeds the publish phase")
    ap.add_argument(
        "--settle",
        type=float,
        default=-1.0,
        help="seconds between ready and the publish window (default: 1 + 1.5 x floor, the spare's warm-up)",
    )
    ap.add_argument("--serve-arg", action="append", default=[], help="extra fwx serve flag (repeatable)")
    ap.add_argument("--before-root", type=Path, default=None, help="another checkout to time the same way")
    ap.add_argument("--before-arg", action="append", default=[], help="extra flag for the before server")
    ap.add_argument(
        "--also-arg",
        action="append",
        default=[],
        help="also time this tree with this extra flag, interleaved (repeatable; e.g. --no-probe-spare)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "reload.json")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from fwx import ui

    v1 = cold_start.build_repo(args.repo)
    v2 = build_v2(args.repo, args.v2_repo)
    rng = random.Random(args.seed)
    raw: dict[str, dict[str, list[float]]] = {}
    for fmt in args.formats.split(","):
        runs = raw.setdefault(fmt, {})
        for _ in range(args.repeats):
            sample = {"floor": cold_start.floor(fmt, v2)[0], "warm": warm_load(fmt, v1, v2)}
            settle = args.settle if args.settle >= 0 else 1.0 + 1.5 * sample["floor"]
            for prefix, variant in _variants(args).items():
                result = reload_once(fmt, v1, v2, args, rng, variant, settle)
                sample.update({f"{prefix}{k}": v for k, v in result.items()})
            for key, value in sample.items():
                runs.setdefault(key, []).append(float(value))
            print(fmt, {k: round(v, 2) for k, v in sample.items()}, flush=True)
    summary = {fmt: {k: _stats(v) for k, v in runs.items()} for fmt, runs in raw.items()}
    print()
    print(ui.table(*_table(summary, raw, args.poll_seconds, args.also_arg)))
    meta = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "repeats": args.repeats,
        "poll_seconds": args.poll_seconds,
        "workers": args.workers,
        "settle_s": args.settle,
        "serve_args": args.serve_arg,
        "before_root": str(args.before_root) if args.before_root else None,
        "before_args": args.before_arg,
        "also_args": args.also_arg,
        "load_avg_at_end": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": raw}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


def _variants(args: argparse.Namespace) -> dict[str, tuple[Path, list[str]]]:
    """Key prefix -> (tree, fwx serve flags): this tree, this tree with --also-arg, the before tree."""
    out = {"": (ROOT, list(args.serve_arg))}
    if args.also_arg:
        out["also_"] = (ROOT, args.serve_arg + args.also_arg)
    if args.before_root is not None or args.before_arg:
        out["before_"] = (args.before_root or ROOT, args.serve_arg + args.before_arg)
    return out


def _table(
    summary: dict[str, dict[str, dict[str, float]]],
    raw: dict[str, dict[str, list[float]]],
    poll: float,
    also: list[str],
) -> tuple[list[str], list[list[str]]]:
    """Goal per run = poll + 1.2 x that run's cold load; "met" counts the runs within it."""
    head = ["format", "variant", "reload s", "probe s", "load s", "wait+swap s", "floor s", "warm s"]
    head += [f"<= {poll:g}+1.2 floor", f"<= {poll:g}+1.2 warm", "failed requests"]
    rows = []
    for fmt, s in summary.items():
        r = raw[fmt]
        for variant, p in (("now", ""), ("now " + " ".join(also), "also_"), ("before", "before_")):
            if f"{p}reload" not in r:
                continue

            def met(key: str, r: dict[str, list[float]] = r, p: str = p) -> str:
                ok = sum(t <= poll + 1.2 * c for t, c in zip(r[f"{p}reload"], r[key], strict=True))
                return f"{ok}/{len(r[key])}"

            cells = [_cell(s[f"{p}{k}"]) for k in ("reload", "probe", "load", "rest")]
            cells += [_cell(s["floor"]), _cell(s["warm"]), met("floor"), met("warm"), f"{sum(r[f'{p}failed']):g}"]
            rows.append([fmt, variant, *cells])
    return head, rows


if __name__ == "__main__":
    sys.exit(main())
