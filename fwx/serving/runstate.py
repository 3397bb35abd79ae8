"""The files a supervisor and its worker processes share (``fwx serve --workers N``).

One run directory per supervisor, created by it and removed when it exits:

``board``           a memory-mapped byte array: [0] = "every worker ready" (written by the
                    supervisor only), [1 + i] = worker i's own readiness (written by worker i)
``loading-<i>``     the artifact worker i is loading right now (JSON: key, what, since)
``quarantine.json`` artifacts that killed a worker while loading: key -> reason
``probed/``         artifacts a worker already probed safely (shared probe verdicts)
``metrics/``        each worker's Prometheus snapshot; ``dead-<pid>.prom`` keeps the
                    counters of a worker that died so totals never go backwards

Files, not pipes: a worker that crashes mid-write leaves at worst a stale byte
the supervisor overwrites, and a restarted worker finds the same state by path.
Every write that others read is atomic (write a temp file, then rename).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import time
from pathlib import Path
from typing import Any

from fwx.formats import Format
from fwx.machine import write_atomic

BOARD = "board"
QUARANTINE = "quarantine.json"


def artifact_key(fmt: Format, path: Path) -> str:
    """Names one artifact on disk: format, real path, size and mtime (a re-published file is a new key)."""
    real = Path(os.path.realpath(path))
    try:
        st = real.stat()
        stamp = f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        stamp = "missing"
    return f"{fmt.value}:{real}:{stamp}"


class RunState:
    """The shared run directory, opened by the supervisor (``create``) or a worker (``open``)."""

    def __init__(self, root: Path, workers: int) -> None:
        self.root = Path(root)
        self.workers = workers
        self._fd = os.open(self.root / BOARD, os.O_RDWR)
        self._board = mmap.mmap(self._fd, 1 + workers)
        self._quarantine: dict[str, str] = {}
        self._quarantine_mtime = -1

    @classmethod
    def create(cls, root: Path, workers: int) -> RunState:
        root = Path(root)
        (root / "probed").mkdir(parents=True, exist_ok=True)
        (root / "metrics").mkdir(exist_ok=True)
        (root / BOARD).write_bytes(bytes(1 + workers))
        write_atomic(root / QUARANTINE, b"{}")
        return cls(root, workers)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._board.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)

    # ------------------------------------------------------------- readiness board
    def all_ready(self) -> bool:
        return self._board[0] == 1

    def set_all_ready(self, ready: bool) -> None:
        self._board[0] = 1 if ready else 0

    def worker_ready(self, slot: int) -> bool:
        return self._board[1 + slot] == 1

    def set_worker_ready(self, slot: int, ready: bool) -> None:
        self._board[1 + slot] = 1 if ready else 0

    # --------------------------------------------------------- loads and quarantine
    def loading_path(self, slot: int) -> Path:
        return self.root / f"loading-{slot}"

    def begin_load(self, slot: int, key: str, what: str) -> None:
        write_atomic(self.loading_path(slot), json.dumps({"key": key, "what": what, "since": time.time()}).encode())

    def end_load(self, slot: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.loading_path(slot).unlink()

    def current_load(self, slot: int) -> dict[str, Any] | None:
        """What worker ``slot`` was loading (read by the supervisor when it dies or hangs)."""
        try:
            doc = json.loads(self.loading_path(slot).read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) and "key" in doc else None

    def quarantine(self, key: str, reason: str) -> None:
        """Supervisor only: never load ``key`` again in this run."""
        current = self._read_quarantine(force=True)
        current[key] = reason
        write_atomic(self.root / QUARANTINE, json.dumps(current, indent=1).encode())

    def quarantined(self, key: str) -> str | None:
        return self._read_quarantine().get(key)

    def _read_quarantine(self, *, force: bool = False) -> dict[str, str]:
        path = self.root / QUARANTINE
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return {}
        if force or mtime != self._quarantine_mtime:
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                doc = {}
            self._quarantine = {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}
            self._quarantine_mtime = mtime
        return dict(self._quarantine)

    # -------------------------------------------------------------- probe verdicts
    def _probe_path(self, key: str) -> Path:
        return self.root / "probed" / hashlib.sha256(key.encode()).hexdigest()[:32]

    def probed(self, key: str) -> bool:
        return self._probe_path(key).exists()

    def mark_probed(self, key: str) -> None:
        self._probe_path(key).touch()

    # --------------------------------------------------------------------- metrics
    def metrics_path(self, slot: int) -> Path:
        return self.root / "metrics" / f"worker-{slot}.prom"

    def write_metrics(self, slot: int, text: bytes) -> None:
        write_atomic(self.metrics_path(slot), text)

    def retire_metrics(self, slot: int, pid: int) -> None:
        """Supervisor: keep a dead worker's counters (renamed), so aggregated totals never drop."""
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.metrics_path(slot), self.root / "metrics" / f"dead-{pid}.prom")

    def other_metrics(self, slot: int) -> list[tuple[bytes, bool]]:
        """(text, alive) of every snapshot but worker ``slot``'s own."""
        out: list[tuple[bytes, bool]] = []
        own = self.metrics_path(slot).name
        for path in sorted((self.root / "metrics").glob("*.prom")):
            if path.name == own:
                continue
            with contextlib.suppress(OSError):
                out.append((path.read_bytes(), not path.name.startswith("dead-")))
        return out
