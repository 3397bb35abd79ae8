"""fwx's own ONNX -> TensorFlow translator.

Walks the ONNX graph op by op and traces one ``tf.function`` whose input
signature keeps every dynamic dimension, then saves it as a SavedModel that
``tf.lite.TFLiteConverter`` turns into a builtin-ops-only TFLite model.
``model`` and ``table`` import no TensorFlow; ``translate`` does (import it lazily).
"""

from __future__ import annotations
