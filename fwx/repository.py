"""The on-disk artifact repository: ``<root>/<model>/<version>/`` with atomic publish.

A version folder only ever appears complete: it is assembled in a hidden
``.fwx-tmp-<uuid>`` folder beside it, fsynced, then renamed (same filesystem,
so the rename is atomic) and the parent fsynced. A killed export leaves only a
hidden temp folder, which readers ignore and later exports sweep.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwx.decimal_text import is_digits
from fwx.errors import ExportError, InputError, UsageError
from fwx.manifest import MANIFEST_NAME, Manifest

MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
TMP_PREFIX = ".fwx-tmp-"
STALE_TMP_SECONDS = 3600


_HOST = re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:32] or "host"
_TMP_OWNER_RE = re.compile(re.escape(TMP_PREFIX) + r"([A-Za-z0-9]*)-(\d+)-[0-9a-f]{32}$")


def _owner_alive(tmp_name: str, pattern: re.Pattern[str] = _TMP_OWNER_RE) -> bool:
    """False only when the temp folder names this host and a pid that no longer exists."""
    m = pattern.match(tmp_name)
    if m is None or m.group(1) != _HOST:
        return True  # an old-style name or another host's export: only its age can retire it
    pid = int(m.group(2))
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by another user
    return True


def check_model_name(name: str) -> str:
    if not MODEL_NAME_RE.match(name) or name in (".", "..") or name.startswith(TMP_PREFIX):
        raise UsageError(f"invalid model name {name!r}", hint="use 1-128 letters, digits, '_', '.', '-'")
    return name


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for p in sorted(path.rglob("*"), reverse=True):
        if p.is_file() and not p.is_symlink():
            with p.open("rb") as fh:
                os.fsync(fh.fileno())
        elif p.is_dir():
            _fsync_dir(p)
    _fsync_dir(path)


def model_name_for(source: str | Path, *, factory: bool = False) -> str:
    """The model folder an export of ``source`` goes to without ``--name``: its stem, or a factory's name."""
    text = str(source)
    if factory:
        return text.rpartition(":")[2]
    stem = Path(text.rstrip("/")).name
    for suffix in (".pt2", ".pth", ".pt", ".keras", ".h5", ".onnx", ".tflite", ".savedmodel"):
        if stem.endswith(suffix):
            return stem[: -len(suffix)] or "model"
    return stem or "model"


