"""A loose state dict as the reference: ``fwx validate weights.pt model.onnx --model-class m:C``.

A user who has only the weights and the class that defines the network can
still check an artifact against it. A state dict is plain tensors and runs no
code; ``--model-class`` names the user's own module on the command line, so it
is imported as ``fwx export`` imports it, without ``--trust-model-code`` (that
flag is for code that comes from a model file). It has no signature of its
own: it takes the one the other artifacts read back, so it is built after they
are loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fwx.errors import UsageError
from fwx.formats import Format
from fwx.signature import Signature
from fwx.validators.artifacts import Artifact, Collection


@dataclass(frozen=True)
class StateDictRef:
    """How to rebuild the loose PyTorch files of a validation: the class and its arguments."""

    model_class: str
    model_kwargs: tuple[tuple[str, Any], ...] = ()


def state_dict_ref(model_class: str | None, model_kwargs: Mapping[str, Any] | None) -> StateDictRef | None:
    """The rebuild ``--model-class`` asks for; None without it."""
    return StateDictRef(model_class, tuple((model_kwargs or {}).items())) if model_class else None


def set_aside(col: Collection, ref: StateDictRef | None) -> list[Artifact]:
    """Take the loose PyTorch files out of ``col`` when a class rebuilds them; they load last (``attach``).

    Without ``--model-class`` they stay, and loading one says it needs the class.
    """
    if ref is None or col.manifest is not None:
        return []
    loose = [a for a in col.artifacts if a.format is Format.PYTORCH]
    if loose and len(loose) == len(col.artifacts):
        raise UsageError(
            "nothing to compare: only the state dict was given",
            hint="pass the artifact to validate against it, e.g. fwx validate weights.pt model.onnx --model-class ...",
        )
    col.artifacts[:] = [a for a in col.artifacts if a not in loose]
    return loose


def attach(col: Collection, loose: list[Artifact], ref: StateDictRef, sig: Signature, device: str) -> None:
    """Build each set-aside state dict into its class, as a runtime taking ``sig``, first in ``col``.

    First: with ``--reference auto`` the first of equal precision is the reference, and the
    model the user wrote is the one the artifacts are checked against.
    """
    from fwx.sources.load import load_source
    from fwx.sources.reference import source_runtime

    for art in reversed(loose):  # the weights are read as plain tensors: only the class runs code
        loaded = load_source(art.path, model_class=ref.model_class, model_kwargs=dict(ref.model_kwargs), trust=False)
        art.runtime = source_runtime(loaded, sig, device=device)
        col.artifacts.insert(0, art)
