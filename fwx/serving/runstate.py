"""The files a supervisor and its worker processes share (``fwx serve --workers N``).

A worker is untrusted: code that got into one (a scanner miss, a model served
with ``--trust-model-code``) must not reach its peers or the supervisor through
these files. So each worker may write one folder of its own and nothing else
(its Landlock grant), every record it writes is read as untrusted input (one
schema, a size cap, ``O_NOFOLLOW``, a bad record logged and ignored), and the
decisions that matter are the supervisor's (``fwx.serving.supervisor``):

``board``            1 byte, "every worker ready": written by the supervisor only
``quarantine.json``  ``{artifact key: reason}``: artifacts that killed a worker while loading
                     AND a trial the supervisor ran itself (``fwx.serving.crash_check``)
``dead/<pid>.prom``  a dead worker's last metrics, copied by the supervisor so totals never drop
``w<i>/``            worker i's own folder, the only place it may write; the supervisor
                     empties it whenever worker i dies, so a new worker finds nothing its
                     predecessor left:
    ``ready``        1 byte, this worker's own readiness
    ``loading``      ``{"key": ..., "seq": n}``: the artifact it is loading right now
    ``metrics.prom`` its Prometheus snapshot

The supervisor times a load by its own clock (when it first saw the mark), not
by a time the worker wrote, and derives the quarantine reason from the key,
which must name a file inside the repository. Probe verdicts are not shared:
a verdict written by one worker would let it wave a hostile version past its
peers' probes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from fwx.formats import Format
from fwx.machine import write_atomic

log = logging.getLogger("fwx.serving")

BOARD = "board"
QUARANTINE = "quarantine.json"
DEAD = "dead"
#: Caps on what is read from a worker's folder: a worker may fill its own folder, not our memory.
MARK_MAX_BYTES = 4096
METRICS_MAX_BYTES = 8 * 2**20


def artifact_key(fmt: Format, path: Path) -> str:
    """Names one artifact on disk: format, real path, size and mtime (a re-published file is a new key)."""
    real = Path(os.path.realpath(path))
    try:
        st = real.stat()
        stamp = f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        stamp = "missing"
    return f"{fmt.value}:{real}:{stamp}"


def describe_key(key: str, repository: Path) -> str | None:
    """``lin v2 model.onnx (onnx)`` for a key naming an artifact inside ``repository``; None for anything else."""
    fmt, _, rest = key.partition(":")
    path_text = rest.rsplit(":", 2)[0] if rest.count(":") >= 2 else rest
    if fmt not in {f.value for f in Format} or not path_text.startswith("/"):
        return None
    if not key.isprintable() or len(key) > MARK_MAX_BYTES:
        return None
    root = os.path.realpath(repository).rstrip(os.sep) + os.sep
    path = Path(os.path.normpath(path_text))
    if not str(path).startswith(root):
        return None
    version = path.parent
    return f"{version.parent.name} v{version.name} {path.name} ({fmt})"


@dataclass(frozen=True)
class LoadMark:
    """What a worker says it is loading: the one schema of ``w<i>/loading``."""

    key: str
    seq: int

    @classmethod
    def parse(cls, raw: bytes) -> LoadMark:
        """Validated or ValueError (the caller logs and ignores it)."""
        doc = json.loads(raw)
        if not isinstance(doc, dict) or set(doc) != {"key", "seq"}:
            raise ValueError("a loading mark holds exactly 'key' and 'seq'")
        key, seq = doc["key"], doc["seq"]
        if not isinstance(key, str) or not key or len(key) > MARK_MAX_BYTES or not key.isprintable():
            raise ValueError("'key' is not a short printable string")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError("'seq' is not a non-negative integer")
        return cls(key, seq)

    def encode(self) -> bytes:
        return json.dumps({"key": self.key, "seq": self.seq}).encode()


def read_capped(folder: Path, name: str, limit: int) -> bytes | None:
    """A regular file's bytes (symlinks, FIFOs and oversized files refused); None when absent or refused."""
    try:
        fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        return os.read(fd, limit + 1)[:limit]
    except OSError:
        return None
    finally:
        os.close(fd)


