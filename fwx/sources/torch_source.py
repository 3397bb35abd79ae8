"""Loading PyTorch sources without running code from the file.

Pickles are always read with ``torch.load(..., weights_only=True)`` passed
explicitly. A pickle that needs a global outside torch's allow-list is refused
with the names of those globals, unless the user passes ``--trust-model-code``.
A pickled module made only of ``torch.nn`` built-in layers is the exception: its
classes are torch's own code, so they are allow-listed by name and the file is
still read with ``weights_only=True``. TorchScript archives carry code and
need ``--trust-model-code``; ``.pt2`` archives are data unless they contain
pickled payloads, which are checked the same way.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fwx.errors import FwxError, InputError, UnsafeModelError, UsageError, first_line
from fwx.frameworks import require
from fwx.quiet import quiet

TRUST_HINT = "pass --trust-model-code only if you trust where this file came from"
_STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model", "module", "net")
FACTORY_RE = re.compile(r"^[\w./\\-]+(\.py)?:[A-Za-z_]\w*$")


def import_object(ref: str) -> Any:
    """Import ``pkg.mod:attr`` or ``path/to/file.py:attr`` (the user's own code, named by the user)."""
    module_name, _, attr = ref.rpartition(":")
    if not module_name or not attr:
        raise UsageError(f"cannot parse {ref!r}", hint="write pkg.module:Name or path/to/file.py:Name")
    try:
        if module_name.endswith(".py"):
            module = _import_file(Path(module_name))
        else:
            if "" not in sys.path:
                sys.path.insert(0, "")
            module = importlib.import_module(module_name)
    except FwxError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code can raise anything while importing
        raise InputError(
            f"cannot import {module_name}: {first_line(exc)}",
            hint="check the module path (run fwx from the folder that contains the package)",
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise InputError(f"{module_name} has no attribute {attr!r}", hint="check the name after ':'") from None


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise InputError(f"{path} does not exist", hint="check the path before ':'")
    name = f"fwx_user_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build_module(ref: str, kwargs: Mapping[str, Any]) -> Any:
    """Instantiate ``--model-class`` (a class or a factory function) with ``--model-kwargs``."""
    torch = require("torch", "loading PyTorch models")
    target = import_object(ref)
    if not callable(target):
        raise InputError(f"{ref} is not a class or a function", hint="point --model-class at an nn.Module or a factory")
    try:
        module = target(**kwargs)
    except TypeError as exc:
        params = ", ".join(inspect.signature(target).parameters) if _has_signature(target) else "?"
        raise InputError(
            f"cannot call {ref} with --model-kwargs {dict(kwargs)}: {first_line(exc)}",
            hint=f"its parameters are: {params}",
        ) from exc
    except Exception as exc:  # noqa: BLE001 - user code
        raise InputError(f"{ref}(**kwargs) failed: {first_line(exc)}") from exc
    if not isinstance(module, torch.nn.Module):
        raise InputError(
            f"{ref} returned {type(module).__name__}, not a torch.nn.Module",
            hint="--model-class must build an nn.Module",
        )
    return module


def _has_signature(obj: Any) -> bool:
    try:
        inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    return True


def unsafe_globals(path: Path) -> list[str]:
    """Globals a checkpoint needs beyond torch's weights-only allow-list (reads, never executes)."""
    from fwx.safety.zipbounds import hold_zip_file

    hold_zip_file(path)  # torch's zip reader trusts the sizes an archive declares
    torch = require("torch", "loading PyTorch models")
    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except ValueError:  # legacy (non-zip) pickle
        return _legacy_unsafe_globals(torch, path)
    except Exception as exc:  # noqa: BLE001 - truncated archives raise anything
        raise InputError(
            f"cannot read {path} as a PyTorch checkpoint: {first_line(exc)}",
            hint="the file is probably truncated or corrupt; save it again",
        ) from exc


def _legacy_unsafe_globals(torch: Any, path: Path) -> list[str]:
    """A legacy pickle cannot be scanned: weights-only loads name one disallowed global at a time.

    Built-in ``torch.nn`` layers are allowed and the probe goes on; it stops at
    the first other global, before anything of it runs.
    """
    found: list[str] = []
    for _ in range(256):
        try:
            with quiet(), torch.serialization.safe_globals(torch_nn_classes(found) or []):
                torch.load(str(path), weights_only=True, map_location="cpu")
            return found
        except Exception as exc:  # noqa: BLE001
            names = [n for n in re.findall(r"GLOBAL ([\w.]+)", str(exc)) if n not in found]
            if not names:
                return _unreadable(path, exc)
            found.append(names[0])
            if torch_nn_classes([names[0]]) is None:
                return found
    return found


def _unreadable(path: Path, exc: BaseException) -> list[str]:
    raise InputError(
        f"cannot read {path} as a PyTorch checkpoint: {first_line(exc)}",
        hint="the file is probably truncated or corrupt; save it again",
    ) from exc


def torch_nn_classes(names: list[str]) -> list[type] | None:
    """The classes behind ``names`` if every one is a built-in ``torch.nn`` layer, else None."""
    torch = require("torch", "loading PyTorch models")
    classes: list[type] = []
    for name in names:
        module_name, _, attr = name.rpartition(".")
        if not module_name.startswith("torch.nn.modules"):
            return None
        obj = getattr(importlib.import_module(module_name), attr, None)
        if not (isinstance(obj, type) and issubclass(obj, torch.nn.Module)):
            return None
        classes.append(obj)
    return classes


def load_checkpoint(path: Path, *, trust: bool) -> Any:
    """``torch.load`` a ``.pt/.pth``: weights-only, unless trusted; refuse code-carrying pickles."""
    torch = require("torch", "loading PyTorch models")
    needed = unsafe_globals(path)
    allowed: list[type] = []
    if needed:
        nn_classes = torch_nn_classes(needed)
        if nn_classes is None and not trust:
            shown = ", ".join(needed[:8]) + (" …" if len(needed) > 8 else "")
            raise UnsafeModelError(
                f"{path} is a pickle that would import and run code: {shown}",
                hint=TRUST_HINT + ", or save a state_dict and pass --model-class",
            )
        allowed = nn_classes or []
    try:
        with quiet():
            if needed and not allowed:  # trusted, code-carrying pickle
                return torch.load(str(path), weights_only=False, map_location="cpu")
            with torch.serialization.safe_globals(allowed):
                return torch.load(str(path), weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001
        raise InputError(
            f"cannot read {path} as a PyTorch checkpoint: {first_line(exc)}",
            hint="the file is probably truncated or corrupt; save it again",
        ) from exc


def find_state_dict(obj: Any) -> Mapping[str, Any] | None:
    """The tensor mapping in a checkpoint: the object itself or a common wrapper key."""
    torch = require("torch", "loading PyTorch models")

    def is_sd(x: Any) -> bool:
        return isinstance(x, Mapping) and bool(x) and all(isinstance(v, torch.Tensor) for v in x.values())

    if is_sd(obj):
        return obj  # type: ignore[no-any-return]
    if isinstance(obj, Mapping):
        for key in _STATE_DICT_KEYS:
            if is_sd(obj.get(key)):
                return obj[key]  # type: ignore[no-any-return]
    return None


def apply_state_dict(module: Any, state: Mapping[str, Any], path: Path, model_class: str) -> None:
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise InputError(
            f"{path} does not match {model_class}: {first_line(exc)}",
            hint="check --model-class and --model-kwargs (they must rebuild the saved architecture)",
        ) from exc


def load_torchscript(path: Path, *, trust: bool) -> Any:
    torch = require("torch", "loading TorchScript models")
    if not trust:
        raise UnsafeModelError(
            f"{path} is a TorchScript archive: loading it runs the code it contains", hint=TRUST_HINT
        )
    from fwx.safety.zipbounds import hold_zip_file

    hold_zip_file(path)  # the bounds guard memory, not code: they hold with --trust-model-code too
    try:
        with quiet():
            return torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # noqa: BLE001
        raise InputError(
            f"cannot load {path} as TorchScript: {first_line(exc)}",
            hint="the file is probably truncated or corrupt; save it again",
        ) from exc


def pt2_pickled_payloads(path: Path) -> list[str]:
    """Members of a ``.pt2`` archive that would run code on load (``fwx.safety`` reads them as data)."""
    from fwx.safety import pt2_findings

    return pt2_findings(path)


def load_pt2(path: Path, *, trust: bool) -> Any:
    require("torch", "loading .pt2 models")
    from fwx.runtimes.pt2 import load_program  # the one .pt2 loader: scans before torch sees the file

    return load_program(path, trust=trust)


def program_module(ep: Any) -> Any:
    """An ExportedProgram as an eval-mode ``nn.Module`` that tolerates ``.eval()`` (``ep.module()`` raises)
    and takes its tensors positionally, in the program's input order, however it was exported."""
    torch = require("torch", "loading .pt2 models")
    from fwx.runtimes.pt2_trees import call_flat

    class Program(torch.nn.Module):  # type: ignore[name-defined,misc]
        fwx_trace_only = True  # torch.jit.script cannot compile an exported graph

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner
            self.in_spec = ep.call_spec.in_spec
            self.training = False

        def forward(self, *args: Any) -> Any:
            return call_flat(self.inner, self.in_spec, args)

        def train(self, mode: bool = True) -> Program:
            return self

    return Program(ep.module())
