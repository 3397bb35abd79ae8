"""Cold start per format: `fwx serve` until /v2/health/ready, against the floor it cannot beat.

For each format of the sample CNN (exported once with ``fwx export --to all``):

* ``floor``: a fresh Python process that imports the runtime, loads the
  artifact and runs the warm-up inference, timed from spawn to "done";
* ``serve``: ``fwx serve REPO --prefer FMT`` (this tree), timed from spawn to
  the first 200 on ``/v2/health/ready``; the goal is <= 1.2 x floor;
* ``serve - floor``: the server's own start (interpreters, web stack,
  listeners), which every format pays on top of its floor (``fwx serve``
  refuses an empty repository, so it is read off the smallest model);
* ``before`` (with ``--before-root``): the same command on another checkout,
  e.g. the pre-supervisor tree whose probe child loaded every model twice.

Runs are interleaved (floor, serve, before for one format, then the next) and
repeated; the table shows the median with min-max. Beside wall seconds, each
run records CPU seconds (every process of the run, until ready), which other
jobs on the machine disturb much less than wall time: on a shared machine,
compare those. Readiness is polled every 5 ms. Writes
bench-results/cold_start.json.

    .venv/bin/python benchmarks/cold_start.py                       # builds the repo once (~1 min)
    .venv/bin/python benchmarks/cold_start.py --before-root /path/to/old/checkout --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("onnx", "tflite", "torchscript", "pt2", "savedmodel")
FLOOR = """
import sys
from pathlib import Path
from fwx.formats import Format
from fwx.manifest import Manifest
from fwx.runtimes import load_runtime
from fwx.runtimes.base import warmup
version = Path(sys.argv[2])
manifest = Manifest.read(version)
entry = manifest.artifacts[sys.argv[1]]
rt = load_runtime(Format(sys.argv[1]), version / entry.path, signature_hint=manifest.sig())
warmup(rt, manifest.sig())
print("done", flush=True)
"""


def build_repo(repo: Path) -> Path:
    """Export the sample CNN to every format (once; reused when ``repo`` exists)."""
    version = repo / "cnn" / "1"
    if (version / "fwx.json").exists():
        return version
    src = repo.parent / "cold-start-src"
    sys.path.insert(0, str(ROOT))
    from samples import CNN_EXPORT_ARGS
    from samples.models import save_all

    paths = save_all(src)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "fwx",
            "export",
            str(paths["cnn"]),
            *CNN_EXPORT_ARGS,
            "--to",
            "all",
            "--out",
            str(repo),
            "--name",
            "cnn",
        ],
        check=True,
        cwd=ROOT,
        env=_env(ROOT),
    )
    return version


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` and all its descendants so far (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def floor(fmt: str, version: Path) -> tuple[float, float]:
    cpu0 = _children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", FLOOR, fmt, str(version)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(ROOT),
        cwd=ROOT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    dt = time.perf_counter() - t0
    proc.wait(120)
    if line.strip() != "done":
        raise SystemExit(f"floor run of {fmt} failed (exit {proc.returncode})")
    return dt, _children_cpu_s() - cpu0  # CPU includes the exit (small next to the import)


def wait_ready(proc: subprocess.Popen[bytes], port: int, what: str, poll: float = 0.005) -> None:
    """Return once ``/v2/health/ready`` answers 200; exit if the server dies or is not ready in 300 s."""
    import http.client

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 300:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/v2/health/ready")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(poll)
    raise SystemExit(f"{what} not ready after 300 s")


def serve(fmt: str, repo: Path, root: Path, extra: list[str]) -> tuple[float, float]:
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "fwx",
        "serve",
        str(repo),
        "--prefer",
        fmt,
        "--http-port",
        str(port),
        "--grpc-port",
        "0",
        "--poll-seconds",
        "0",
        "--log-level",
        "warning",
        *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(root), cwd=root)
    try:
        wait_ready(proc, port, f"fwx serve --prefer {fmt}")
        return time.perf_counter() - t0, _cpu_s(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)


def _stats(vals: list[float]) -> dict[str, float]:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", type=Path, default=ROOT / "bench-results" / "cold-start-repo")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before-root", type=Path, default=None, help="another checkout to time the same way")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra fwx serve flag (repeatable)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "cold_start.json")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from fwx import ui

    version = build_repo(args.repo)
    raw: dict[str, dict[str, list[float]]] = {}
    for fmt in args.formats.split(","):
        runs = raw.setdefault(fmt, {})

        def record(kind: str, wall_cpu: tuple[float, float], runs: dict[str, list[float]] = runs) -> None:
            runs.setdefault(kind, []).append(wall_cpu[0])
            runs.setdefault(f"{kind}_cpu", []).append(wall_cpu[1])

        for _ in range(args.repeats):
            record("floor", floor(fmt, version))
            record("serve", serve(fmt, args.repo, ROOT, args.serve_arg))
            if args.before_root is not None:
                record("before", serve(fmt, args.repo, args.before_root, args.serve_arg))
            print(fmt, {k: round(v[-1], 2) for k, v in runs.items()}, flush=True)
    summary = {fmt: {k: _stats(v) for k, v in runs.items()} for fmt, runs in raw.items()}
    table = []
    for fmt, s in summary.items():

        def cell(k: str, s: dict[str, Any] = s) -> str:
            return f"{s[k]['median']:.2f} ({s[k]['min']:.2f}-{s[k]['max']:.2f})" if k in s else "-"

        def ratio(a: str, b: str, s: dict[str, Any] = s) -> str:
            return f"{s[a]['median'] / s[b]['median']:.2f}" if a in s and b in s and s[b]["median"] else "-"

        table.append(
            [
                fmt,
                cell("floor"),
                cell("serve"),
                ratio("serve", "floor"),
                cell("before"),
                f"{cell('floor_cpu')} / {cell('serve_cpu')} / {cell('before_cpu')}",
                ratio("serve_cpu", "floor_cpu"),
            ]
        )
    print()
    print(
        ui.table(
            [
                "format",
                "floor s (import+load+warm-up)",
                "fwx serve to ready s",
                "serve / floor",
                "before s",
                "CPU s floor / serve / before",
                "CPU serve / floor",
            ],
            table,
        )
    )
    meta = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "repeats": args.repeats,
        "before_root": str(args.before_root) if args.before_root else None,
        "serve_args": args.serve_arg,
        "load_avg_at_end": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": raw}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
