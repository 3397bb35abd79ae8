"""Tiny ONNX models built with onnx.helper (milliseconds, no torch), and a repository writer.

Kinds (all with a dynamic batch axis "N" unless said otherwise):

* ``linear``  x FP32 [N,1] -> y = 2x + 1 (4 -> 9)
* ``cnn``     x FP32 [N,3,32,32] -> probs FP32 [N,10] (conv/relu/pool/gemm/softmax, seeded weights)
* ``multi``   a FP32 [N,3], b INT64 [N,3] -> sum FP32 [N,3] (a + b), idx INT64 [N] (argmax a)
* ``fixed``   x FP32 [1,4] -> y = 3x (no batch axis: never batched)
* ``seq``     x FP32 [N,T] -> y FP32 [N] (sum over T; T varies per request)
* ``text``    s BYTES [N] -> out BYTES [N] (identity)
* ``sleepy``  x FP32 [N,1] -> y = x after a ~0.85 us/iteration Loop (slow on purpose)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fwx.manifest import ArtifactEntry, Manifest, SourceInfo, sha256_path, size_of
from fwx.repository import Repository
from fwx.signature import Signature, TensorSpec


def _helper() -> tuple[Any, Any, Any]:
    import onnx
    from onnx import TensorProto, helper

    return onnx, helper, TensorProto


def _model(graph: Any) -> bytes:
    onnx, helper, _ = _helper()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _init(name: str, arr: np.ndarray) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(arr, name)


def build_linear() -> tuple[bytes, Signature]:
    _, h, T = _helper()
    g = h.make_graph(
        [h.make_node("Gemm", ["x", "W", "B"], ["y"])],
        "linear",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 1])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 1])],
        [_init("W", np.array([[2.0]], np.float32)), _init("B", np.array([1.0], np.float32))],
    )
    return _model(g), Signature((TensorSpec("x", "float32", ("N", 1)),), (TensorSpec("y", "float32", ("N", 1)),))


def build_cnn(seed: int = 0) -> tuple[bytes, Signature]:
    _, h, T = _helper()
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c2"], ["r2"]),
        h.make_node("GlobalAveragePool", ["r2"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
        h.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    inits = [
        _init("w1", w(8, 3, 3, 3)),
        _init("b1", w(8)),
        _init("w2", w(16, 8, 3, 3)),
        _init("b2", w(16)),
        _init("w3", w(10, 16)),
        _init("b3", w(10)),
    ]
    g = h.make_graph(
        nodes,
        "cnn",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 32, 32])],
        [h.make_tensor_value_info("probs", T.FLOAT, ["N", 10])],
        inits,
    )
    return _model(g), Signature(
        (TensorSpec("x", "float32", ("N", 3, 32, 32)),), (TensorSpec("probs", "float32", ("N", 10)),)
    )


def build_multi() -> tuple[bytes, Signature]:
    _, h, T = _helper()
    nodes = [
        h.make_node("Cast", ["b"], ["bf"], to=T.FLOAT),
        h.make_node("Add", ["a", "bf"], ["sum"]),
        h.make_node("ArgMax", ["a"], ["idx"], axis=1, keepdims=0),
    ]
    g = h.make_graph(
        nodes,
        "multi",
        [h.make_tensor_value_info("a", T.FLOAT, ["N", 3]), h.make_tensor_value_info("b", T.INT64, ["N", 3])],
        [h.make_tensor_value_info("sum", T.FLOAT, ["N", 3]), h.make_tensor_value_info("idx", T.INT64, ["N"])],
    )
    sig = Signature(
        (TensorSpec("a", "float32", ("N", 3)), TensorSpec("b", "int64", ("N", 3))),
        (TensorSpec("sum", "float32", ("N", 3)), TensorSpec("idx", "int64", ("N",))),
    )
    return _model(g), sig


def build_fixed() -> tuple[bytes, Signature]:
    _, h, T = _helper()
    g = h.make_graph(
        [h.make_node("Mul", ["x", "k"], ["y"])],
        "fixed",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 4])],
        [_init("k", np.array(3.0, np.float32))],
    )
    return _model(g), Signature((TensorSpec("x", "float32", (1, 4)),), (TensorSpec("y", "float32", (1, 4)),))


def build_brittle() -> tuple[bytes, Signature]:
    """Declares batch N but reshapes to [1, 1]: warm-up (batch 1) passes, a batch of 2 makes the runtime raise."""
    _, h, T = _helper()
    g = h.make_graph(
        [h.make_node("Reshape", ["x", "s"], ["y"])],
        "brittle",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 1])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 1])],
        [_init("s", np.array([1, 1], np.int64))],
    )
    return _model(g), Signature((TensorSpec("x", "float32", ("N", 1)),), (TensorSpec("y", "float32", ("N", 1)),))


def build_ints() -> tuple[bytes, Signature]:
    """y = x + 1 on INT64 (strict integer JSON decoding)."""
    _, h, T = _helper()
    g = h.make_graph(
        [h.make_node("Add", ["x", "one"], ["y"])],
        "ints",
        [h.make_tensor_value_info("x", T.INT64, ["N", 1])],
        [h.make_tensor_value_info("y", T.INT64, ["N", 1])],
        [_init("one", np.array(1, np.int64))],
    )
    return _model(g), Signature((TensorSpec("x", "int64", ("N", 1)),), (TensorSpec("y", "int64", ("N", 1)),))


def build_seq() -> tuple[bytes, Signature]:
    _, h, T = _helper()
    g = h.make_graph(
        [h.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
        "seq",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", "T"])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N"])],
        [_init("axes", np.array([1], np.int64))],
    )
    return _model(g), Signature((TensorSpec("x", "float32", ("N", "T")),), (TensorSpec("y", "float32", ("N",)),))


def build_text() -> tuple[bytes, Signature]:
    _, h, T = _helper()
    g = h.make_graph(
        [h.make_node("Identity", ["s"], ["out"])],
        "text",
        [h.make_tensor_value_info("s", T.STRING, ["N"])],
        [h.make_tensor_value_info("out", T.STRING, ["N"])],
    )
    return _model(g), Signature((TensorSpec("s", "bytes", ("N",)),), (TensorSpec("out", "bytes", ("N",)),))


def build_sleepy(iterations: int = 150_000) -> tuple[bytes, Signature]:
    _, h, T = _helper()
    body = h.make_graph(
        [h.make_node("Add", ["v_in", "one"], ["v_out"]), h.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [
            h.make_tensor_value_info("i", T.INT64, []),
            h.make_tensor_value_info("cond_in", T.BOOL, []),
            h.make_tensor_value_info("v_in", T.FLOAT, []),
        ],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, [])],
        [h.make_tensor("one", T.FLOAT, [], [1.0])],
    )
    nodes = [
        h.make_node("Loop", ["M", "cond", "v0"], ["v"], body=body),
        h.make_node("Sub", ["v", "Mf"], ["zero"]),
        h.make_node("Add", ["x", "zero"], ["y"]),
    ]
    g = h.make_graph(
        nodes,
        "sleepy",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 1])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 1])],
        [
            h.make_tensor("M", T.INT64, [], [iterations]),
            h.make_tensor("cond", T.BOOL, [], [True]),
            h.make_tensor("v0", T.FLOAT, [], [0.0]),
            h.make_tensor("Mf", T.FLOAT, [], [float(iterations)]),
        ],
    )
    return _model(g), Signature((TensorSpec("x", "float32", ("N", 1)),), (TensorSpec("y", "float32", ("N", 1)),))


BUILDERS: dict[str, Callable[[], tuple[bytes, Signature]]] = {
    "linear": build_linear,
    "cnn": build_cnn,
    "multi": build_multi,
    "fixed": build_fixed,
    "seq": build_seq,
    "text": build_text,
    "sleepy": build_sleepy,
    "brittle": build_brittle,
    "ints": build_ints,
}


def publish(root: Path, name: str, onnx_bytes: bytes, sig: Signature, version: int | None = None) -> Path:
    """Write one ONNX version with a checksummed fwx.json, atomically, like ``fwx export`` does."""
    repo = Repository(root)
    with repo.staging(name, version) as st:
        path = st.path / "model.onnx"
        path.write_bytes(onnx_bytes)
        entry = ArtifactEntry(
            format="onnx",
            path="model.onnx",
            sha256=sha256_path(path),
            size_bytes=size_of(path),
            opset=17,
            signature=sig.to_json(),
            tool_versions={"onnx": "test"},
        )
        manifest = Manifest(
            name=name,
            version=version or 0,
            source=SourceInfo(path="(built in test)", sha256="", format="onnx", framework="onnx"),
            signature=sig.to_json(),
            artifacts={"onnx": entry},
            command="tests/serving",
        )
        return st.publish(manifest)


def make_repo(root: Path, models: Mapping[str, str | list[str]] | None = None) -> Path:
    """A repository under ``root``: {name: kind} (one version) or {name: [kind_v1, kind_v2, ...]}."""
    root.mkdir(parents=True, exist_ok=True)
    for name, kinds in (models or {"linear": "linear"}).items():
        for kind in [kinds] if isinstance(kinds, str) else kinds:
            onnx_bytes, sig = BUILDERS[kind]()
            publish(root, name, onnx_bytes, sig)
    return root


def wait_queued(url: str, n: int, timeout: float = 30) -> None:
    """Block until the server's own ``fwx_queue_depth`` gauge shows ``n`` waiting requests.

    Process tests use it to send a signal while requests are provably in flight,
    instead of a sleep tuned to one machine's speed.
    """
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = httpx.get(f"{url}/metrics").text
        depth = [line for line in text.splitlines() if line.startswith("fwx_queue_depth{")]
        if depth and float(depth[0].split()[-1]) >= n:
            return
        time.sleep(0.01)
    raise AssertionError(f"{n} requests never queued")
