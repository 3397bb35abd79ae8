"""Test only: a worker wedged in one C call that holds the GIL while it loads a model, as a hostile file's
parser loop would be: ``FWX_TEST_WEDGE=N`` makes ``fwx.runtimes.base.load_runtime`` say so on stderr, then
compute ``N ** (N ** N)`` (minutes in one C call: no Python signal handler runs meanwhile, so the worker
ignores SIGTERM). Installed at the module's first import, as crash_hook/ is.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import Any

BASE = os.environ.get("FWX_TEST_WEDGE")


class _Wrap(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "fwx.runtimes.base":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)

            def load_runtime(*args: Any, **kwargs: Any) -> Any:
                n = int(BASE or 0)
                print(f"fwx-test: worker {os.getpid()} wedged", file=sys.stderr, flush=True)
                return n ** (n**n)

            module.load_runtime = load_runtime

        spec.loader.exec_module = exec_module
        return spec


if BASE:
    sys.meta_path.insert(0, _Wrap())
