"""Keep frameworks' chatter off the terminal unless ``--debug``: the one place that does it.

Two entry points, one set of rules (the environment switches, the noisy loggers,
the C++ log-line pattern are defined here once):

* ``quiet(native=..., python=..., stdout=...)`` wraps a framework call: Python
  prints, warnings and framework logs go to the yielded buffer, and with
  ``native`` what C++ writes straight to fd 2 (fd 1 too with ``stdout``) goes
  to /dev/null. Every framework call in fwx goes through it.
* ``install(debug)`` is the CLI's process-wide setup: the switches frameworks
  read when they load, plus a filter on fd 2 for lines written outside any
  ``quiet()`` block (gRPC's ``add_port.cc`` on a busy port, TF's threads).

TensorFlow and JAX log via absl before any of their Python runs, so
``TF_CPP_MIN_LOG_LEVEL`` alone no longer reaches every line.

The fd 2 filter: TensorFlow 2.21 (absl), gRPC's core and XLA write straight to
file descriptor 2 before any Python code could configure them ("failed call to cuInit", oneDNN
notices, "add_port.cc ... Failed to add port"); ``TF_CPP_MIN_LOG_LEVEL`` no
longer reaches the lines logged before ``absl::InitializeLog``. So the CLI
points fd 2 at a pipe and forwards every line except those C++ log lines,
while Python's ``sys.stderr`` (fwx's messages, progress, tracebacks) keeps the
real terminal, so TTY detection and colours still work.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterator

from fwx import ui

#: glog/absl line prefix (I/W/E, never F: a fatal line explains a crash), absl's pre-init notice,
#: and the continuation line of TensorFlow's CPU-feature notice.
NOISE = re.compile(
    rb"^(?:[IWE]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w./-]+:\d+\] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|To enable the following instructions: .* rebuild TensorFlow)"
)

_installed = False


#: Framework log switches, read when each library loads (so set before any of them is imported):
#: TensorFlow's C++ log (oneDNN notices, "failed call to cuInit"), absl/glog, gRPC's C++ core
#: ("add_port.cc ... Failed to add port" on a busy port). The user's own settings win.
QUIET_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "GLOG_minloglevel": "3",
    "GRPC_VERBOSITY": "NONE",
    "TF_ENABLE_ONEDNN_OPTS": "0",
}

#: Python loggers of the frameworks: held at ERROR inside ``quiet()`` and after ``install``.
NOISY_LOGGERS = (
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


def set_environment() -> None:
    """Set the switches frameworks read at import (the user's own settings win); a no-op under ``--debug``.

    Child processes (the server's trial loads, export helpers) inherit them, so they stay quiet too.
    """
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if ui.state.debug:
        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)


def install(debug: bool, *, filter_fd: bool = True) -> None:
    """The CLI's process-wide setup: environment switches, warning filters, loggers, and the fd 2 filter.

    ``filter_fd`` is false for in-process callers (tests), which keep their own stderr.
    """
    if debug:
        return
    set_environment()
    for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    if filter_fd:
        _filter_native_stderr()


@contextlib.contextmanager
def quiet(*, native: bool = False, python: bool = True, stdout: bool = False) -> Iterator[io.StringIO]:
    """Hide a framework call's output unless ``--debug``; what Python printed is kept in the yielded buffer.

    ``python``: prints, warnings and the noisy loggers (process-global: not for calls that run
    concurrently with other output, such as a server's inference threads; pass ``python=False``).
    ``native``: fd 2 (and fd 1 with ``stdout``) to /dev/null, for C++ writers: TF's import-time
    absl lines, LiteRT's XNNPACK banner, MLIR dumps, torch's ONNX exporter's "Torch IR graph"
    screens on fd 1 (which would break ``--json``).
    """
    buf = io.StringIO()
    if ui.state.debug:
        yield buf
        return
    with contextlib.ExitStack() as stack:
        if native:
            stack.enter_context(_devnull_fds([2, 1] if stdout else [2]))
        if python:
            stack.enter_context(_python_capture(buf))
        yield buf


@contextlib.contextmanager
def _python_capture(buf: io.StringIO) -> Iterator[None]:
    levels = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


# The fds are process-wide, so nested or concurrent users (a server loading two models in threads)
# share one redirection: the first one in saves the real fd, the last one out restores it.
_FD_LOCK = threading.Lock()
_saved_fds: dict[int, tuple[int, int]] = {}  # fd -> (depth, saved copy of the real fd)


@contextlib.contextmanager
def _devnull_fds(fds: list[int]) -> Iterator[None]:
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


def _pump(read_fd: int, out_fd: int) -> None:
    with os.fdopen(read_fd, "rb", buffering=0) as src:
        pending = b""
        while chunk := src.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            keep = b"".join(line + b"\n" for line in lines if not NOISE.match(line))
            if keep:
                os.write(out_fd, keep)
        if pending and not NOISE.match(pending):
            os.write(out_fd, pending)


def _filter_native_stderr() -> None:
    """Route fd 2 through the noise filter for the rest of this process (idempotent)."""
    global _installed
    if _installed:
        return
    try:
        sys.stderr.flush()
        real = os.dup(2)
        read_fd, write_fd = os.pipe()
    except OSError:
        return  # no usable fd 2: nothing to filter
    os.dup2(write_fd, 2)
    os.close(write_fd)
    sys.stderr = io.TextIOWrapper(
        os.fdopen(os.dup(real), "wb", buffering=0),
        encoding=sys.stderr.encoding or "utf-8",
        errors="backslashreplace",
        line_buffering=True,
        write_through=True,
    )
    pump = threading.Thread(target=_pump, args=(read_fd, real), name="fwx-stderr-filter", daemon=True)
    pump.start()
    _installed = True

    def restore() -> None:
        # closing our end of the pipe lets the pump drain what is left, then stop
        try:
            os.dup2(real, 2)
        except OSError:
            return
        pump.join(timeout=1.0)

    atexit.register(restore)
