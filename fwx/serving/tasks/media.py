"""What the image and audio tasks share: a BYTES tensor's elements as encoded files, and per-version assets.

Raw bytes come with the binary tensor extension or gRPC. A JSON body cannot
hold them, so, as MLServer's codecs do, an input marked ``content_type``
``base64`` (or MLServer's ``pil_image``) holds each file base64-encoded.
A version's media assets are read once: what they hold, or why they are
refused (the refusal is the same on every request, and costs no re-read).
"""

from __future__ import annotations

import base64
import binascii
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from fwx.errors import InputError

if TYPE_CHECKING:
    from fwx.serving.models import LoadedModel
    from fwx.serving.types import InferTensor

T = TypeVar("T")
BASE64 = frozenset({"base64", "pil_image"})


def files(tensor: InferTensor, what: str) -> list[bytes]:
    """The tensor's elements as bytes (base64-decoded when the input is marked so)."""
    encoded = tensor.parameters.get("content_type") in BASE64
    out = []
    for i, item in enumerate(tensor.data.reshape(-1)):
        raw = item.encode() if isinstance(item, str) else bytes(item)
        if encoded:
            try:
                raw = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                raise InputError(f"{what} {i} is not valid base64", hint="send base64 without line breaks") from None
        out.append(raw)
    if not out:
        raise InputError(f"the request holds no {what}")
    return out


class Cached:
    """One value per served version, built once by ``build``; an ``InputError`` is kept and raised again."""

    def __init__(self) -> None:
        self._found: weakref.WeakKeyDictionary[Any, object] = weakref.WeakKeyDictionary()

    def get(self, model: LoadedModel, build: Callable[[], T], kind: type[T]) -> T:
        found = self._found.get(model)
        if found is None:
            try:
                found = build()
            except InputError as exc:
                found = _Refusal(exc.message, exc.hint)
            self._found[model] = found
        if isinstance(found, _Refusal):
            raise InputError(found.message, hint=found.hint)  # a fresh one: a kept exception grows its traceback
        assert isinstance(found, kind)
        return found


@dataclass(frozen=True)
class _Refusal:
    message: str
    hint: str | None
