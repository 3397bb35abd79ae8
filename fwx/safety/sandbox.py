"""The second wall: a process that loads an untrusted model gives up the host before it imports a framework.

The scanners (``fwx.safety``) decide by allow-lists what a model may contain.
If one of them is ever wrong, the kernel still says no: every process that
loads an untrusted model (``fwx export``, ``validate`` and ``inspect``, the
server, its workers and its load probes) restricts itself with Landlock right
after it starts and before any framework is imported. What stays allowed:

* read: the Python environment (interpreter, ``sys.path``, system libraries),
  the few ``/proc``, ``/sys`` and ``/dev`` entries the runtimes read, the
  private snapshots of the models, and the files the user named on the command
  line (calibration data, example inputs, ...);
* write: the process's own scratch folder (``TMPDIR`` and the frameworks'
  caches point there) and the output it was asked to write (the repository);
* network: no outbound TCP connection; a server binds only its own ports.

Where the kernel has no Landlock the scanners still apply and one warning line
says so; ``--require-sandbox`` (or ``FWX_REQUIRE_SANDBOX=1``) fails instead.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fwx.errors import FwxError
from fwx.safety import landlock

REQUIRE_ENV = "FWX_REQUIRE_SANDBOX"

#: System paths the interpreter and the frameworks read: shared libraries, locale, time-zone and font data.
_SYSTEM_READ = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/locale.alias",
    "/etc/ssl/openssl.cnf",
    "/etc/fonts",
)
#: Kernel facts the runtimes read to size their thread pools and memory (cores, cgroup quotas, own maps,
#: the PCI devices onnxruntime lists to look for GPUs).
#: All of /proc is readable because a child's /proc/self is not the parent's; another process's
#: environ, maps and mem stay closed: Landlock refuses ptrace-class access outside the sandbox.
_KERNEL_READ = ("/proc", "/sys/devices", "/sys/bus/pci", "/sys/fs/cgroup", "/dev/urandom", "/dev/random")
_DEV_WRITE = ("/dev/null", "/dev/shm")
#: CUDA device nodes, granted only for a GPU run.
_GPU_READ = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


class SandboxRequiredError(FwxError):
    """The sandbox was required and could not be applied."""

    exit_code = 2


@dataclass(frozen=True)
class Policy:
    """What a sandboxed process may still touch."""

    read: tuple[Path, ...] = ()
    write: tuple[Path, ...] = ()
    bind_ports: tuple[int, ...] = ()
    gpu: bool = False
    #: False where /dev/shm is the host's (no private mount namespace): then nothing may be written there.
    shm: bool = True


@dataclass
class Status:
    """Whether this process runs sandboxed, for ``fwx serve`` metadata, ``/metrics`` and reports."""

    on: bool = False
    abi: int = 0
    reason: str = "not requested"
    scratch: Path | None = None

    def to_json(self) -> dict[str, object]:
        return {"on": self.on, "landlock_abi": self.abi, "reason": self.reason}


status = Status()


def required(flag: bool = False) -> bool:
    return flag or os.environ.get(REQUIRE_ENV, "").lower() in ("1", "true", "yes")


def environment_reads() -> list[Path]:
    """Where this interpreter and its packages live, as real paths (a venv's python is a link)."""
    found: list[Path] = []
    names = ("stdlib", "platstdlib", "purelib", "platlib", "include", "scripts", "data")
    # not the working folder (``python -m`` puts it on sys.path): it may be the user's home
    try:
        here = os.getcwd()
    except OSError:
        here = ""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable]
    paths += [p for p in sys.path if p and os.path.abspath(p) != here]
    paths += [sysconfig.get_path(n) for n in names]
    paths += [str(Path(__file__).resolve().parents[1]), *_editable_packages()]  # fwx itself, editable installs
    for p in paths:
        if p and os.path.exists(p):
            for q in (Path(p), Path(os.path.realpath(p))):
                if q not in found:
                    found.append(q)
    return found


def _editable_packages() -> list[str]:
    """Package folders that ``pip install -e`` maps outside ``sys.path`` (setuptools' editable finders)."""
    found: list[str] = []
    for finder in sys.meta_path:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
        if isinstance(mapping, dict):
            found += [str(v) for v in mapping.values() if isinstance(v, str)]
    return found


def module_dir(ref: str) -> Path | None:
    """The folder ``pkg.mod:Name`` is imported from (the one holding ``pkg``): the user's own code, whose
    other modules it may import too."""
    import importlib.util

    top = ref.split(":")[0].split(".")[0]
    if not top:
        return None
    if "" not in sys.path:
        sys.path.insert(0, "")  # as fwx.sources.torch_source imports a --model-class
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).parent
    return Path(spec.origin).parent if spec.origin else None


def scratch_dir() -> Path:
    """This process's private scratch folder; ``TMPDIR`` and the frameworks' caches point into it."""
    if status.scratch is None:
        import atexit
        import shutil
        import tempfile

        status.scratch = Path(tempfile.mkdtemp(prefix="fwx-scratch-"))
        atexit.register(shutil.rmtree, status.scratch, ignore_errors=True)
    return status.scratch


def _redirect_caches(scratch: Path) -> None:
    """Frameworks write caches under $HOME and /tmp; inside the sandbox they write to the scratch folder."""
    import tempfile

    for var in ("TMPDIR", "TEMP", "TMP"):
        os.environ[var] = str(scratch)
    tempfile.tempdir = str(scratch)
    for var, sub in (
        ("XDG_CACHE_HOME", "cache"),
        ("KERAS_HOME", "keras"),
        ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
        ("TRITON_CACHE_DIR", "triton"),
        ("MPLCONFIGDIR", "matplotlib"),
        ("HF_HOME", "huggingface"),
    ):
        os.environ[var] = str(scratch / sub)


def rules(policy: Policy, scratch: Path) -> landlock.Rules:
    read = [*environment_reads(), *map(Path, _SYSTEM_READ), *map(Path, _KERNEL_READ), *policy.read]
    write = [scratch, *[Path(p) for p in _DEV_WRITE if policy.shm or p != "/dev/shm"], *policy.write]
    if policy.gpu:  # the driver's device nodes are opened read-write and driven by ioctl
        write += [Path(p) for p in _GPU_READ] + sorted(Path("/dev").glob("nvidia[0-9]*"))
    return landlock.Rules(read=_unique(read), write=_unique(write), bind_ports=policy.bind_ports)


def _unique(paths: Iterable[Path]) -> tuple[Path, ...]:
    out: list[Path] = []
    for p in paths:
        if p not in out:
            out.append(p)
    return tuple(out)


def enter(policy: Policy, *, require: bool = False, what: str = "this process", warn: bool = True) -> Status:
    """Restrict this process for good, or say why not (a warning; an error when ``require``)."""
    from fwx import ui

    if status.on:
        return status  # already inside: a second domain could only take away more, never add
    scratch = scratch_dir()
    try:
        abi = landlock.restrict(rules(policy, scratch))
    except landlock.LandlockError as exc:
        status.reason = exc.strerror or str(exc)
        if required(require):
            raise SandboxRequiredError(
                f"cannot sandbox {what}: {status.reason}",
                hint="run on a Linux kernel with Landlock (5.13+), as a fresh process, or drop --require-sandbox",
            ) from exc
        if warn:
            ui.warn(f"{what} runs without the Landlock sandbox ({status.reason}); the model scanners still apply")
        return status
    _redirect_caches(scratch)  # children (probes, the prefetch process) inherit the domain and these
    status.on, status.abi, status.reason = True, abi, f"Landlock ABI {abi}"
    return status
