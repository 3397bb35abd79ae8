"""The one log format of ``fwx serve``, for the supervisor, its workers and uvicorn alike."""

from __future__ import annotations

import logging
import sys

from fwx import ui


def setup_logging(level: str, tag: str = "", *, uvicorn: bool = True) -> None:
    """``HH:MM:SS LEVEL logger[tag]: message`` on stderr; ``tag`` names the process (``supervisor``, ``w0``).

    uvicorn's own lines ("Started server process") repeat fwx's, so they go through the same handler
    and only their warnings show unless ``--debug``.
    """
    name = f"%(name)s[{tag}]" if tag else "%(name)s"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {name}: %(message)s", "%H:%M:%S"))
    root = logging.getLogger("fwx")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    if not uvicorn:
        return
    for logger in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(logger)
        lg.handlers[:] = [handler]
        lg.setLevel(logging.DEBUG if ui.state.debug else max(logging.WARNING, root.level))  # uvicorn.Config resets it
        lg.propagate = False
