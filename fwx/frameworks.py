"""Importing frameworks quietly, and keeping their chatter off the user's terminal.

TensorFlow, tf2onnx, LiteRT and the torch ONNX exporter log to stdout/stderr at
import and conversion time. ``fwx export --json`` must put exactly one JSON
document on stdout, and ``fwx export``/``fwx validate``/``fwx serve`` should show
fwx's steps, not framework banners, so every framework call runs inside
``quiet()`` (Python level) and, where C++ writes to fd 2, ``silence_stderr_fd()``
unless ``--debug``. Shared by the exporter, the converters, the runtimes and
``fwx.quantize``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import io
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from types import ModuleType

from fwx import ui
from fwx.errors import MissingDependencyError

#: import name -> (pip distribution, fwx extra)
EXTRAS: dict[str, tuple[str, str]] = {
    "torch": ("torch", "torch"),
    "tensorflow": ("tensorflow", "tf"),
    "keras": ("keras", "tf"),
    "tf2onnx": ("tf2onnx", "tf"),
    "onnx": ("onnx", "onnx"),
    "onnxruntime": ("onnxruntime", "onnx"),
    "onnxscript": ("onnxscript", "onnx"),
    "ai_edge_litert": ("ai-edge-litert", "tflite"),
    "h5py": ("h5py", "tf"),
}

_NOISY_LOGGERS = (
    "tensorflow",
    "tf2onnx",
    "absl",
    "torch.onnx",
    "torch.export",
    "torch._dynamo",
    "onnxscript",
    "keras",
    "h5py",
)


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise ``MissingDependencyError`` naming the fwx extra that installs it."""
    if module in ("tensorflow", "keras", "tf2onnx"):
        _prepare_tf_env()
    dist, extra = EXTRAS.get(module.split(".")[0], (module, "all"))
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise MissingDependencyError(dist, extra, purpose)
    mod = sys.modules.get(module)
    # A module another thread is still importing sits in sys.modules half-initialised (the server
    # loads two models at once); only a finished one may skip the import lock.
    if mod is not None and not getattr(getattr(mod, "__spec__", None), "_initializing", False):
        return mod
    with _IMPORT_LOCK, quiet(), silence_stderr_fd(module.split(".")[0] in ("tensorflow", "keras", "tf2onnx")):
        mod = importlib.import_module(module)
    return mod


# One framework import at a time: two threads importing onnx and onnxruntime (which imports onnx)
# can trip the import system's deadlock detection and get a partially initialised module.
_IMPORT_LOCK = threading.RLock()


_FD_LOCK = threading.Lock()
_saved_fds: dict[int, tuple[int, int]] = {}  # fd -> (depth, saved copy of the real fd)


@contextlib.contextmanager
def silence_stderr_fd(active: bool = True, *, stdout: bool = False) -> Iterator[None]:
    """Hide fd 2 (and fd 1 with ``stdout``) from C++ writers unless ``--debug``.

    TF's import-time logs bypass ``TF_CPP_MIN_LOG_LEVEL`` (absl, before
    InitializeLog), LiteRT prints its XNNPACK banner from C++, MLIR dumps whole
    modules, and torch's ONNX exporter prints "Torch IR graph" screens to fd 1
    (which would break ``--json``). The fds are process-wide, so nested or
    concurrent users (a server loading two models in threads) share one
    redirection: the first one in saves the real fd, the last one out restores it.
    """
    fds = [2, 1] if stdout else [2]
    if not active or ui.state.debug:
        yield
        return
    entered = [fd for fd in fds if _fd_enter(fd)]
    try:
        yield
    finally:
        for fd in reversed(entered):
            _fd_exit(fd)


def _fd_enter(fd: int) -> bool:
    with _FD_LOCK:
        depth, saved = _saved_fds.get(fd, (0, -1))
        if depth == 0:
            try:
                (sys.stderr if fd == 2 else sys.stdout).flush()
                saved = os.dup(fd)
            except (OSError, ValueError, AttributeError):
                return False
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, fd)
            finally:
                os.close(devnull)
        _saved_fds[fd] = (depth + 1, saved)
        return True


def _fd_exit(fd: int) -> None:
    with _FD_LOCK:
        depth, saved = _saved_fds[fd]
        if depth > 1:
            _saved_fds[fd] = (depth - 1, saved)
            return
        del _saved_fds[fd]
        os.dup2(saved, fd)
        os.close(saved)


def _prepare_tf_env() -> None:
    """TF reads these at import: set them first so the CLI stays clean (``--debug`` shows everything)."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if not ui.state.debug:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    """Swallow Python-level prints, warnings and framework logs (kept in the yielded buffer).

    Under ``--debug`` nothing is hidden. Output written by C++ straight to the
    file descriptors is not caught here; the env vars in ``_prepare_tf_env``
    handle TensorFlow's.
    """
    buf = io.StringIO()
    if ui.state.debug:
        yield buf
        return
    levels = {name: logging.getLogger(name).level for name in _NOISY_LOGGERS}
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            warnings.simplefilter("ignore")
            yield buf
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
