"""Hop prefetch: convert one later hop in a second process while the exporter works on the other targets.

An export is mostly one busy core (the GIL is held most of the time, so threads
cannot help), and forking after TensorFlow or torch started their thread pools
is unsafe; so the one hop worth overlapping runs in ONE freshly started process
(``fwx.exporter.prefetch_child``). The child is reserved for the target the
exporter reaches last (``run_order``): its first path's tail of file -> file
hops (``Converter.prefetchable``) is handed over as soon as the file it reads
exists (a SavedModel source at once; a Keras source's SavedModel once written;
a torch source's SavedModel once translated), and only when at least one other
target comes first, so the exporter is busy meanwhile. When the runner reaches
that hop, ``take`` waits for the child's answer instead of converting: the
file (hard-linked into the runner's own work folder, so neither side moves the
other's files), the tool version and the seconds the child spent. Everything
after that (read-back, validation, publishing, ``fwx.json``) is unchanged.

``--prefetch auto`` starts the child only where it paid when measured: two or
more cores and a chain that reads a SavedModel source of at least ``MIN_BYTES``
(``Prefetcher._pays``). Starting it costs about
4.5 s of CPU (Python + TensorFlow imports), more than a small model's whole
conversion, so the test suite's small models never start one (``auto`` is the
default, ``options.DEFAULT_PREFETCH``). A converter error in the child
comes back as the same ``FwxError`` (or one line); a crash (the TFLite converter
can abort) becomes "converter crashed (SIGABRT)" for that hop alone. The child
is killed when the export ends, fails or is interrupted, and exits by itself if
the exporter dies (its stdin closes).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from fwx import ui
from fwx.converters.base import EdgeEntry, SourceModel, edge_class
from fwx.converters.plan import Plan
from fwx.decimal_text import is_digits
from fwx.exporter.hopjob import error_from_json, hop_options, next_source, options_json, result_from_json, source_json
from fwx.exporter.runner import WORK, HopKey, HopRun, RunContext, hop_key, suspect
from fwx.formats import ARTIFACT_NAMES, Format
from fwx.machine import signal_name, usable_cores
from fwx.manifest import size_of

#: ``auto`` prefetches only from a SavedModel source at least this big (``Prefetcher._pays``): a big
#: source's long TFLite hop pays for the child's imports, a small one's does not (the A/B: docs/export.md).
MIN_BYTES = 16 << 20
#: Source formats the child may read directly: loading them runs no code from the file.
FILE_SOURCES = frozenset({Format.SAVEDMODEL, Format.ONNX})
#: The environment the child inherits, by prefix; anything that looks like a secret is dropped anyway.
_ENV_PREFIXES = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_", "TZ", "TMP", "TEMP", "LD_LIBRARY_PATH", "VIRTUAL_ENV",
    "TF_", "KERAS_", "OMP_", "MKL_", "OPENBLAS_", "CUDA_", "XLA_", "GRPC_VERBOSITY", "FWX_",
)  # fmt: skip
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSW", "CREDENTIAL", "AUTH", "COOKIE")
_BOOT = (
    "import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
    "from fwx.exporter.prefetch_child import main; main(int(sys.argv[2]))"
)


def child_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the child inherits: locale, paths and framework knobs; no credentials.

    Its thread pools get half the cores (unless the user sized them): two processes each
    spinning a pool as wide as the machine slow each other down more than the overlap gains.
    """
    env = os.environ if environ is None else environ
    kept = {
        k: v for k, v in env.items() if k.startswith(_ENV_PREFIXES) and not any(w in k.upper() for w in _SECRET_WORDS)
    }
    threads = str(max(1, usable_cores() // 2))
    for name in ("FWX_THREADS", "OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        kept.setdefault(name, threads)
    return kept


def link_copy(src: Path, dst: Path) -> None:
    """``src`` at ``dst`` by hard links (a copy where links fail): a snapshot that outlives renames of ``src``."""

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=link)
    else:
        link(str(src), str(dst))


@dataclass
class Job:
    """One chain of hops handed to the child; ``answers`` fills in as its ``hop-i.json`` files appear."""

    folder: Path
    keys: list[HopKey]
    entries: list[EdgeEntry]
    answers: dict[int, dict[str, Any]] = field(default_factory=dict)

    def answer(self, i: int) -> dict[str, Any] | None:
        if i not in self.answers:
            path = self.folder / f"hop-{i}.json"
            if not path.exists():
                return None
            self.answers[i] = json.loads(path.read_text(encoding="utf-8"))
        return self.answers[i]

    def stopped_before(self, i: int) -> bool:
        """An earlier hop failed or handed back: the child will never run hop ``i``."""
        return any((a := self.answer(k)) is not None and not a.get("ok") for k in range(i))

    def finished(self) -> bool:
        last = len(self.entries) - 1
        return self.answer(last) is not None or self.stopped_before(last)


class Prefetcher:
    """The export's one helper process and the jobs handed to it (see the module docstring)."""

    def __init__(
        self,
        staging: Path,
        plans: Mapping[Format, list[Plan]],
        order: list[Format],
        mode: str,
        *,
        min_bytes: int = MIN_BYTES,
    ) -> None:
        self.root = staging / WORK / "prefetch"
        self.plans, self.order, self.mode, self.min_bytes = plans, order, mode, min_bytes
        self.position = -1  # index in ``order`` of the target the runner is exporting
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self.jobs: list[Job] = []
        self.by_key: dict[HopKey, tuple[Job, int]] = {}
        self.samples: Path | None = None
        self.off = mode == "off" or (mode == "auto" and usable_cores() < 2)
        # the exporter's torch pool size before the child started (0: torch was not loaded yet)
        self.torch_threads: int | None = None

    # -- the runner's side ---------------------------------------------------------------------

    def begin(self, ctx: RunContext, target: Format) -> None:
        """The runner starts ``target``: a moment to hand the child its next job."""
        self.position = self.order.index(target) if target in self.order else self.position
        self.offer(ctx)

    def offer(self, ctx: RunContext) -> None:
        """Hand the idle child the last target's next hops, if their input exists and it pays off."""
        if self.off or ctx.options.quant is not None:
            return  # calibration data and quantising hops stay in-process
        if self.jobs and not self._dead() and not self.jobs[-1].finished():
            return
        if self.proc is not None and self._dead():
            return
        for target in reversed(self.order[self.position + 1 :]):
            chain = self._chain(ctx, target)
            if chain == "wait":
                return  # keep the child for this target: its input is still to be written
            if chain is not None:
                self._submit(ctx, *chain)
                return

    def take(self, ctx: RunContext, key: HopKey) -> HopRun | None:
        """The child's result for hop ``key`` (waiting for it); None if the child never ran it.

        Raises the child's error, or "converter crashed (SIG...)" when it died converting this hop.
        """
        where = self.by_key.get(key)
        if where is None:
            return None
        job, i = where
        answer = self._wait(job, i)
        if answer is None or "fallback" in answer:
            return None
        if not answer["ok"]:
            raise error_from_json(answer["error"])
        res = result_from_json(answer["result"])
        out = ctx.work_path(job.entries[i].target)
        for name in res.extra.get("files", []):
            link_copy(res.path.parent / name, out.parent / name)
        link_copy(res.path, out)
        ui.info(f"      (converted in the prefetch process in {answer['seconds']:.1f}s)")
        return HopRun(job.entries[i], replace(res, path=out), float(answer["seconds"]))

    def close(self) -> None:
        """Kill and reap the child (its half-made files stay in the staging folder, which is discarded)."""
        proc, self.proc = self.proc, None
        self.off = True
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.torch_threads is not None:  # the pool back to its size (a torch loaded meanwhile: the default)
            if self.torch_threads == 0:
                os.environ.pop("OMP_NUM_THREADS", None)
            torch = sys.modules.get("torch")
            if torch is not None:
                torch.set_num_threads(self.torch_threads or usable_cores())
            self.torch_threads = None

    # -- choosing -------------------------------------------------------------------------------

    def _chain(self, ctx: RunContext, target: Format) -> tuple[Plan, int, int] | str | None:
        """``(plan, first, end)``: hops ``first:end`` of ``target``'s first path to hand over now; or
        ``"wait"`` when they could be handed over once an earlier hop is done; or None."""
        plan = self._live_plan(ctx, target)
        if plan is None or not plan.hops:
            return None
        hops = plan.hops
        first = next((i for i in range(len(hops)) if hop_key(ctx, hops, i) not in ctx.cache), len(hops))
        end = first
        while end < len(hops) and self._may_take(ctx, hops, end):
            end += 1
        if end > first and self._needed_at(ctx, hops[: first + 1]) > self.position + 1:
            if not self._readable(ctx, first) or (self.mode == "auto" and not self._pays(ctx, first)):
                return None
            return plan, first, end
        # not now (not the child's hop, or the runner needs it next): keep the child for a later hop of this path
        later = any(self._may_take(ctx, hops, i) for i in range(first + 1, len(hops)))
        return "wait" if later else None

    def _pays(self, ctx: RunContext, first: int) -> bool:
        """``auto``: only a chain that reads a big SavedModel source, so the child starts with the export.

        Where the chain starts after the exporter's own hops, the child's imports land when little work
        is left to overlap, and the export got slower (the measurements: docs/export.md, hop prefetch).
        """
        if first != 0 or ctx.src.format is not Format.SAVEDMODEL or ctx.src.path is None:
            return False
        return size_of(Path(ctx.src.path)) >= self.min_bytes

    def _may_take(self, ctx: RunContext, hops: tuple[EdgeEntry, ...], i: int) -> bool:
        key = hop_key(ctx, hops, i)
        return (
            not key[1]
            and key not in ctx.cache
            and key not in ctx.failed
            and key not in self.by_key
            and getattr(edge_class(hops[i]), "prefetchable", False)
        )

    def _live_plan(self, ctx: RunContext, target: Format) -> Plan | None:
        """The path the runner will try first for ``target``: suspect paths last, none through a failed hop."""
        found = sorted(self.plans.get(target) or [], key=lambda p: suspect(ctx, p) is not None)
        for plan in found:
            if not any(hop_key(ctx, plan.hops, i) in ctx.failed for i in range(len(plan.hops))):
                return plan
        return None

    def _needed_at(self, ctx: RunContext, prefix: tuple[EdgeEntry, ...]) -> int:
        """The first target (index in ``order``) whose live path starts with ``prefix``."""
        for i, fmt in enumerate(self.order):
            plan = self._live_plan(ctx, fmt)
            if plan is not None and plan.hops[: len(prefix)] == prefix:
                return i
        return len(self.order)

    @staticmethod
    def _readable(ctx: RunContext, first: int) -> bool:
        """The child may read the chain's input: a file an earlier hop wrote, or a SavedModel/ONNX source.
        A live model (or a file whose loading runs code) is the runner's alone."""
        if first > 0:
            return True
        path = ctx.src.path
        return ctx.src.plan_format in FILE_SOURCES and path is not None and Path(path).exists()

    # -- the child ------------------------------------------------------------------------------

    def _submit(self, ctx: RunContext, plan: Plan, first: int, end: int) -> None:
        hops = plan.hops
        folder = self.root / f"job{len(self.jobs)}"
        folder.mkdir(parents=True)
        samples = self._samples(ctx)
        if samples is None:
            return
        if first == 0:
            path = ctx.source_file()  # an ONNX source's pinned copy where the pin fixes a dynamic axis
            assert path is not None
            src = SourceModel(
                ctx.src.plan_format,
                path,
                ctx.signature,
                layout=ctx.layout,
                opset=ctx.src.opset,
                other_sizes=ctx.other_sizes,
            )
        else:  # a snapshot of the runner's file: the runner may move it to its final name meanwhile
            prev = ctx.cache[hop_key(ctx, hops, first - 1)].result
            mine = folder / "in" / prev.path.name
            for name in prev.extra.get("files", []):
                link_copy(prev.path.parent / name, mine.parent / name)
            link_copy(prev.path, mine)
            src = next_source(hops[first], replace(prev, path=mine), sample_inputs={}, other_sizes=ctx.other_sizes)
        opts = hop_options(ctx.options, chained=first > 0, quantize=False)
        request = {
            "dir": str(folder),
            "options": options_json(opts),
            "samples": str(samples) if samples != Path() else None,
            "input": source_json(src),
            "chained": first > 0,
            "hops": [
                {
                    "source": h.source.value,
                    "target": h.target.value,
                    "module": h.module,
                    "cls": h.cls,
                    "out": str(folder / f"hop{i}" / ARTIFACT_NAMES.get(h.target, h.target.value)),
                }
                for i, h in enumerate(hops[first:end])
            ],
        }
        try:
            line = (json.dumps(request) + "\n").encode()
            proc = self._start()
            assert proc.stdin is not None
            proc.stdin.write(line)
            proc.stdin.flush()
        except (TypeError, ValueError, OSError) as exc:  # options that cannot travel, or no child: convert in-process
            ui.info(f"  prefetch not used: {exc}")
            self.off = True
            return
        job = Job(folder, [hop_key(ctx, hops, i) for i in range(first, end)], list(hops[first:end]))
        self.jobs.append(job)
        for i, key in enumerate(job.keys):
            self.by_key[key] = (job, i)
        ui.info(f"  prefetch: {' then '.join(f'{h.source} -> {h.target}' for h in job.entries)} in a second process")

    def _samples(self, ctx: RunContext) -> Path | None:
        """The sample inputs as an .npz (``Path()`` when there are none); None if one cannot travel without pickle."""
        if self.samples is None:
            import numpy as np

            arrays = {k: np.asarray(v) for k, v in ctx.sample_inputs.items()}
            if any(a.dtype.hasobject for a in arrays.values()):
                self.off = True
                return None
            self.samples = Path()
            if arrays:
                self.samples = self.root / "samples.npz"
                self.samples.parent.mkdir(parents=True, exist_ok=True)
                np.savez(self.samples, **arrays)  # type: ignore[arg-type] # numpy's stub types **kwds as allow_pickle
        return self.samples

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self.log = (self.root / "child.log").open("wb")
            paths = [os.path.abspath(p or os.curdir) for p in sys.path]
            self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
                [sys.executable, "-I", "-c", _BOOT, json.dumps(paths), str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=child_env(),
                close_fds=True,
            )
            self._share_cores()
        return self.proc

    def _share_cores(self) -> None:
        """The exporter's torch pool takes the cores the child leaves (``child_env`` gives it half).

        A pool as wide as the machine straggles as soon as another process runs: every op waits for
        the thread that lost its core. Measured on 2 cores with a second process busy, torchvision
        EfficientNet-B0 ran 0.011-0.023 s per batch on one thread and 0.02-2.7 s on two; on a quiet
        machine the two took the same time. torch's pool is resized now if torch is loaded; if it is
        not, ``OMP_NUM_THREADS`` sizes it when it loads. A size the user chose is kept.
        """
        if "OMP_NUM_THREADS" in os.environ:
            return
        share = max(1, usable_cores() - usable_cores() // 2)
        torch = sys.modules.get("torch")
        if torch is None:
            os.environ["OMP_NUM_THREADS"] = str(share)  # read when torch loads its OpenMP runtime
            self.torch_threads = 0
            return
        self.torch_threads = torch.get_num_threads()
        torch.set_num_threads(share)

    def _dead(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    def _wait(self, job: Job, i: int) -> dict[str, Any] | None:
        """Hop ``i``'s answer; a crash answer if the child died in it; None if it never started it."""
        with _ctrl_c_as_flag() as pressed:
            return self._poll(job, i, pressed)

    def _poll(self, job: Job, i: int, pressed: list[bool]) -> dict[str, Any] | None:
        while True:
            if pressed:
                raise KeyboardInterrupt
            got = job.answer(i)
            if got is not None:
                return got
            if job.stopped_before(i):
                return None
            proc = self.proc
            if proc is None or proc.poll() is not None:
                if job.answer(i) is not None:
                    continue
                if not (job.folder / f"started-{i}").exists():
                    return None
                return {"ok": False, "error": self._crash(proc.returncode if proc else None)}
            time.sleep(0.02)

    def _crash(self, code: int | None) -> dict[str, Any]:
        if code is not None and code < 0:
            how = f"converter crashed ({signal_name(-code)})"
        else:
            how = f"the prefetch process exited with code {code}"
        tail = self._log_tail()
        hint = "it ran in fwx's prefetch process" + (f"; its last log line: {tail}" if tail else "")
        return {"class": "ExportError", "message": how, "hint": hint + "; --prefetch off converts in-process"}

    def _log_tail(self) -> str:
        if self.log is not None:
            self.log.flush()
        with contextlib.suppress(OSError):
            lines = [ln.strip() for ln in (self.root / "child.log").read_text(errors="replace").splitlines()]
            return next((ln[:200] for ln in reversed(lines) if ln), "")
        return ""


@contextlib.contextmanager
def _ctrl_c_as_flag() -> Iterator[list[bool]]:
    """While the export waits for the child, Ctrl-C only sets a flag that the wait loop turns into
    KeyboardInterrupt. Python runs a signal handler wherever the main thread is; inside a ``__del__``
    (TensorFlow's objects have them, and the loop's garbage can trigger a collection) a raised
    KeyboardInterrupt is printed as "Exception ignored" and dropped, and the export waited out the child.
    """
    pressed: list[bool] = []
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield pressed  # not ours to change: a caller's own handler, or not the main thread
        return
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def prefetch_bytes() -> int:
    """``MIN_BYTES``, or ``FWX_PREFETCH_MIN_BYTES`` when set (for measuring the rule)."""
    text = os.environ.get("FWX_PREFETCH_MIN_BYTES", "")
    return int(text) if is_digits(text) else MIN_BYTES


__all__ = ["MIN_BYTES", "Prefetcher", "child_env", "prefetch_bytes"]
