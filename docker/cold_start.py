"""Cold start of fwx's images: seconds from `docker run` to the first 200 on /v2/health/ready.

    python docker/cold_start.py [--runs N] [--baked] IMAGE...

Each run starts a fresh container the way the docs run one (host network on free loopback ports,
read-only root, no capabilities, uid 1000) serving a one-model ONNX repository mounted read-only
(``--baked``: the models the image carries, nothing mounted), waits for ready, and removes it.
Prints one JSON object: per image, every run, the median and the spread (min, max).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _repository(root: Path) -> Path:
    """A one-model ONNX repository (y = 2x + 1) that uid 1000 can read."""
    sys.path.insert(0, str(ROOT / "tests" / "serving"))
    import serving_models

    repo = root / "models"
    serving_models.publish(repo, "lin", *serving_models.build_linear(), 1)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return repo


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def cold_start(image: str, repo: Path | None) -> float:
    http, grpc = _free_port(), _free_port()
    name = f"fwx-ci-cold-{http}"
    mount = ["-v", f"{repo}:/models:ro"] if repo is not None else []
    serve = ["--host", "127.0.0.1", "--http-port", str(http), "--grpc-port", str(grpc)]
    url = f"http://127.0.0.1:{http}/v2/health/ready"
    started = time.monotonic()
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--network", "host", "--read-only", "--tmpfs", "/tmp",
         "--cap-drop", "ALL", "--security-opt", "no-new-privileges", *mount, image, *serve],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        deadline = started + READY_TIMEOUT_S
        while not _ready(url):
            if time.monotonic() > deadline:
                logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
                raise SystemExit(f"{image} not ready after {READY_TIMEOUT_S:g} s:\n{logs.stderr[-2000:]}")
            time.sleep(0.05)  # the polling interval of a condition with a deadline
        return time.monotonic() - started
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baked", action="store_true", help="serve the models baked into the image")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fwx-cold-"))
    try:
        repo = None if args.baked else _repository(work)
        result = {}
        for image in args.images:
            runs = [round(cold_start(image, repo), 2) for _ in range(args.runs)]
            result[image] = {
                "runs_s": runs,
                "median_s": round(statistics.median(runs), 2),
                "min_s": min(runs),
                "max_s": max(runs),
            }
            print(f"{image}: median {result[image]['median_s']} s over {runs}", file=sys.stderr)
        print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
