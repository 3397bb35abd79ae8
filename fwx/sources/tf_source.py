"""Loading Keras and TensorFlow sources safely.

Keras files are opened with ``safe_mode=True`` unless ``--trust-model-code``.
Before that, the config is scanned as JSON so a Lambda layer or a class from a
module outside Keras is refused with a message naming it (Keras' own error is a
paragraph; importing a foreign module would already run its code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fwx.errors import InputError, UnsafeModelError, first_line
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.runtimes.files import CORRUPT_HINT
from fwx.signature import BATCH, TensorSpec, spec_from_dims
from fwx.sources.readers import keras_code_risks, keras_config, keras_custom_classes
from fwx.sources.torch_source import TRUST_HINT


def load_keras(path: Path, *, trust: bool) -> Any:
    config, _ = keras_config(path)
    lambdas, foreign = keras_code_risks(config)
    if not trust and lambdas:
        raise UnsafeModelError(
            f"{path} has Lambda layer(s) {', '.join(lambdas)}: they store Python code that would run on load",
            hint=TRUST_HINT,
        )
    if not trust and foreign:
        raise UnsafeModelError(
            f"{path} uses classes from modules outside Keras ({', '.join(foreign[:5])}): "
            "loading them imports and runs that code",
            hint=TRUST_HINT,
        )
    keras = require("keras", "loading Keras models")
    try:
        with quiet():
            return keras.saving.load_model(str(path), compile=False, safe_mode=not trust)
    except Exception as exc:  # noqa: BLE001 - keras raises ValueError/TypeError/OSError for bad files
        custom = keras_custom_classes(config)
        if custom and all(m is None for m in custom.values()):
            raise InputError(
                f"cannot load {path}: it uses custom Keras class(es) {', '.join(list(custom)[:5])} defined in the "
                "script that saved it, and the file holds no module to import them from",
                hint="in that script, model.export('model_sm') writes a SavedModel that loads without the classes; "
                "export that",
            ) from exc
        if custom:
            named = ", ".join(f"{c} (from {m})" for c, m in list(custom.items())[:5])
            raise InputError(
                f"cannot load {path}: Keras could not rebuild its custom class(es) {named}: {first_line(exc)}",
                hint="install the package that defines and registers them (--trust-model-code lets fwx import it), "
                "or model.export('model_sm') where they are defined and export that SavedModel",
            ) from exc
        raise InputError(f"cannot load {path} as a Keras model: {first_line(exc)}", hint=CORRUPT_HINT) from exc


def keras_io(model: Any) -> tuple[tuple[TensorSpec, ...] | None, tuple[TensorSpec, ...] | None]:
    """The model's own inputs and outputs (``None`` where Keras cannot tell, e.g. an unbuilt model)."""
    try:
        inputs = tuple(
            spec_from_dims(_name(t, f"input_{i}"), t.dtype, list(t.shape)) for i, t in enumerate(model.inputs)
        )
        names = list(getattr(model, "output_names", None) or [])
        outs = model.outputs
        names = names if len(names) == len(outs) else [f"output_{i}" for i in range(len(outs))]
        outputs = tuple(spec_from_dims(n, _dtype(t), list(t.shape)) for n, t in zip(names, outs, strict=True))
    except (AttributeError, ValueError, TypeError):
        return None, None
    return inputs, outputs


def built_batch(
    model: Any, inputs: tuple[TensorSpec, ...] | None, outputs: tuple[TensorSpec, ...] | None
) -> tuple[tuple[TensorSpec, ...] | None, tuple[TensorSpec, ...] | None, str]:
    """``inputs`` and ``outputs`` with a fixed batch made dynamic when Keras only recorded the batch the model
    was built on, and the input that said so (empty when nothing changed).

    A ``Sequential`` without an ``Input`` is built by its first call (``fit`` on batches of 32 records
    ``batch_shape [32, 6]``), and pinning that would make every artifact take exactly 32 rows, while
    Keras' own ``model.export()`` keeps the batch dynamic. A stateful RNN needs its fixed batch: kept.
    """
    fixed = {s.shape[0] for s in inputs or () if s.rank and isinstance(s.shape[0], int) and s.shape[0] > 1}
    if len(fixed) != 1 or any(getattr(layer, "stateful", False) for layer in model_layers(model)):
        return inputs, outputs, ""
    batch = fixed.pop()

    def free(specs: tuple[TensorSpec, ...] | None) -> tuple[TensorSpec, ...] | None:
        if specs is None:
            return None
        return tuple(
            TensorSpec(s.name, s.dtype, (BATCH, *s.shape[1:])) if s.rank and s.shape[0] == batch else s for s in specs
        )

    said = next(str(s) for s in inputs or () if s.rank and s.shape[0] == batch)
    return free(inputs), free(outputs), said


def model_layers(model: Any) -> list[Any]:
    """Every layer of a loaded Keras model, nested ones included (the one walk the sources share)."""
    if hasattr(model, "_flatten_layers"):
        return list(model._flatten_layers())
    return list(getattr(model, "layers", []))


def _dtype(tensor: Any) -> Any:
    """A Keras output's dtype; ``StringLookup(invert=True)`` says int64 but returns strings (Keras 3.15)."""
    layer = getattr(getattr(tensor, "_keras_history", None), "operation", None)
    if getattr(layer, "invert", False) and getattr(layer, "vocabulary_dtype", None) == "string":
        return "string"
    return tensor.dtype


def _name(tensor: Any, fallback: str) -> str:
    name = str(getattr(tensor, "name", "") or fallback)
    return name.split(":")[0]


def time_distributed_over_dynamic_time(model: Any) -> str | None:
    """The name of a ``TimeDistributed`` layer whose time axis is unknown, or None.

    Keras 3's ``TimeDistributed`` maps over the *batch* size when the time axis is unknown at tracing
    (its ``vectorized_map`` takes the length before transposing), so every traced artifact (SavedModel,
    ONNX, TFLite) comes out with the batch size as its time length, while eager Keras is right.
    """
    keras = require("keras", "reading Keras models")
    for layer in model_layers(model):
        if not isinstance(layer, keras.layers.TimeDistributed):
            continue
        try:
            time = layer.input.shape[1]
        except (AttributeError, ValueError, IndexError):  # a layer used twice has no single input
            continue
        if time is None:
            return str(layer.name)
    return None
