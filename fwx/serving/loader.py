"""Load one model version for serving: verify, pick a format, probe, load, warm up.

Everything here blocks (hashing, native loaders, the warm-up inference), so the
model manager calls it from its loader threads, never on the event loop. A
version is only handed back once it has answered one inference whose outputs
fit its pinned signature (``fwx.serving.output_check``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, MutableSet, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from fwx.errors import FwxError, InputError
from fwx.formats import Format
from fwx.manifest import ArtifactEntry, Manifest
from fwx.runtimes.base import Runtime, available_runtimes, load_runtime, warmup, warmup_inputs
from fwx.safety import sandbox
from fwx.serving.config import DEFAULT_PREFER
from fwx.serving.loader_probe import ProbeLimits, probe
from fwx.serving.output_check import check_outputs
from fwx.signature import Signature, is_dynamic
from fwx.sources import boundary
from fwx.sources.boundary import Admitted

log = logging.getLogger("fwx.serving")

#: Triton-style platform names for model metadata.
PLATFORMS: dict[Format, str] = {
    Format.ONNX: "onnxruntime_onnx",
    Format.TORCHSCRIPT: "pytorch_libtorch",
    Format.PT2: "pytorch_pt2",
    Format.SAVEDMODEL: "tensorflow_savedmodel",
    Format.TFLITE: "tflite",
    Format.KERAS: "keras",
    Format.PYTORCH: "pytorch_eager",
}

#: Set in a supervised worker process (``fwx.serving.workers.LoadGuard``): wraps every in-process
#: load + warm-up so the supervisor can blame a crash on the artifact. None in a lone server.
load_guard: Callable[[Format, Path], AbstractContextManager[None]] | None = None


@dataclass
class LoadSettings:
    """The knobs of one load, taken from ServerConfig by the manager."""

    prefer: Sequence[Format] = DEFAULT_PREFER
    device: str = "cpu"
    trust_model_code: bool = False
    warmup: bool = True
    probe: bool = True
    probe_limits: ProbeLimits = field(default_factory=ProbeLimits)


@dataclass
class Loaded:
    """A loaded, warmed version, before the manager wraps it in a LoadedModel."""

    format: Format
    runtime: Runtime
    signature: Signature
    manifest: Manifest
    path: Path
    seconds: float
    probe_seconds: float | None
    snapshot: Admitted | None = None  # the private copy it was loaded from; discard it after closing the runtime


def is_batchable(sig: Signature, runtime: Runtime) -> bool:
    """Dynamic first axis on every input and output, and a runtime that accepts any batch."""
    specs = list(sig.inputs) + list(sig.outputs)
    return bool(specs) and runtime.batchable and all(s.rank >= 1 and is_dynamic(s.shape[0]) for s in specs)


def candidates(manifest: Manifest, prefer: Sequence[Format]) -> list[tuple[Format, ArtifactEntry]]:
    """Artifacts of this version in preference order, skipping failed ones and missing runtimes."""
    by_fmt: dict[Format, ArtifactEntry] = {}
    for entry in manifest.artifacts.values():
        if entry.status == "ok" and entry.format in {f.value for f in Format}:
            by_fmt.setdefault(entry.fmt, entry)
    installed = set(available_runtimes())
    return [(f, by_fmt[f]) for f in prefer if f in by_fmt and f in installed]


def _served_signature(manifest: Manifest, runtime: Runtime) -> Signature:
    """The pinned signature, unless the runtime answers to other names (then its own, with a warning)."""
    pinned = manifest.sig()
    try:
        actual = runtime.signature()
    except Exception:  # noqa: BLE001 - reading metadata must not fail a load that works
        return pinned
    if set(actual.input_names) == set(pinned.input_names) and set(actual.output_names) >= set(pinned.output_names):
        return pinned
    log.warning(
        "%s v%s: runtime signature %s differs from pinned %s; serving the runtime's names",
        manifest.name,
        manifest.version,
        actual,
        pinned,
    )
    return actual


def load_version(path: Path, settings: LoadSettings, probed: MutableSet[str]) -> Loaded:
    """Load the version folder ``path``; raise ``FwxError`` with a one-line reason on any failure.

    ``probed`` holds the sha256 of artifacts already probed safely (shared with
    the manager), so an unchanged artifact is probed once per process.
    """
    # The version is copied once into this process's private scratch; the copy is verified against the
    # manifest's checksums and is the only copy the probe and the runtime read (fwx.safety.snapshot).
    # Trusted or not: --trust-model-code lets model code run, it does not let unverified bytes in.
    admitted = boundary.admit(path, parent=sandbox.scratch_dir())  # the one boundary, as every command's
    try:
        loaded = _load_manifest(admitted.path, settings, probed, origin=path)
    except FwxError as exc:
        admitted.discard()
        exc.message = exc.message.replace(str(admitted.path), str(path))  # the repository's files, not the copy
        raise
    except BaseException:
        admitted.discard()
        raise
    loaded.snapshot = admitted
    return loaded


def _load_manifest(path: Path, settings: LoadSettings, probed: MutableSet[str], origin: Path | None = None) -> Loaded:
    """``origin``: the repository's version folder ``path`` is a private copy of (names artifacts for the guard)."""
    manifest = Manifest.read(path)
    manifest.verify(path)
    options = candidates(manifest, settings.prefer)
    if not options:
        have = ", ".join(sorted(e.format for e in manifest.artifacts.values())) or "none"
        want = ", ".join(f.value for f in settings.prefer)
        raise InputError(
            f"no servable format (artifacts: {have}; loadable here: {want})",
            hint="export one of those formats, or widen --only-formats",
        )
    errors: list[str] = []
    for fmt, entry in options:
        try:
            return _load_one(path, manifest, fmt, entry, settings, probed, origin or path)
        except FwxError as exc:
            errors.append(f"{fmt}: {_over_memory_limit(exc)}")
            log.warning("%s: cannot serve %s: %s", path, fmt, exc.message)
    raise InputError("; ".join(errors), hint="re-export the model, or put another format first with --prefer")


