"""Every error from a conversion hop names the hop: ``onnx -> savedmodel (fwx-onnx-tf): ...``.

A user reading one error line for a 3-hop path needs to know which tool
failed. Converters raise ``FwxError`` subclasses with their own message; the
runner prefixes the hop once (cached failures are re-raised as they are), and
turns an unexpected crash inside a hop into an ``ExportError`` the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from fwx import ui
from fwx.converters.base import EdgeEntry, edge_class
from fwx.errors import ExportError, FwxError, first_line


def hop_label(entry: EdgeEntry) -> str:
    return f"{entry.source} -> {entry.target} ({edge_class(entry).tool})"


def named(exc: FwxError, label: str) -> FwxError:
    """``exc`` with ``label: `` in front of its message (only once), type and fields kept."""
    if not exc.message.startswith(f"{label}: "):
        exc.message = f"{label}: {exc.message}"
        exc.args = (exc.message, *exc.args[1:])
    return exc


@contextlib.contextmanager
def naming(label: str) -> Iterator[None]:
    """Prefix errors raised inside with the hop's label; a crash becomes a one-line ``ExportError``."""
    try:
        yield
    except FwxError as exc:
        named(exc, label)
        raise
    except Exception as exc:
        if ui.state.debug:
            raise
        raise ExportError(f"{label}: failed: {first_line(exc)}", hint="rerun with --debug for the traceback") from exc
