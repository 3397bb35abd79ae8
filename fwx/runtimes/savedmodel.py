"""TF SavedModel artifacts, run through one signature (``signature_name``, default ``serving_default``).

The signature's concrete function is looked up once at load and called per
request; names, dtypes and shapes come from its structured input/output specs.
A SavedModel is a TF program: fwx loads only folders whose checksum matched
the fwx.json fwx wrote, or a source the user pointed at on purpose.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fwx.errors import InputError, first_line
from fwx.formats import Format
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.runtimes._common import gather, np_dtypes
from fwx.runtimes._tf import spec_from_tf, tf_device
from fwx.runtimes.base import Runtime
from fwx.signature import Signature


class SavedModelRuntime(Runtime):
    format = Format.SAVEDMODEL

    def _load(self) -> None:
        tf = require("tensorflow", "running SavedModels")

        self._device = tf_device(self.device)
        assert self.path is not None
        if not (self.path / "saved_model.pb").is_file():
            raise InputError(
                f"{self.path} is not a SavedModel folder (no saved_model.pb)",
                hint="pass the folder written by tf.saved_model.save",
            )
        with quiet(python=False, native=True), tf.device(self._device):
            self._loaded = tf.saved_model.load(str(self.path))
        name = self.options.get("signature_name") or "serving_default"
        sigs = self._loaded.signatures
        if name not in sigs:
            raise InputError(
                f"{self.path} has no signature {name!r}",
                hint=f"it has: {', '.join(sigs) or 'none (re-export with a serving signature)'}",
            )
        self._fn = sigs[name]
        self._sig = self._read_signature(self._fn)
        self._dtypes = np_dtypes(self._sig.inputs)
        self._out_names = self._sig.output_names

    def _read_signature(self, fn: Any) -> Signature:
        # TF rewrites signature keys into Python identifiers ("input-ids.0" -> "input_ids_0");
        # the tensor's own spec.name keeps the real name, which is what clients send.
        kw_specs: dict[str, Any] = dict(fn.structured_input_signature[1])
        self._kwarg = {(getattr(spec, "name", None) or key): key for key, spec in kw_specs.items()}
        in_specs = {name: kw_specs[key] for name, key in self._kwarg.items()}
        out_specs: dict[str, Any] = dict(fn.structured_outputs)
        hint = self.signature_hint
        in_order = list(in_specs)
        out_order = list(out_specs)
        if hint is not None and set(hint.input_names) == set(in_specs):
            in_order = hint.input_names  # same names; keep the pinned order
        if hint is not None and set(hint.output_names) == set(out_specs):
            out_order = hint.output_names
        return Signature(
            tuple(spec_from_tf(n, in_specs[n]) for n in in_order),
            tuple(spec_from_tf(n, out_specs[n]) for n in out_order),
        )

    def signature(self) -> Signature:
        return self._sig

    def native_names(self) -> dict[str, str]:
        return {name: key for name, key in self._kwarg.items() if name != key}

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        arrays = gather(inputs, self._dtypes)
        try:
            with tf.device(self._device):
                out = self._fn(**{self._kwarg[n]: a for n, a in arrays.items()})
        except (tf.errors.InvalidArgumentError, ValueError, TypeError) as exc:
            raise InputError(
                f"TensorFlow rejected the inputs: {first_line(exc)}", hint=f"the model expects {self._sig}"
            ) from exc
        return {n: out[n].numpy() for n in self._out_names}

    def close(self) -> None:
        self._fn = None
        self._loaded = None

    @property
    def provider(self) -> str:
        return f"tensorflow:{self._device}"

    @property
    def runtime_version(self) -> str:
        import tensorflow as tf

        return f"tensorflow {tf.__version__}"
