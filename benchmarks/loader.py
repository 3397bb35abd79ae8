"""Benchmark: what the loader process and its walls add to a command that loads an untrusted model.

Each figure is the median (with min-max) of ``--repeats`` runs:

* ``walls``: each wall taken in a fresh process, timed inside it: the namespaces
  (``unshare`` + id maps + private ``/dev/shm`` + the fork into the PID namespace + a fresh
  ``/proc``), the seccomp filter, the limits, the Landlock rules ``fwx inspect`` uses;
* ``python_start``: the interpreter's own start, for scale;
* ``inspect``: ``fwx inspect tiny.onnx`` end to end, the default (the ``fwx`` process starts the
  loader, which takes every wall) against ``--no-sandbox`` (one process, no wall): the difference
  is the whole cost of the loader process.

Prints a table and writes benchmarks/results/loader.json (date, commit, machine: _provenance.py).
    python benchmarks/loader.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._provenance import publish, shown, spread, timed_run  # noqa: E402

#: Runs in a fresh process: times each wall as the loader takes it, prints them as JSON (from PID 1).
WALLS = """
import json, time
from pathlib import Path
t = {}
t0 = time.perf_counter()
from fwx.safety import landlock, limits, namespaces, sandbox, seccomp
t["import fwx.safety"] = time.perf_counter() - t0
t0 = time.perf_counter()
iso = namespaces.isolate(64 << 20)
t["namespaces"] = time.perf_counter() - t0
t0 = time.perf_counter()
seccomp.refuse_sockets()
t["seccomp"] = time.perf_counter() - t0
t0 = time.perf_counter()
limits.apply(limits.defaults())
t["limits"] = time.perf_counter() - t0
t0 = time.perf_counter()
landlock.restrict(sandbox.rules(sandbox.Policy(read=(Path({model!r}),), shm=iso.shm), sandbox.scratch_dir()))
t["landlock"] = time.perf_counter() - t0
t["isolated"] = iso.network and iso.proc
print(json.dumps(t))
"""


def tiny_onnx(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Mul", ["x", "s"], ["y"])
    s = helper.make_tensor("s", TensorProto.FLOAT, [1], [2.0])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])
    graph = helper.make_graph([node], "g", [x], [y], [s])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def bench(repeats: int, work: Path) -> dict[str, Any]:
    model = tiny_onnx(work / "tiny.onnx")
    steps: dict[str, list[float]] = {}
    isolated = True
    for _ in range(repeats):
        out = subprocess.check_output(
            [sys.executable, "-c", WALLS.replace("{model!r}", repr(str(model)))], cwd=ROOT, text=True
        )
        got = json.loads(out.strip().splitlines()[-1])
        isolated = isolated and bool(got.pop("isolated"))
        for key, value in got.items():
            steps.setdefault(key, []).append(value)
    fwx = [sys.executable, "-m", "fwx", "inspect", str(model)]
    walled, bare = [], []
    for _ in range(repeats):  # interleaved: a shared machine's load drifts between runs, not within a pair
        walled.append(timed_run(fwx))
        bare.append(timed_run([*fwx, "--no-sandbox"]))
    return {
        "runs": repeats,
        "namespaces_up": isolated,
        "walls_s": {k: spread(v, 4) for k, v in steps.items()},
        "walls_total_s": spread(
            [sum(v[i] for k, v in steps.items() if k != "import fwx.safety") for i in range(repeats)], 4
        ),
        "python_start_s": spread([timed_run([sys.executable, "-c", "pass"]) for _ in range(repeats)]),
        "inspect_default_s": spread(walled),
        "inspect_no_sandbox_s": spread(bare),
        "loader_added_s": round(statistics.median(walled) - statistics.median(bare), 3),
    }


def table(res: dict[str, Any]) -> str:
    lines = [f"{'step':<34} {'seconds, median (min-max)':>28}"]
    for key, s in res["walls_s"].items():
        lines.append(f"{('wall: ' if key != 'import fwx.safety' else '') + key:<34} {shown(s, 4):>28}")
    lines.append(f"{'walls, all together (no import)':<34} {shown(res['walls_total_s'], 4):>28}")
    lines.append(f"{'python start (for scale)':<34} {shown(res['python_start_s']):>28}")
    lines.append(f"{'fwx inspect tiny.onnx (loader)':<34} {shown(res['inspect_default_s']):>28}")
    lines.append(f"{'fwx inspect --no-sandbox':<34} {shown(res['inspect_no_sandbox_s']):>28}")
    lines.append(f"{'the loader process adds':<34} {res['loader_added_s']:>+28.3f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "loader.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        res = bench(max(5, args.repeats), Path(tmp))
    publish(res, table(res), Path(args.out))


if __name__ == "__main__":
    main()
