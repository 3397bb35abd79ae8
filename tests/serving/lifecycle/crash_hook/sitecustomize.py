"""Test only: a native loader fault that reproduces, in every process that loads an artifact.

``FWX_TEST_CRASH_OVER=N`` makes ``fwx.runtimes.base.load_runtime`` kill its own
process with SIGSEGV for any artifact larger than N bytes, as a parser bug
would: in a worker, and in the supervisor's trial of the artifact alike.
``FWX_TEST_WEDGE=N`` makes it say so on stderr, then compute ``N ** (N ** N)``
instead: minutes in one C call that holds the GIL, as a hostile file's parser
loop would be, so no Python signal handler runs (the process ignores SIGTERM).
The wrap is installed when the module is first imported, so nothing heavy is
imported before a worker's sandbox.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import signal
import sys
from typing import Any

LIMIT = os.environ.get("FWX_TEST_CRASH_OVER")
WEDGE = os.environ.get("FWX_TEST_WEDGE")


class _Wrap(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "fwx.runtimes.base":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            real = module.load_runtime

            def load_runtime(fmt: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
                if WEDGE:
                    n = int(WEDGE)
                    print(f"fwx-test: worker {os.getpid()} wedged", file=sys.stderr, flush=True)
                    return n ** (n**n)
                if os.path.getsize(path) > int(LIMIT or 0):
                    os.kill(os.getpid(), signal.SIGSEGV)
                return real(fmt, path, *args, **kwargs)

            module.load_runtime = load_runtime

        spec.loader.exec_module = exec_module
        return spec


if LIMIT or WEDGE:
    sys.meta_path.insert(0, _Wrap())
