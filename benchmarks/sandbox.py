"""Benchmark: what the private snapshot and the Landlock sandbox add to loading a model.

Three figures, each the median (with min-max) of ``--repeats`` runs:

* ``snapshot``: copying a model into a private folder (``fwx.safety.snapshot.take``), per size;
* ``scan``: the allow-list check of the same file (``fwx.safety.check_model``), which ``--trust-model-code``
  also skips, so the end-to-end difference below is snapshot + scan + sandbox;
* ``restrict``: applying the Landlock rules in a fresh process (``fwx.safety.landlock.restrict``
  with the rules ``fwx export`` uses), against the interpreter start it follows;
* ``validate``: ``fwx validate m.onnx m.onnx`` end to end in a fresh process, the default
  (snapshot + scanners + sandbox) against ``--trust-model-code`` (none of the three), per size.

Prints a table and writes benchmarks/results/sandbox.json (date, commit, machine: _provenance.py).
    python benchmarks/sandbox.py [--repeats 5] [--sizes-mb 1,64,256]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._provenance import publish, shown, spread, timed_run  # noqa: E402

RESTRICT = """
import time
t0 = time.perf_counter()
from pathlib import Path
from fwx.safety import sandbox, landlock
landlock.restrict(sandbox.rules(sandbox.Policy(read=(Path({model!r}),)), sandbox.scratch_dir()))
print(time.perf_counter() - t0)
"""


def onnx_model(path: Path, mb: int) -> Path:
    """A MatMul whose weight is ``mb`` MiB, so copying and loading scale with the size."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n = max(4, int((mb * 2**20 / 4) ** 0.5))
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n, n), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def bench(sizes: list[int], repeats: int, work: Path) -> dict[str, Any]:
    from fwx.formats import Format
    from fwx.safety import check_model, snapshot

    out: dict[str, Any] = {"sizes_mb": sizes, "runs": repeats, "rows": []}
    restrict = [float(subprocess.check_output([sys.executable, "-c", RESTRICT.format(model=str(work))], cwd=ROOT))]
    restrict += [
        float(subprocess.check_output([sys.executable, "-c", RESTRICT.format(model=str(work))], cwd=ROOT))
        for _ in range(repeats - 1)
    ]
    out["restrict_s"] = spread(restrict, 5)
    out["python_start_s"] = spread([timed_run([sys.executable, "-c", "pass"]) for _ in range(repeats)])
    fwx = [sys.executable, "-m", "fwx", "validate"]
    for mb in sizes:
        model = onnx_model(work / f"m{mb}.onnx", mb)
        copies, scans = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            snap = snapshot.take(model)
            copies.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            check_model(Format.ONNX, snap.path, trust=False)
            scans.append(time.perf_counter() - t0)
            snap.discard()
        guarded = [timed_run([*fwx, str(model), str(model), "--samples", "1"]) for _ in range(repeats)]
        trusted = [
            timed_run([*fwx, str(model), str(model), "--samples", "1", "--trust-model-code"]) for _ in range(repeats)
        ]
        out["rows"].append(
            {
                "size_mb": mb,
                "snapshot_s": spread(copies),
                "scan_s": spread(scans),
                "validate_default_s": spread(guarded),
                "validate_trusted_s": spread(trusted),
                "added_s": round(statistics.median(guarded) - statistics.median(trusted), 3),
            }
        )
    return out


def table(res: dict[str, Any]) -> str:
    lines = [
        f"landlock restrict in a fresh process: {shown(res['restrict_s'])} s; python start: {shown(res['python_start_s'])} s",
        f"{'size MiB':>8}  {'snapshot s':>20}  {'scan s':>20}  {'validate default s':>20}  "
        f"{'validate trusted s':>20}  added s",
    ]
    for r in res["rows"]:
        lines.append(
            f"{r['size_mb']:>8}  {shown(r['snapshot_s']):>20}  {shown(r['scan_s']):>20}  {shown(r['validate_default_s']):>20}  "
            f"{shown(r['validate_trusted_s']):>20}  {r['added_s']:+.3f}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes-mb", default="1,64,256")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sandbox.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        res = bench([int(s) for s in args.sizes_mb.split(",")], args.repeats, Path(tmp))
    publish(res, table(res), Path(args.out))


if __name__ == "__main__":
    main()
