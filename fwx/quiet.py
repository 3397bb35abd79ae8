"""Keep frameworks' chatter off the terminal unless ``--debug``.

``quiet_frameworks`` sets the switches frameworks read when they load (log
levels, warning filters); ``filter_native_stderr`` catches what they print anyway.

TensorFlow 2.21 (absl), gRPC's core and XLA write straight to file descriptor 2
before any Python code could configure them ("failed call to cuInit", oneDNN
notices, "add_port.cc ... Failed to add port"); ``TF_CPP_MIN_LOG_LEVEL`` no
longer reaches the lines logged before ``absl::InitializeLog``. So the CLI
points fd 2 at a pipe and forwards every line except those C++ log lines,
while Python's ``sys.stderr`` (fwx's messages, progress, tracebacks) keeps the
real terminal, so TTY detection and colours still work.
"""

from __future__ import annotations

import atexit
import io
import logging
import os
import re
import sys
import threading
import warnings

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
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "GLOG_minloglevel": "3", "GRPC_VERBOSITY": "NONE"}


def quiet_frameworks(debug: bool) -> None:
    """Silence framework chatter on stderr unless ``--debug``; fwx's own messages are unaffected.

    Child processes (the server's trial loads) inherit the environment, so they stay quiet too.
    """
    if debug:
        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category)
    for name in ("absl", "tensorflow", "tf2onnx", "onnxscript", "torch.onnx"):
        logging.getLogger(name).setLevel(logging.ERROR)


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


def filter_native_stderr() -> None:
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
