"""Shared TensorFlow plumbing for the Keras/SavedModel edges.

Every TF edge builds one ``tf.function`` whose input signature carries the
pinned names and dims (``None`` where dynamic) and whose output is a dict keyed
by the pinned output names. That single function is what SavedModel, tf2onnx
and (through the SavedModel) TFLite see, so all of them agree on names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fwx.frameworks import require
from fwx.signature import Signature, is_dynamic


def tf_dtype(dtype: str) -> Any:
    """The TF dtype of a signature dtype; fwx's ``bytes`` (string tensors, e.g. a ``StringLookup``'s input) is ``tf.string``."""
    tf = require("tensorflow", "exporting TensorFlow models")
    return tf.string if dtype == "bytes" else tf.as_dtype(dtype)


def tf_specs(sig: Signature) -> list[Any]:
    tf = require("tensorflow", "exporting TensorFlow models")
    return [
        tf.TensorSpec([None if is_dynamic(d) else int(d) for d in s.shape], tf_dtype(s.dtype), name=s.name)
        for s in sig.inputs
    ]


def named_outputs(result: Any, names: list[str], model_names: list[str] | None = None) -> dict[str, Any]:
    """Map a Keras/TF call result (tensor, list, dict) onto the pinned output names, in order."""
    tf = require("tensorflow", "exporting TensorFlow models")
    if isinstance(result, dict):
        keys = model_names if model_names and set(model_names) == set(result) else list(result)
        flat = [result[k] for k in keys]
    else:
        flat = tf.nest.flatten(result)
    if len(flat) != len(names):
        raise ValueError(f"the model returns {len(flat)} outputs, the signature names {len(names)}")
    return {n: tf.identity(t, name=n) for n, t in zip(names, flat, strict=True)}


def keras_fn(model: Any, sig: Signature) -> Callable[..., dict[str, Any]]:
    """A plain function ``(*inputs) -> {output name: tensor}`` calling the Keras model in inference mode."""
    names = sig.output_names
    model_names = list(getattr(model, "output_names", None) or [])
    many = len(sig.inputs) > 1

    def fn(*args: Any) -> dict[str, Any]:
        y = model(list(args) if many else args[0], training=False)
        return named_outputs(y, names, model_names)

    return fn


def signature_fn(loaded: Any, sig: Signature, key: str) -> Callable[..., dict[str, Any]]:
    """A function over a loaded SavedModel's signature, taking positional pinned inputs."""
    concrete = loaded.signatures[key]
    in_names = sig.input_names
    out_names = sig.output_names

    def fn(*args: Any) -> dict[str, Any]:
        result = concrete(**dict(zip(in_names, args, strict=True)))
        return named_outputs({k: result[k] for k in out_names} if set(out_names) <= set(result) else result, out_names)

    return fn


def tf_function(fn: Callable[..., Any], sig: Signature) -> Any:
    tf = require("tensorflow", "exporting TensorFlow models")
    return tf.function(fn, input_signature=tf_specs(sig), autograph=False)