def _over_memory_limit(exc: FwxError) -> str:
    """The message, naming this worker's memory limit and its option when an allocation the limit refused
    caused it (a runtime reports it in its own words: "Failed to allocate", ``MemoryError``)."""
    import resource

    from fwx.safety import limits

    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    if soft == resource.RLIM_INFINITY or not limits.ran_out_of_memory(exc):
        return exc.message
    return f"{exc.message} (over this worker's memory limit, {limits.size_text(soft)}: raise {limits.MEMORY_OPTION})"


def _load_one(
    path: Path,
    manifest: Manifest,
    fmt: Format,
    entry: ArtifactEntry,
    settings: LoadSettings,
    probed: MutableSet[str],
    origin: Path,
) -> Loaded:
    artifact = path / entry.path
    sig = manifest.sig()
    probe_s: float | None = None
    # The cache is keyed by checksum, sound because the checksums were verified.
    key = f"{fmt.value}:{entry.sha256}" if entry.sha256 else ""
    if settings.probe and (not key or key not in probed):
        probe_s = probe(
            fmt,
            artifact,
            signature=sig if settings.warmup else None,
            sizes=manifest.warmup_sizes(),
            trust_model_code=settings.trust_model_code,
            limits=settings.probe_limits,
        )
        if key:
            probed.add(key)
    start = time.monotonic()
    # the guard names the repository's artifact, not this process's private copy: a restarted worker
    # (another copy, elsewhere) must recognise the artifact its predecessor died on
    with load_guard(fmt, origin / entry.path) if load_guard is not None else contextlib.nullcontext():
        runtime = load_runtime(
            fmt, artifact, device=settings.device, trust_model_code=settings.trust_model_code, signature_hint=sig
        )
        try:
            served = _served_signature(manifest, runtime)
            if settings.warmup:
                sizes = manifest.warmup_sizes()
                check_outputs(served, warmup_inputs(served, sizes=sizes), warmup(runtime, served, sizes))
        except BaseException:
            runtime.close()
            raise
    _warn_cpu(path, fmt, entry)
    return Loaded(fmt, runtime, served, manifest, path, time.monotonic() - start, probe_s)


def _warn_cpu(path: Path, fmt: Format, entry: ArtifactEntry) -> None:
    """An int8 artifact measured on another kind of CPU may compute other numbers here (fwx.quantize.cpu)."""
    q = entry.quantization
    if q and q.get("kind") in ("int8", "int8-dynamic"):
        from fwx.quantize.cpu import differs

        if (line := differs(q.get("cpu"), q.get("weight_bits"))) is not None:
            log.warning("%s (%s): %s", path, fmt.value, line)
