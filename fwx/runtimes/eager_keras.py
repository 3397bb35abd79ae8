"""A Keras model as a reference runtime (``Format.KERAS``).

``KerasRuntime.from_model(model, signature)`` wraps a model already in memory
(no file); ``load(path)`` reads a ``.keras``/``.h5`` file with Keras'
``safe_mode`` on unless ``trust_model_code`` (safe_mode refuses Lambda layers
and arbitrary modules). Inputs are passed in the model's own input order;
outputs are named by the pinned signature, else by the model's output dict
keys or the producing layers' names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fwx.errors import InputError
from fwx.formats import Format
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.runtimes._common import gather, hint_names, np_dtypes
from fwx.runtimes._tf import spec_from_tf, tf_device
from fwx.runtimes.base import Runtime
from fwx.signature import Signature, TensorSpec


def _named_outputs(model: Any) -> list[tuple[str, Any]]:
    """(name, symbolic tensor) per output; a dict-output model pairs each key with its own tensor."""
    struct = getattr(model, "_outputs_struct", None)
    if isinstance(struct, dict) and all(hasattr(v, "shape") for v in struct.values()):
        return [(str(k), v) for k, v in struct.items()]
    return list(zip(_model_output_names(model), model.outputs, strict=True))


def _model_output_names(model: Any) -> list[str]:
    names = []
    for i, t in enumerate(model.outputs):
        hist = getattr(t, "_keras_history", None)
        names.append(hist.operation.name if hist is not None else f"output_{i}")
    return names if len(set(names)) == len(names) else [f"output_{i}" for i in range(len(names))]


def _flatten(result: Any) -> list[Any]:
    if isinstance(result, dict):  # in key order, as Keras orders ``model.outputs``
        return [v for key in sorted(result) for v in _flatten(result[key])]
    if isinstance(result, (list, tuple)):
        return [v for item in result for v in _flatten(item)]
    return [result]


class KerasRuntime(Runtime):
    format = Format.KERAS

    @classmethod
    def from_model(
        cls, model: Any, signature: Signature | None = None, *, device: str = "cpu", **options: Any
    ) -> KerasRuntime:
        """Wrap a built Keras model; ``signature`` gives the pinned names."""
        rt = cls(None, device=device, signature_hint=signature, **options)
        rt._attach(model)
        return rt

    def _load(self) -> None:
        keras = require("keras", "running Keras models")

        assert self.path is not None
        if not self.path.exists():
            raise InputError(f"{self.path} does not exist", hint="check the path")
        with quiet(python=False, native=True):
            model = keras.saving.load_model(str(self.path), compile=False, safe_mode=not self.trust_model_code)
        self._attach(model)

    def _attach(self, model: Any) -> None:
        self._device = tf_device(self.device)
        self._model = model
        self._sig = self._read_signature(model)
        self._dtypes = np_dtypes(self._sig.inputs)

    def _read_signature(self, model: Any) -> Signature:
        hint = self.signature_hint
        model_inputs: Sequence[Any] = model.inputs or []
        names = hint_names(hint, len(model_inputs), [t.name for t in model_inputs])
        inputs = tuple(spec_from_tf(n, t) for n, t in zip(names, model_inputs, strict=True))
        if not inputs and hint is not None:
            inputs = hint.inputs  # subclassed model that was never called symbolically
        outputs = tuple(spec_from_tf(n, t) for n, t in _named_outputs(model)) if model.inputs else ()
        by_name = {o.name: o for o in outputs}
        if hint is not None and len(hint.outputs) == len(outputs) and set(hint.output_names) == set(by_name):
            outputs = tuple(by_name[h.name] for h in hint.outputs)  # dict outputs: matched by name, never position
        elif hint is not None and len(hint.outputs) == len(outputs):
            outputs = tuple(TensorSpec(h.name, o.dtype, o.shape) for h, o in zip(hint.outputs, outputs, strict=True))
        elif hint is not None and not outputs:
            outputs = hint.outputs
        return Signature(inputs, outputs)

    def signature(self) -> Signature:
        return self._sig

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        arrays = list(gather(inputs, self._dtypes).values())
        with tf.device(self._device):
            result = self._model(arrays[0] if len(arrays) == 1 else arrays, training=False)
        names = self._sig.output_names
        if isinstance(result, dict) and set(names) <= {str(k) for k in result}:
            return {n: np.asarray(result[n]) for n in names}  # by name: a dict's order is not the model's
        values = _flatten(result)
        names = (
            self._sig.output_names
            if len(self._sig.outputs) == len(values)
            else [f"output_{i}" for i in range(len(values))]
        )
        return {n: np.asarray(v) for n, v in zip(names, values, strict=True)}

    @property
    def provider(self) -> str:
        return f"keras:{self._device}"

    @property
    def runtime_version(self) -> str:
        import keras

        return f"keras {keras.__version__}"
