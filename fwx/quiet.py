"""Keep frameworks' C++ log lines off the terminal unless ``--debug``.

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
import os
import re
import sys
import threading

#: glog/absl line prefix (I/W/E, never F: a fatal line explains a crash), absl's pre-init notice,
#: and the continuation line of TensorFlow's CPU-feature notice.
NOISE = re.compile(
    rb"^(?:[IWE]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w./-]+:\d+\] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|To enable the following instructions: .* rebuild TensorFlow)"
)

_installed = False


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
    sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(real), "wb", buffering=0), encoding=sys.stderr.encoding or "utf-8",
                                  errors="backslashreplace", line_buffering=True, write_through=True)
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
