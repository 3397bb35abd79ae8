"""Where token ids may lie: the vocabulary of the embedding that reads them, read from the model.

Random ids outside an embedding's range crash some runtimes and silently
clamp in others; inside it, every runtime must agree. ONNX graphs say exactly
which input feeds which ``Gather``; for PyTorch and Keras models fwx takes the
smallest embedding as the bound of every integer input (conservative: a
``token_type_ids`` table of 2 bounds ``input_ids`` too), unless the user gives
``--input-range``.
"""

from __future__ import annotations

from typing import Any

from fwx.formats import Format
from fwx.runtimes.files import load_onnx
from fwx.signature import Signature
from fwx.sources.load import LoadedSource
from fwx.sources.samples import is_mask
from fwx.sources.tf_source import model_layers


def id_ranges(src: LoadedSource, sig: Signature) -> dict[str, tuple[int, int]]:
    """Input name -> [0, vocabulary) for integer inputs that index an embedding; empty when not readable."""
    ids = [s.name for s in sig.inputs if s.dtype.startswith(("int", "uint")) and not is_mask(s.name)]
    if not ids:
        return {}
    try:
        if src.format is Format.ONNX and src.path is not None:
            return onnx_id_ranges(src.path, ids)
        sizes = _torch_vocabs(src.obj) if src.plan_format is Format.PYTORCH else _keras_vocabs(src.obj)
    except Exception:  # noqa: BLE001 - a model fwx cannot inspect keeps the default ranges
        return {}
    return {name: (0, min(sizes)) for name in ids} if sizes else {}


def onnx_id_ranges(path: Any, ids: list[str]) -> dict[str, tuple[int, int]]:
    """``ids`` (input names) -> [0, rows) of the smallest initializer table a ``Gather`` reads them from."""
    graph = load_onnx(path).graph
    tables = {t.name: int(t.dims[0]) for t in graph.initializer if len(t.dims) >= 1}
    out: dict[str, tuple[int, int]] = {}
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in ids and node.input[0] in tables:
            vocab = tables[node.input[0]]
            out[node.input[1]] = (0, min(vocab, out.get(node.input[1], (0, vocab))[1]))
    return out


def _torch_vocabs(module: Any) -> list[int]:
    import torch  # the source is a loaded torch module: torch is imported already

    sizes = [m.num_embeddings for m in module.modules() if isinstance(m, torch.nn.Embedding)]
    for gm in (m for m in module.modules() if isinstance(m, torch.fx.GraphModule)):  # a .pt2 program
        for node in gm.graph.nodes:
            if node.op == "call_function" and "embedding" in str(node.target) and node.args:
                weight = node.args[0]
                val = getattr(weight, "meta", {}).get("val")
                if val is None and getattr(weight, "op", "") == "get_attr":
                    val = gm.get_parameter(str(weight.target))
                if val is not None and len(val.shape) == 2:
                    sizes.append(int(val.shape[0]))
    return sizes


def _keras_vocabs(model: Any) -> list[int]:
    import keras  # the source is a loaded Keras model: keras is imported already

    return [int(layer.input_dim) for layer in model_layers(model) if isinstance(layer, keras.layers.Embedding)]