class Repository:
    """A folder of models, each a folder of integer versions."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        box = Outbox.from_env()
        #: Where new versions are assembled when a sandboxed command's process publishes them (Outbox).
        self.stage = box.stage_of(self.root) if box is not None else None

    def model_dir(self, name: str) -> Path:
        return self.root / check_model_name(name)

    def _write_dir(self, name: str) -> Path:
        return (self.stage or self.root) / check_model_name(name)

    def check_writable(self, name: str | None = None) -> None:
        """Fail fast (usage error) when the repository folder cannot be created or written, before any export work.

        Probes with a temporary folder in the model's folder when it exists (a sandboxed export may write
        only there), else in the nearest existing ancestor, so nothing is left behind.
        """
        import tempfile

        base = self.root.absolute() if self.stage is None else self.stage
        if name is not None and (base / name).is_dir():
            base = base / name
        while not base.exists() and base != base.parent:
            base = base.parent
        try:
            if not base.is_dir():
                raise NotADirectoryError(20, "Not a directory")
            tempfile.TemporaryDirectory(dir=base, prefix=".fwx-probe-").cleanup()
        except OSError as exc:
            raise UsageError(
                f"--out {self.root}: cannot write the artifact repository there ({exc.strerror or exc})",
                hint="choose a writable folder for --out",
            ) from None

    def models(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            p.name
            for p in self.root.iterdir()
            if p.is_dir() and MODEL_NAME_RE.match(p.name) and not p.name.startswith(".")
        )

    def versions(self, name: str) -> list[int]:
        """Complete versions only: numeric folder names (no leading zero) holding a fwx.json."""
        d = self.model_dir(name)
        if not d.is_dir():
            return []
        out = [
            int(p.name)
            for p in d.iterdir()
            if p.is_dir() and re.fullmatch(r"[1-9]\d*", p.name) and (p / MANIFEST_NAME).is_file()
        ]
        return sorted(out)

    def version_dir(self, name: str, version: int) -> Path:
        return self.model_dir(name) / str(int(version))

    def manifest(self, name: str, version: int) -> Manifest:
        return Manifest.read(self.version_dir(name, version))

    def next_version(self, name: str) -> int:
        taken = [
            int(p.name)
            for d in {self.model_dir(name), self._write_dir(name)}
            if d.is_dir()
            for p in d.iterdir()
            if p.is_dir() and is_digits(p.name)
        ]
        return max(taken, default=0) + 1

    def sweep_stale(self, name: str, older_than: float = STALE_TMP_SECONDS) -> list[Path]:
        """Remove temp folders of exports that died: owner pid gone (SIGKILL), or older than ``older_than``."""
        d = self.model_dir(name)
        if not d.is_dir():
            return []
        now = time.time()
        removed: list[Path] = []
        for p in d.iterdir():
            if not p.name.startswith(TMP_PREFIX):
                continue
            try:
                age = now - p.lstat().st_mtime
            except FileNotFoundError:
                continue  # another export swept it first
            if not _owner_alive(p.name) or age > older_than:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
        return removed

    @contextlib.contextmanager
    def staging(self, name: str, version: int | None = None) -> Iterator[Staging]:
        """Yield a temp folder to fill; ``Staging.publish`` renames it into place.

        Leaving the block without publishing (or with an exception) deletes it.
        """
        d = self._write_dir(name)
        d.mkdir(parents=True, exist_ok=True)
        if self.stage is None:
            self.sweep_stale(name)
        if version is not None:
            if version < 1:
                raise UsageError(f"--version must be a positive integer, got {version}")
            if (self.model_dir(name) / str(version)).exists():
                raise InputError(
                    f"{self.model_dir(name) / str(version)} already exists",
                    hint="versions are immutable; omit --version to publish the next one",
                )
        # The owner's host and pid are in the name, so the next export can tell a SIGKILLed one from a live one.
        tmp = d / f"{TMP_PREFIX}{_HOST}-{os.getpid()}-{uuid.uuid4().hex}"
        tmp.mkdir(parents=True)
        st = Staging(self, name, tmp, version)
        try:
            yield st
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
            if st.published is None:
                with contextlib.suppress(OSError):
                    d.rmdir()  # a failed first export leaves no empty model folder (non-empty: kept)


class Staging:
    """A version being assembled. Artifacts go in ``path``; ``publish`` writes fwx.json last."""

    def __init__(self, repo: Repository, name: str, path: Path, version: int | None) -> None:
        self.repo = repo
        self.name = name
        self.path = path
        self.version = version
        self.published: Path | None = None

    def publish(self, manifest: Manifest) -> Path:
        version = self.version or self.repo.next_version(self.name)
        manifest.version = version
        manifest.write(self.path)
        _fsync_tree(self.path)
        final = self.repo._write_dir(self.name) / str(version)
        try:
            # os.rename refuses to replace a non-empty folder, so a racing export
            # that took the same number makes us fail rather than clobber it.
            os.rename(self.path, final)
        except OSError as exc:
            raise ExportError(
                f"cannot publish {final}: {exc}", hint="another export may have taken this version; retry"
            ) from exc
        _fsync_dir(final.parent)
        self.published = self.repo.model_dir(self.name) / str(version)  # where it is (or, staged, will be)
        return self.published


#: The outputs a sandboxed command stages, handed from the command's process to its loader.
OUTBOX_ENV = "FWX_OUTBOX"
STAGE_PREFIX = ".fwx-out-"
_STAGE_OWNER_RE = re.compile(re.escape(STAGE_PREFIX) + r"([A-Za-z0-9]*)-(\d+)-")
_DONE = ".fwx-done"


@dataclass(frozen=True)
class Outbox:
    """Outputs staged by the loader and published by the command's own process, all at once, at the end.

    The loader may write only into private stage folders created beside the outputs (Landlock grants
    those, nothing else); it marks a stage done when the command finished. The command's process, which
    loads nothing, then renames every finished version (``NAME``, ``NAME-encoder``, ``NAME-decoder``: all
    the folders a task writes) and report into place, or nothing at all; the stages are removed either way,
    and so is a folder created only to hold them. A failed or refused command leaves nothing behind.
    """

    repos: tuple[tuple[Path, Path], ...] = ()  # (repository root, its stage)
    files: tuple[tuple[Path, Path], ...] = ()  # (output file, its staged path)
    made: tuple[Path, ...] = ()  # folders created to hold a stage, deepest first

    @classmethod
    def plan(cls, repos: Iterable[Path], files: Iterable[Path]) -> Outbox:
        made: list[Path] = []
        staged: list[Path] = []

        def stage_in(folder: Path) -> Path:
            missing = [p for p in (folder, *folder.parents) if not p.exists()]
            try:
                folder.mkdir(parents=True, exist_ok=True)
                made.extend(p for p in missing if p not in made)
                for old in folder.glob(STAGE_PREFIX + "*"):  # a killed command's stage: its owner is gone
                    if not _owner_alive(old.name, _STAGE_OWNER_RE):
                        shutil.rmtree(old, ignore_errors=True)
                staged.append(Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{_HOST}-{os.getpid()}-", dir=folder)))
                return staged[-1]
            except OSError as exc:
                for stage in staged:
                    shutil.rmtree(stage, ignore_errors=True)
                cls((), (), tuple(made)).discard()
                raise UsageError(
                    f"cannot write {folder}: {exc.strerror or exc}", hint="choose a writable folder for the output"
                ) from None

        r = tuple((Path(p).absolute(), stage_in(Path(p).absolute())) for p in repos)
        f = tuple((Path(p).absolute(), stage_in(Path(p).absolute().parent) / Path(p).name) for p in files)
        return cls(r, f, tuple(made))

    def to_env(self) -> str:
        return json.dumps(
            {"repos": [[str(a), str(b)] for a, b in self.repos], "files": [[str(a), str(b)] for a, b in self.files]}
        )

    @classmethod
    def from_env(cls) -> Outbox | None:
        """The outbox this process stages into (set by the command's process for its loader), if any."""
        raw = os.environ.get(OUTBOX_ENV)
        if not raw:
            return None
        data = json.loads(raw)
        pairs = {k: tuple((Path(a), Path(b)) for a, b in data.get(k, ())) for k in ("repos", "files")}
        return cls(pairs["repos"], pairs["files"])

    def stages(self) -> list[Path]:
        return [s for _, s in self.repos] + [s.parent for _, s in self.files]

    def stage_of(self, root: Path) -> Path | None:
        return next((s for r, s in self.repos if r == Path(root).absolute()), None)

    def staged(self, path: Path) -> Path:
        return next((s for p, s in self.files if p == Path(path).absolute()), Path(path))

    def display(self, text: str) -> str:
        """``text`` with staged paths spelled as where they are published."""
        for real, stage in (*self.repos, *((p.parent, s.parent) for p, s in self.files)):
            text = text.replace(str(stage), str(real))
        return text

    def mark_done(self) -> None:
        """The command finished: what it staged may be published."""
        for stage in self.stages():
            (stage / _DONE).touch()

    def publish(self) -> list[Path]:
        """Rename every finished output into place (all or none); nothing unless the loader marked it done."""
        if not all((s / _DONE).is_file() for s in self.stages()):
            return []
        moves = [*self._versions(), *((s, p) for p, s in self.files if _is_plain(s, stat.S_ISREG))]
        done: list[tuple[Path, Path]] = []
        try:
            for src, dst in moves:
                dst.parent.mkdir(parents=True, exist_ok=True)
                (os.rename if src.is_dir() else os.replace)(src, dst)  # rename refuses a taken version
                done.append((src, dst))
        except OSError as exc:
            for src, dst in reversed(done):
                with contextlib.suppress(OSError):
                    os.rename(dst, src)
            raise ExportError(
                f"cannot publish {dst}: {exc.strerror or exc}", hint="another export may have taken this version; retry"
            ) from None
        return [dst for _, dst in done]

    def _versions(self) -> Iterator[tuple[Path, Path]]:
        for root, stage in self.repos:
            for model in sorted(stage.iterdir()):
                if not MODEL_NAME_RE.match(model.name) or model.name.startswith(".") or not _is_plain(model):
                    continue
                for version in sorted(model.iterdir()):
                    if (
                        re.fullmatch(r"[1-9]\d*", version.name)
                        and _is_plain(version)
                        and (version / MANIFEST_NAME).is_file()
                    ):
                        yield version, root / model.name / version.name

    def discard(self) -> None:
        """Remove the stages, and every folder made for them that is left empty."""
        for stage in self.stages():
            shutil.rmtree(stage, ignore_errors=True)
        for folder in self.made:
            with contextlib.suppress(OSError):
                folder.rmdir()


def _is_plain(path: Path, kind: Any = stat.S_ISDIR) -> bool:
    """A real folder (or file) of its own: never a symlink the loader planted to steer the publisher."""
    try:
        return bool(kind(os.lstat(path).st_mode))
    except OSError:
        return False


def run_staged(repos: Iterable[Path], files: Iterable[Path], run: Callable[[], int]) -> int:
    """Run ``run`` (the loader) with its outputs staged, then publish them; returns its exit code."""
    box = Outbox.plan(repos, files)
    os.environ[OUTBOX_ENV] = box.to_env()
    try:
        code = run()
        box.publish()
        return code
    finally:
        os.environ.pop(OUTBOX_ENV, None)
        box.discard()
