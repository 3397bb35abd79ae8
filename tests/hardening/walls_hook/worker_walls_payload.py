"""Test only: code inside ``fwx serve``'s worker 0, once its walls are up, tries each way out.

It starts where model code would run (a thread started when the worker sets up
its logging, right after its walls and before it loads a model), tries each
attempt of ``FWX_TEST_WALLS_CFG`` and prints one ``FWX-WALLS-WORKER {json}``
line on stderr: per attempt ``DONE ...`` or ``refused <errno or error>``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

PREFIX = "FWX-WALLS-WORKER "


def attacks(cfg: dict[str, Any], supervisor: int) -> None:
    out: dict[str, Any] = {"pid": os.getpid(), "ppid": os.getppid()}

    def attempt(name: str, act: Callable[[], Any]) -> None:
        try:
            got = act()
            out[name] = "DONE " + (got if isinstance(got, str) else repr(got))[:200]
        except OSError as exc:
            out[name] = f"refused {exc.errno}"
        except MemoryError:
            out[name] = "refused MemoryError"

    def read(path: str) -> str:
        with open(path, "rb") as fh:  # noqa: PTH123 - the plain open(2) a payload would use
            return fh.read().decode(errors="replace")

    def write(path: str) -> str:
        with open(path, "w") as fh:  # noqa: PTH123
            fh.write("pwned")
        return ""

    def udp() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"leak", ("127.0.0.1", cfg["udp"]))

    def tcp() -> None:
        with socket.create_connection(("127.0.0.1", cfg["tcp"]), timeout=5) as s:
            s.sendall(b"leak")

    def unix() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(cfg["unix"])
            s.sendall(b"leak")

    attempt("read_home", lambda: read(cfg["home_secret"]))
    attempt("read_parent_environ", lambda: read(f"/proc/{os.getppid()}/environ"))
    attempt("read_supervisor_environ", lambda: read(f"/proc/{supervisor}/environ"))
    attempt("write_home", lambda: write(cfg["home_write"]))
    attempt("write_shm", lambda: write(cfg["shm_write"]))
    attempt("udp", udp)
    attempt("tcp", tcp)
    attempt("unix", unix)
    if cfg.get("allocate", True):
        attempt("allocate", lambda: len(bytearray(10 * 10**9)))  # 10 GB
    out["self_environ"] = read("/proc/self/environ")
    out["environ"] = dict(os.environ)
    print(PREFIX + json.dumps(out), file=sys.stderr, flush=True)


def install() -> None:
    """Start the attacks in worker 0 when it sets up its logging (after its walls)."""
    cfg = json.loads(os.environ["FWX_TEST_WALLS_CFG"])
    import fwx.serving.logs as logs
    import fwx.serving.spawn as spawn

    setup_real, read_job_real = logs.setup_logging, spawn.read_job
    seen: dict[str, int] = {}

    def read_job() -> Any:
        job = read_job_real()
        if job is not None:
            seen["supervisor"] = job.supervisor_pid
        return job

    def setup_logging(level: str, tag: str = "", **kw: Any) -> Any:
        done = setup_real(level, tag, **kw)
        if tag == "w0" and "supervisor" in seen:
            threading.Thread(target=attacks, args=(cfg, seen["supervisor"]), daemon=True).start()
        return done

    logs.setup_logging = setup_logging
    spawn.read_job = read_job