class RunState:
    """The run directory, opened by the supervisor (``create``) or a worker (``open``, one slot)."""

    def __init__(self, root: Path, workers: int, slot: int | None = None) -> None:
        self.root = Path(root)
        self.workers = workers
        self.slot = slot  # None: the supervisor's view (or a test's)
        self._board = os.open(self.root / BOARD, (os.O_RDWR if slot is None else os.O_RDONLY) | os.O_CLOEXEC)
        self._own = os.open(self.slot_dir(slot) / "ready", os.O_RDWR | os.O_CLOEXEC) if slot is not None else None
        self._quarantine: dict[str, str] = {}
        self._quarantine_mtime = -1
        self._seq = 0
        self._bad_marks: dict[int, bytes] = {}

    @classmethod
    def create(cls, root: Path, workers: int) -> RunState:
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        (root / DEAD).mkdir(exist_ok=True)
        (root / BOARD).write_bytes(b"\0")
        write_atomic(root / QUARANTINE, b"{}")
        state = cls(root, workers)
        for slot in range(workers):
            state.reset_slot(slot)
        return state

    @classmethod
    def open(cls, root: Path, workers: int, slot: int) -> RunState:
        """A worker's view: its own slot writable, the rest read."""
        return cls(root, workers, slot)

    def close(self) -> None:
        for fd in (self._board, self._own):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def slot_dir(self, slot: int) -> Path:
        return self.slot_dir_of(self.root, slot)

    @staticmethod
    def slot_dir_of(root: Path, slot: int) -> Path:
        return Path(root) / f"w{int(slot)}"

    def reset_slot(self, slot: int) -> None:
        """Supervisor: an empty folder for the next worker in ``slot`` (nothing its predecessor left survives)."""
        folder = self.slot_dir(slot)
        shutil.rmtree(folder, ignore_errors=True)  # never follows the symlinks a worker may have left
        folder.mkdir(mode=0o700)
        (folder / "ready").write_bytes(b"\0")

    # ------------------------------------------------------------- readiness board
    def all_ready(self) -> bool:
        return os.pread(self._board, 1, 0) == b"\1"

    def set_all_ready(self, ready: bool) -> None:
        os.pwrite(self._board, b"\1" if ready else b"\0", 0)

    def worker_ready(self, slot: int) -> bool:
        if slot == self.slot and self._own is not None:
            return os.pread(self._own, 1, 0) == b"\1"
        return read_capped(self.slot_dir(slot), "ready", 1) == b"\1"

    def set_ready(self, ready: bool) -> None:
        """Worker: publish this worker's own readiness."""
        assert self._own is not None, "only a worker's view has a slot"
        os.pwrite(self._own, b"\1" if ready else b"\0", 0)

    # --------------------------------------------------------- loads and quarantine
    def begin_load(self, key: str) -> None:
        """Worker: mark the artifact it starts loading (the supervisor times it from when it sees the mark)."""
        self._seq += 1
        write_atomic(self._own_dir() / "loading", LoadMark(key, self._seq).encode())

    def end_load(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self._own_dir() / "loading").unlink()

    def _own_dir(self) -> Path:
        assert self.slot is not None, "only a worker's view has a slot"
        return self.slot_dir(self.slot)

    def current_load(self, slot: int) -> LoadMark | None:
        """Supervisor: what worker ``slot`` says it is loading; a malformed mark is logged and ignored."""
        raw = read_capped(self.slot_dir(slot), "loading", MARK_MAX_BYTES)
        if raw is None:
            return None
        try:
            return LoadMark.parse(raw)
        except (ValueError, RecursionError) as exc:
            if self._bad_marks.get(slot) != raw:  # once per record, not once per tick
                self._bad_marks[slot] = raw
                log.warning("worker %d wrote a malformed loading mark (%s): ignored", slot, exc)
            return None

    def quarantine(self, key: str, reason: str) -> None:
        """Supervisor only, on its own trial's verdict: no worker loads ``key`` again in this run."""
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

    # --------------------------------------------------------------------- metrics
    def write_metrics(self, text: bytes) -> None:
        write_atomic(self._own_dir() / "metrics.prom", text)

    def metrics_of(self, slot: int) -> bytes | None:
        return read_capped(self.slot_dir(slot), "metrics.prom", METRICS_MAX_BYTES)

    def retire_metrics(self, slot: int, pid: int) -> None:
        """Supervisor: keep a dead worker's counters (a capped copy), so aggregated totals never drop."""
        text = self.metrics_of(slot)
        if text is not None:
            write_atomic(self.root / DEAD / f"{int(pid)}.prom", text)

    def other_metrics(self) -> list[tuple[bytes, bool]]:
        """(text, alive) of every snapshot but this worker's own (the merge skips what it cannot parse)."""
        out: list[tuple[bytes, bool]] = []
        for slot in range(self.workers):
            if slot != self.slot:
                text = self.metrics_of(slot)
                if text is not None:
                    out.append((text, True))
        dead = self.root / DEAD
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(dead)):
                text = read_capped(dead, name, METRICS_MAX_BYTES)
                if name.endswith(".prom") and text is not None:
                    out.append((text, False))
        return out
