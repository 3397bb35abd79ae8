"""The source model's outputs, computed once per export and reused by every target's validation.

``--to all`` validates five artifacts against the source on the same samples
(one seed, the same sizes), so without this the source model runs 5x4 times
for 4 distinct inputs; an eager Keras EfficientNet at batch 3 is the most
expensive runtime in the whole check. Outputs are keyed by the exact feed
(names, dtypes, shapes and bytes), so a different sample is never served a
stale answer, and handed out as copies, so no caller can alter another's.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from fwx.runtimes.base import Runtime
from fwx.signature import Signature

FeedKey = tuple[tuple[str, str, tuple[int, ...], str], ...]


def feed_key(inputs: dict[str, np.ndarray]) -> FeedKey:
    out = []
    for name in sorted(inputs):
        arr = np.ascontiguousarray(inputs[name])
        out.append((name, arr.dtype.str, tuple(arr.shape), hashlib.sha256(_content(arr)).hexdigest()))
    return tuple(out)


def _content(arr: np.ndarray) -> bytes:
    """The array's values as bytes; object arrays (strings) by value, since their buffer holds only pointers."""
    if arr.dtype.kind == "O":
        return "\x1f".join(repr(x) for x in arr.ravel().tolist()).encode()
    return arr.tobytes()


class RememberingRuntime(Runtime):
    """A runtime that runs each distinct feed once; everything else is the wrapped runtime's."""

    def __init__(self, inner: Runtime) -> None:
        super().__init__(inner.path, device=inner.device, trust_model_code=inner.trust_model_code)
        self.format = inner.format  # type: ignore[misc]  # per instance: the wrapped runtime's format
        self.inner = inner
        self.runs = 0  # feeds the wrapped runtime actually ran
        self._outputs: dict[FeedKey, dict[str, np.ndarray]] = {}

    def _load(self) -> None:  # the wrapped runtime is loaded already
        return

    def signature(self) -> Signature:
        return self.inner.signature()

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        key = feed_key(inputs)
        if key not in self._outputs:
            self._outputs[key] = self.inner.infer(inputs)  # a failure is not kept: the next call fails alike
            self.runs += 1
        return {k: np.array(v, copy=True) for k, v in self._outputs[key].items()}

    def close(self) -> None:
        self._outputs.clear()
        self.inner.close()

    @property
    def provider(self) -> str:
        return self.inner.provider

    @property
    def runtime_version(self) -> str:
        return self.inner.runtime_version

    def __getattr__(self, name: str) -> Any:  # format-specific extras (input layout, signature key, ...)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


__all__ = ["RememberingRuntime", "feed_key"]
