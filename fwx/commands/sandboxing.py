"""Run ``fwx export``, ``validate`` and ``inspect`` in one loader process behind every wall.

Wrapping the command's callback keeps the commands themselves unaware of it.
After click has parsed the command line, the ``fwx`` process starts the same
command line again as the loader, with an environment scrubbed of secrets, and
only waits for it (``fwx.safety.walls.run_loader``): it never opens the user's
model itself. The loader, before it imports numpy or any framework, enters its
namespaces, refuses sockets, sets its limits (``fwx.safety.walls.enter``),
copies the models it names into private snapshots (the only copy any framework
will read), grants every other file named on the command line for reading and
the outputs for writing, and restricts itself with Landlock
(``fwx.safety.sandbox``). ``--trust-model-code`` runs inside the same walls;
only ``--no-sandbox`` takes them down, and says so.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from fwx import ui
from fwx.errors import UsageError
from fwx.safety import limits, sandbox, snapshot, walls


@dataclass(frozen=True)
class Spec:
    """Which parameters of a command name models (admitted at the boundary) and outputs.

    Outputs are never granted, for reading or writing: the command's process stages them
    (``fwx.repository.Outbox``) and the loader may write only those stages. ``repository``: the
    outputs are repository roots (staged as folders, every model a task writes published at once);
    else they are files.
    """

    models: tuple[str, ...]
    outputs: tuple[str, ...] = ()
    repository: bool = False


SPECS: dict[str, Spec] = {
    "export": Spec(models=("source",), outputs=("out",), repository=True),
    "validate": Spec(models=("paths", "source_model"), outputs=("reports",)),
    "inspect": Spec(models=("path",)),
}

REQUIRE_OPTION = click.Option(
    ["--require-sandbox"],
    is_flag=True,
    help="Fail, naming them, when the loader cannot take every wall (also FWX_REQUIRE_SANDBOX=1).",
)
#: A step (loading, one conversion hop, one validation) longer than this is stopped with one error line.
DEFAULT_STEP_TIMEOUT_S = 1800.0
TIMEOUT_OPTION = click.Option(
    ["--step-timeout"],
    type=click.FloatRange(min=1),
    envvar="FWX_STEP_TIMEOUT_S",
    default=DEFAULT_STEP_TIMEOUT_S,
    show_default=True,
    metavar="SECONDS",
    help="Stop with an error when one step (load, a conversion hop, a validation run) takes longer.",
)


class _Size(click.ParamType):
    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        try:
            return limits.parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class _Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        try:
            return limits.parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


MEMORY_OPTION = click.Option(
    [limits.MEMORY_OPTION, "memory_limit"],
    type=_Size(),
    envvar="FWX_MEMORY_LIMIT",
    default=limits.size_text(limits.default_memory()),
    show_default=True,
    metavar="SIZE",
    help="Memory the model's loader may use (e.g. 8GiB, 512MiB, none); default: 8GiB or half this machine's.",
)
CPU_OPTION = click.Option(
    [limits.CPU_OPTION, "cpu_time_limit"],
    type=_Duration(),
    envvar="FWX_CPU_TIME_LIMIT",
    default=limits.duration_text(limits.DEFAULT_CPU_S),
    show_default=True,
    metavar="DURATION",
    help="CPU time the model's loader may use, all threads together (e.g. 30m, 90s, 2h, none).",
)
NO_SANDBOX_OPTION = click.Option(
    ["--no-sandbox"],
    is_flag=True,
    help="Load in this process with no wall at all (no Landlock, namespaces, seccomp or limits); warns loudly.",
)
NO_SANDBOX_WARNING = (
    "--no-sandbox: the model loads in this process with every wall down: code it runs can read and "
    "write your files, reach the network and use all memory (the scanners still apply)"
)


#: Set by ``fwx.cli.main`` when it runs the real command line: this process exists for this one command.
command_process = False
#: What the CLI starts once the sandbox is in place (threads started before it would stay outside it).
after_start: list[Callable[[], None]] = []


def _started() -> None:
    while after_start:
        after_start.pop(0)()


def wrap(name: str, cmd: click.Command) -> click.Command:
    """Give ``cmd`` the snapshot + sandbox start, once (commands are module-level objects)."""
    spec = SPECS.get(name)
    if spec is None or cmd.callback is None:
        _started()
        return cmd
    if getattr(cmd.callback, "_fwx_sandboxed", False):
        return cmd
    inner = cmd.callback

    @functools.wraps(inner)
    def callback(**params: Any) -> Any:
        require = bool(params.pop("require_sandbox", False))
        limit = params.pop("step_timeout", None)
        no_sandbox = bool(params.pop("no_sandbox", False))
        lim = limits.Limits(params.pop("memory_limit", None), params.pop("cpu_time_limit", None))
        want = walls.Walls(limits=lim, require=sandbox.required(require), enabled=not no_sandbox)
        if no_sandbox:
            if want.require:
                raise UsageError("--no-sandbox and --require-sandbox contradict each other", hint="drop one")
            ui.warn(NO_SANDBOX_WARNING)
            walls.down("--no-sandbox")
        elif command_process and not walls.in_loader():
            after_start.clear()  # this process only waits: no thread, no framework, no model path opened
            sys.exit(_staged(spec, params, lambda: walls.run_loader(want)))
        if command_process:  # a process of its own may end itself; an in-process caller is never cut off
            ui.limit_steps(limit)
        try:
            if not no_sandbox:
                params = _behind_walls(spec, params, want, what=f"fwx {name}")
        finally:
            _started()
        return _run(inner, params, want)

    callback._fwx_sandboxed = True  # type: ignore[attr-defined]
    cmd.callback = callback
    cmd.params += [REQUIRE_OPTION, NO_SANDBOX_OPTION, MEMORY_OPTION, CPU_OPTION, TIMEOUT_OPTION]
    return cmd


def _behind_walls(spec: Spec, params: dict[str, Any], want: walls.Walls, *, what: str) -> dict[str, Any]:
    """In the loader: namespaces, seccomp and limits, then the snapshots, then Landlock; else the snapshots."""
    if not (command_process and walls.in_loader()):
        return start(spec, params, require=want.require, what=what)
    iso = walls.enter(want)
    params = start(spec, params, require=want.require, what=what, shm=iso.shm)
    walls.finish(iso, want, sandbox.status.abi, sandbox.status.reason)
    os.environ["HOME"] = str(sandbox.scratch_dir())  # the user's home is out of reach: caches land here
    return params


def _run(inner: Callable[..., Any], params: dict[str, Any], want: walls.Walls) -> Any:
    """Run the command; an allocation the memory limit refused ends in the one line that names the limit."""
    try:
        return inner(**params)
    except limits.LimitError:
        raise
    except Exception as exc:
        if walls.report().walls and want.limits.memory_bytes and limits.ran_out_of_memory(exc):
            raise limits.memory_error(want.limits.memory_bytes) from exc
        raise


def start(spec: Spec, params: dict[str, Any], *, require: bool, what: str, shm: bool = True) -> dict[str, Any]:
    """Snapshot the models ``params`` name, then sandbox this process when it is one we may restrict."""
    params = _model_id(dict(params))
    ui.state.display = snapshot.display  # messages name the user's paths, not the private copies
    roots: list[Path] = []
    for key in spec.models:
        value = params.get(key)
        if value is None:
            continue
        data = params.get("external_data_dir")  # export --external-data-dir: where a loose .onnx keeps its data
        taken = [_snap(v, roots, data) for v in (value if isinstance(value, tuple) else (value,))]
        params[key] = tuple(taken) if isinstance(value, tuple) else taken[0]
    if not _own_process():
        # an in-process call (a test, a notebook): frameworks may be loaded and other threads running,
        # so the restriction could not cover them and would outlive the call; the snapshots still hold
        sandbox.status.reason = "in-process call"
        if sandbox.required(require):
            raise sandbox.SandboxRequiredError(
                f"cannot sandbox {what}: it runs inside another program", hint="run the fwx command itself"
            )
        return params
    reads = [*roots, *_named_files(params, skip=(*spec.models, *spec.outputs)), *_staged_reads(params, spec)]
    reads += [d for d in (_module_dir(params.get("model_class")), _module_dir(params.get("source"))) if d]
    policy = sandbox.Policy(
        read=tuple(reads),
        write=tuple(_outputs()),  # a plan, started unstaged, writes nothing
        gpu=str(params.get("device", "cpu")).startswith(("cuda", "auto")),
        shm=shm,
    )
    sandbox.enter(policy, require=require, what=what)
    return params


def _staged_reads(params: dict[str, Any], spec: Spec) -> list[Path]:
    """A staged export reads the repository's published versions (numbering, the signature they pin); a
    staged report is written at its stage (the paths printed are the published ones)."""
    from fwx.repository import Outbox

    box = Outbox.from_env()
    if box is None:
        return []
    shown = ui.state.display
    ui.state.display = lambda text: box.display(shown(text))
    for key in spec.outputs if not spec.repository else ():
        value = params.get(key)
        if isinstance(value, tuple):
            params[key] = tuple(type(v)(box.staged(Path(v))) for v in value)
    return [root for root, _ in box.repos if root.is_dir()]


def _model_id(params: dict[str, Any]) -> dict[str, Any]:
    """``fwx export org/name``: the model's snapshot folder in the local Hugging Face cache, found before
    anything is copied (offline; one error line when it is not cached), published as ``name``."""
    from fwx.sources import hf_hub

    source = params.get("source")
    repo = hf_hub.repo_id(source) if isinstance(source, str) else None
    if repo is None:
        return params
    return {**params, "source": str(hf_hub.resolve(repo)), "name": params.get("name") or hf_hub.name_of(repo)}


def _snap(value: Any, roots: list[Path], external_data: Path | None = None) -> Any:
    """The ``Admitted`` value of a model path (the command receives it); any other value as it is."""
    if not isinstance(value, str | Path) or not os.path.exists(value):
        return value  # a factory reference, or a path the command reports as missing itself
    from fwx.sources import boundary

    if not boundary.names_a_model(Path(value)):
        roots.append(Path(value).resolve())  # a repository or model folder: listed, never loaded
        return value

    found = boundary.admit(value, external_data=external_data)  # the private copy, its format and hash, once
    roots.append(found.root)  # fwx.json's source path is data, never followed (validate --source-model names it)
    return found


def _own_process() -> bool:
    """True when this is the ``fwx`` process itself, started for this one command.

    A thread already running there is not a reason to skip quietly: ``landlock.restrict`` refuses it
    by name, and ``sandbox.enter`` turns that into the warning (or, with --require-sandbox, the error).
    """
    return command_process


def _values(value: Any) -> Iterable[Any]:
    return value if isinstance(value, tuple | list) else (value,)


def _named_files(params: dict[str, Any], skip: Iterable[str]) -> list[Path]:
    """Every existing file or folder named by another parameter: data the user asked fwx to read."""
    out: list[Path] = []
    for key, value in params.items():
        if key in skip:
            continue
        for v in _values(value):
            if isinstance(v, str | Path) and str(v) and os.path.exists(v):
                out.append(Path(v).resolve())
    return out


def _staged(spec: Spec, params: dict[str, Any], run: Callable[[], int]) -> int:
    """Run the loader with the outputs staged; this process publishes them at the end (repository.Outbox)."""
    from fwx.repository import run_staged

    if params.get("plan"):
        return run()
    named = [Path(v) for key in spec.outputs for v in _values(params.get(key)) if isinstance(v, str | Path) and str(v)]
    folders = named if spec.repository else []
    return run_staged(folders, [p for p in named if p not in folders], run)


def _outputs() -> list[Path]:
    """What the loader may write: the stages its command's process planned, nothing else (none: it writes nothing)."""
    from fwx.repository import Outbox

    box = Outbox.from_env()
    return box.stages() if box is not None else []


def _module_dir(ref: Any) -> Path | None:
    if not isinstance(ref, str) or ":" not in ref or os.path.exists(ref):
        return None
    return sandbox.module_dir(ref)
