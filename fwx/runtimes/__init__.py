"""One runtime per format, shared by the validators and the server."""

from __future__ import annotations

from fwx.runtimes.base import Runtime, available_runtimes, load_runtime, runtime_class

__all__ = ["Runtime", "available_runtimes", "load_runtime", "runtime_class"]
