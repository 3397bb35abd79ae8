"""The prefetch process: runs the conversion hops the exporter hands it, one job at a time.

Started by ``fwx.exporter.prefetch`` as ``python -I`` (isolated: the exporter passes its ``sys.path``).
Each line on stdin is one job (JSON): a chain of hops, the first reading
``input``, each next one the file the previous one wrote. Before hop ``i`` it
creates ``started-i``; after it, ``hop-i.json`` holds the result or the error
(written atomically). A crash (the TFLite converter can abort) leaves
``started-i`` without ``hop-i.json``: the exporter reports that hop as crashed.
End of stdin (the exporter closed it, or died) ends this process at once, even
mid-conversion. Ctrl-C is left to the exporter, which kills this process.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fwx.converters.base import EdgeEntry, edge_class
from fwx.exporter.hopjob import (
    error_json,
    hop_options,
    next_source,
    options_from_json,
    result_json,
    source_from_json,
    write_json,
)
from fwx.formats import Format
from fwx.frameworks import require


def _read_jobs(jobs: queue.Queue[dict[str, Any]]) -> None:
    for line in sys.stdin.buffer:
        if line.strip():
            jobs.put(json.loads(line))
    os._exit(0)  # the exporter is gone or done: nothing here is worth finishing


def _samples(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def run_job(job: dict[str, Any]) -> None:
    folder = Path(job["dir"])
    opts = options_from_json(job["options"])
    src = source_from_json(job["input"], _samples(job.get("samples")))
    for i, hop in enumerate(job["hops"]):
        entry = EdgeEntry(Format(hop["source"]), Format(hop["target"]), hop["module"], hop["cls"])
        (folder / f"started-{i}").touch()
        hop_opts = hop_options(opts, chained=i > 0 or job["chained"], quantize=False)
        out = Path(hop["out"])
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            cls = edge_class(entry)
            cls.check_available()
            for module, _ in cls.requires:  # imported before the clock starts: in-process they are loaded already
                require(module, f"converting {entry.source} to {entry.target}")
            t0 = time.perf_counter()
            converter = cls()
            converter.precheck(src, hop_opts)
            result = converter.convert(src, out, hop_opts)
            answer = {"ok": True, "result": result_json(result), "seconds": time.perf_counter() - t0}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the exporter as data
            write_json(folder / f"hop-{i}.json", {"ok": False, "error": error_json(exc)})
            return
        try:
            write_json(folder / f"hop-{i}.json", answer)
        except (TypeError, ValueError) as exc:  # a result that cannot travel: the exporter converts it itself
            write_json(folder / f"hop-{i}.json", {"ok": False, "fallback": str(exc)})
            return
        src = next_source(entry, result, sample_inputs=src.sample_inputs, other_sizes=src.other_sizes)


def _die_with(parent: int) -> None:
    """Linux: the kernel kills this process when the exporter dies, even mid-conversion holding the GIL."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(0)


def main(parent: int) -> None:
    _die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    jobs: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=_read_jobs, args=(jobs,), daemon=True).start()
    while True:
        run_job(jobs.get())


if __name__ == "__main__":
    main(int(sys.argv[1]))
