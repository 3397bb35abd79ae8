"""The two models of the serving benchmark, built with onnx.helper (seeded, no downloads).

* ``small_cnn``: x FP32 [N,3,32,32] -> probs [N,10]; two 3x3 convs, ~2.6 MFLOP per sample:
  what the server costs per request dominates.
* ``resnet_like``: x FP32 [N,3,64,64] -> probs [N,10]; a stride-2 stem and three stages of two
  residual blocks (32/64/128 channels), ~210 MFLOP per sample: compute dominates.

``publish`` writes a version folder with a checksummed fwx.json, as ``fwx export`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


class _Graph:
    """A tiny helper to append conv/relu/add nodes with seeded He-initialised weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.flops = 0
        self._n = 0

    def _name(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def weight(self, *shape: int) -> str:
        from onnx import numpy_helper

        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        name = self._name("w")
        arr = (self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int, hw_out: int, relu: bool = True) -> str:
        from onnx import helper

        out = self._name("c")
        bias = self._name("b")
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.zeros(cout, np.float32), bias))
        self.nodes.append(
            helper.make_node(
                "Conv", [x, self.weight(cout, cin, k, k), bias], [out], pads=[k // 2] * 4, strides=[stride, stride]
            )
        )
        self.flops += 2 * hw_out * hw_out * cout * cin * k * k
        if not relu:
            return out
        return self.op("Relu", out)

    def op(self, op: str, *xs: str, **attrs: Any) -> str:
        from onnx import helper

        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, list(xs), [out], **attrs))
        return out

    def block(self, x: str, cin: int, cout: int, stride: int, hw_out: int) -> str:
        y = self.conv(x, cin, cout, 3, stride, hw_out)
        y = self.conv(y, cout, cout, 3, 1, hw_out, relu=False)
        short = x if cin == cout and stride == 1 else self.conv(x, cin, cout, 1, stride, hw_out, relu=False)
        return self.op("Relu", self.op("Add", y, short))

    def head(self, x: str, cin: int) -> str:
        from onnx import numpy_helper

        f = self.op("Flatten", self.op("GlobalAveragePool", x))
        b = self._name("fcb")
        self.inits.append(numpy_helper.from_array(np.zeros(10, np.float32), b))
        logits = self.op("Gemm", f, self.weight(10, cin), b, transB=1)
        self.flops += 2 * cin * 10
        return self.op("Softmax", logits, axis=1)

    def model(self, x_shape: list[Any], out: str, name: str) -> bytes:
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", 10])],
            self.inits,
        )
        graph.node[-1].output[0] = "probs"
        graph.output[0].name = "probs"
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return bytes(m.SerializeToString())


def small_cnn() -> tuple[bytes, int]:
    g = _Graph(0)
    x = g.conv("x", 3, 16, 3, 1, 32)
    x = g.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv(x, 16, 32, 3, 1, 16)
    return g.model(["N", 3, 32, 32], g.head(x, 32), "small_cnn"), g.flops


def resnet_like() -> tuple[bytes, int]:
    g = _Graph(1)
    x = g.conv("x", 3, 32, 3, 2, 32)
    for cin, cout, stride, hw in (
        (32, 32, 1, 32),
        (32, 32, 1, 32),
        (32, 64, 2, 16),
        (64, 64, 1, 16),
        (64, 128, 2, 8),
        (128, 128, 1, 8),
    ):
        x = g.block(x, cin, cout, stride, hw)
    return g.model(["N", 3, 64, 64], g.head(x, 128), "resnet_like"), g.flops


MODELS = {"small_cnn": (small_cnn, (3, 32, 32)), "resnet_like": (resnet_like, (3, 64, 64))}


def publish(root: Path, name: str, onnx_bytes: bytes, sample_shape: tuple[int, ...]) -> Path:
    """One ONNX version with its pinned signature and checksums, published atomically."""
    from fwx.manifest import ArtifactEntry, Manifest, SourceInfo, sha256_path, size_of
    from fwx.repository import Repository
    from fwx.signature import Signature, TensorSpec

    sig = Signature((TensorSpec("x", "float32", ("N", *sample_shape)),), (TensorSpec("probs", "float32", ("N", 10)),))
    with Repository(root).staging(name) as st:
        path = st.path / "model.onnx"
        path.write_bytes(onnx_bytes)
        entry = ArtifactEntry(
            format="onnx",
            path="model.onnx",
            sha256=sha256_path(path),
            size_bytes=size_of(path),
            opset=17,
            signature=sig.to_json(),
        )
        manifest = Manifest(
            name=name,
            version=0,
            source=SourceInfo("(benchmark)", "", "onnx", "onnx"),
            signature=sig.to_json(),
            artifacts={"onnx": entry},
            command="benchmarks/serve.py",
        )
        return st.publish(manifest)
