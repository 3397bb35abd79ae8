"""The test zoo: architectures nobody on fwx wrote, built from configs with random weights, saved as users save them.

Hugging Face Transformers models (BERT, GPT-2, ViT) come from a small config
(``from_config``: no download, random weights), torchvision classifiers and
``keras.applications`` models from ``weights=None``. Random weights are made
judgeable: every BatchNorm's running statistics are set from a real batch, so
activations and logits are of order 1 (with untouched statistics a deep CNN's
logits are ~1e-11 and any export "matches").

Each model is saved the way its users save it:

* torch: ``torch.export`` ``.pt2`` with shared ``Dim`` objects (``input_ids`` and
  ``attention_mask`` share batch and sequence), traced TorchScript, and
  ``torch.onnx.export`` (the legacy exporter at opset 17, with dynamic axes);
* Keras: ``.keras`` and ``model.export()`` (a SavedModel).

fwx imports nothing from here: the saved files are the sources.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SEED = 0
HW = 32  # image side for the zoo's CNNs and ViT: small enough for CI, large enough for 5 strided stages
# EfficientNet-B0 at 32x32 ends in 1x1 maps and random-weight logits of ~2000, where correct runtimes differ
# by ~1 (4e-4 of the range: ill-conditioned, not a wrong export); at 64x64 its logits are ~30, as trained ones are
EFF_HW = 64
VOCAB = 1000
TORCH_KINDS = ("pt2", "torchscript", "onnx")
KERAS_KINDS = ("keras", "savedmodel")


@dataclass(frozen=True)
class ZooModel:
    """One zoo architecture: how to build it, its pinned inputs and the source kinds its users save."""

    name: str
    framework: str  # torch | keras
    inputs: tuple[str, ...]  # ``--input`` specs (shared symbols: shared dims)
    outputs: tuple[str, ...]
    kinds: tuple[str, ...]
    sequence: bool = False  # has a dynamic sequence axis (judged at two lengths)

    @property
    def dims(self) -> tuple[dict[int, str], ...]:
        """Per input, axis -> symbol of its dynamic dims, read from ``inputs`` (``[batch,seq]`` -> {0, 1})."""
        shapes = (spec.split("[", 1)[1].rstrip("]").split(",") for spec in self.inputs)
        return tuple({i: d for i, d in enumerate(shape) if not d.isdecimal()} for shape in shapes)


def _ids(n: str = "input_ids") -> str:
    return f"{n}:int64[batch,seq]"


ZOO: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel(
            "bert",
            "torch",
            (_ids(), _ids("attention_mask"), _ids("token_type_ids")),
            ("last_hidden_state",),
            TORCH_KINDS,
            sequence=True,
        ),
        ZooModel("gpt2", "torch", (_ids(),), ("logits",), TORCH_KINDS, sequence=True),
        ZooModel(
            "gpt2_mask",
            "torch",
            (_ids(), _ids("attention_mask")),
            ("logits",),
            TORCH_KINDS,
            sequence=True,
        ),
        ZooModel(
            "vit",
            "torch",
            (f"pixel_values:float32[batch,3,{HW},{HW}]",),
            ("logits",),
            TORCH_KINDS,
        ),
        ZooModel("resnet18", "torch", (f"image:float32[batch,3,{HW},{HW}]",), ("logits",), TORCH_KINDS),
        ZooModel(
            "mobilenet_v3",
            "torch",
            (f"image:float32[batch,3,{HW},{HW}]",),
            ("logits",),
            TORCH_KINDS,
        ),
        ZooModel(  # disentangled attention: log-bucketed relative positions (sign, abs, log of int64)
            "deberta_v2",
            "torch",
            (_ids(), _ids("attention_mask")),
            ("last_hidden_state",),
            TORCH_KINDS,
            sequence=True,
        ),
        ZooModel(  # SiLU, squeeze-excitation, 16 depthwise stages: float rounding grows with the logits' size
            "efficientnet_b0",
            "torch",
            (f"image:float32[batch,3,{EFF_HW},{EFF_HW}]",),
            ("logits",),
            TORCH_KINDS,
        ),
        ZooModel(  # relative position buckets: |i - j| of int64 positions, log, min (no position table)
            "t5_encoder",
            "torch",
            (_ids(), _ids("attention_mask")),
            ("last_hidden_state",),
            TORCH_KINDS,
            sequence=True,
        ),
        ZooModel(  # raw audio: a strided conv feature encoder; the length is 10 * Dim("frames", min=40)
            "wav2vec2",
            "torch",
            ("input_values:float32[batch,samples]",),
            ("last_hidden_state",),
            ("pt2",),
        ),
        ZooModel("keras_mobilenet_v2", "keras", (f"image:float32[batch,{HW},{HW},3]",), ("logits",), KERAS_KINDS),
        ZooModel("keras_efficientnet_b0", "keras", (f"image:float32[batch,{HW},{HW},3]",), ("logits",), KERAS_KINDS),
        ZooModel("keras_bilstm", "keras", ("x:float32[batch,seq,8]",), ("y",), KERAS_KINDS, sequence=True),
        ZooModel("keras_transformer", "keras", ("tokens:int64[batch,seq]",), ("y",), KERAS_KINDS, sequence=True),
        ZooModel("keras_recommender", "keras", ("item_ids:int64[batch,seq]",), ("score",), KERAS_KINDS, sequence=True),
    )
}


# --- torch --------------------------------------------------------------------------------------


def import_torchvision() -> Any:
    """``import torchvision`` beside a CPU-only torch.

    PyPI's torchvision wheel is a CUDA build: its ``_meta_registrations``
    module registers fake kernels for ``torchvision::nms`` & co. at import and
    fails ("operator torchvision::nms does not exist") when the C++ ops do not
    load against the +cpu torch. The classifiers use none of those ops, so an
    empty stand-in for that one module lets the package import; nothing else is
    touched (``torchvision.ops.nms`` would still fail, loudly). Transformers
    imports torchvision whenever it is installed, so this runs before it too.
    """
    if "torchvision" not in sys.modules:
        sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import torchvision

    return torchvision


def _calibrate_bn_torch(model: Any, batch: Any) -> None:
    """Running statistics from one real batch (momentum 1: the batch's own mean and variance)."""
    import torch
    from torch import nn

    model.eval()
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        m.momentum = 1.0
        m.train()
    with torch.no_grad():
        model(batch)
    model.eval()


def _hf_module(model: Any, names: tuple[str, ...], field_name: str) -> Any:
    """A plain module with named inputs that returns one tensor (not a ModelOutput), as users export it.

    The forward has the real parameter names (``torch.export`` matches
    ``dynamic_shapes`` and fwx reads input names by them).
    """
    from torch import nn

    params = ", ".join(names)
    scope: dict[str, Any] = {}
    exec(
        f"def forward(self, {params}):\n    return getattr(self.model({', '.join(f'{n}={n}' for n in names)}), "
        f"{field_name!r})",
        scope,
    )  # noqa: S102 - a fixed template over our own names

    wrapped = type("HF" + type(model).__name__, (nn.Module,), {"forward": scope["forward"]})()
    wrapped.model = model
    return wrapped.eval()


#: The size every zoo text encoder is built at (BERT, DeBERTa-v2): small enough for CI, two real layers.
SMALL_ENCODER = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
}


def build_torch(name: str) -> tuple[Any, tuple[Any, ...]]:
    """The eval-mode module and an example (batch 2, sequence 8) input tuple."""
    import torch

    import_torchvision()  # Transformers imports torchvision when it is installed: the stand-in must come first
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    b, s = 2, 8
    if name == "bert":
        from transformers import BertConfig, BertModel

        cfg = BertConfig(**SMALL_ENCODER, type_vocab_size=2)
        ids = torch.randint(0, VOCAB, (b, s), generator=gen)
        mask = torch.ones(b, s, dtype=torch.int64)
        tt = torch.zeros(b, s, dtype=torch.int64)
        return _hf_module(
            BertModel(cfg, add_pooling_layer=False),
            ("input_ids", "attention_mask", "token_type_ids"),
            "last_hidden_state",
        ), (ids, mask, tt)
    if name in ("gpt2", "gpt2_mask"):
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(
            vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2, n_positions=64, use_cache=False, initializer_range=0.1
        )  # logits of order 1, not ~0.1
        ids = torch.randint(0, VOCAB, (b, s), generator=gen)
        names = ("input_ids", "attention_mask") if name == "gpt2_mask" else ("input_ids",)
        args = (ids, torch.ones(b, s, dtype=torch.int64)) if name == "gpt2_mask" else (ids,)
        return _hf_module(GPT2LMHeadModel(cfg), names, "logits"), args
    if name == "vit":
        from transformers import ViTConfig, ViTForImageClassification

        cfg = ViTConfig(
            image_size=HW,
            patch_size=8,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=128,
            num_labels=10,
            initializer_range=0.1,
        )
        return _hf_module(ViTForImageClassification(cfg), ("pixel_values",), "logits"), (
            torch.randn(b, 3, HW, HW, generator=gen),
        )
    if name == "deberta_v2":
        from transformers import DebertaV2Config, DebertaV2Model

        cfg = DebertaV2Config(
            **SMALL_ENCODER, relative_attention=True, position_buckets=16, pos_att_type=["p2c", "c2p"]
        )
        return _ids_and_mask_encoder(DebertaV2Model(cfg), gen, b, s)
    if name == "t5_encoder":
        from transformers import T5Config, T5EncoderModel

        cfg = T5Config(vocab_size=VOCAB, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2)
        return _ids_and_mask_encoder(T5EncoderModel(cfg), gen, b, s)
    if name == "wav2vec2":
        from transformers import Wav2Vec2Config, Wav2Vec2Model

        cfg = Wav2Vec2Config(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            conv_dim=(16, 16),
            conv_stride=(5, 2),
            conv_kernel=(10, 3),
            num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4,
            do_stable_layer_norm=True,
            feat_extract_norm="layer",
        )
        wrapped = _hf_module(Wav2Vec2Model(cfg), ("input_values",), "last_hidden_state")
        return wrapped, (torch.randn(b, 1600, generator=gen),)
    if name == "efficientnet_b0":
        model = import_torchvision().models.efficientnet_b0(weights=None, num_classes=10)
        x = torch.randn(8, 3, EFF_HW, EFF_HW, generator=gen)
        _calibrate_bn_torch(model, x)
        return model.eval(), (x[:b],)
    if name in ("resnet18", "mobilenet_v3"):
        tv = import_torchvision()
        model = (
            tv.models.resnet18(weights=None, num_classes=10)
            if name == "resnet18"
            else tv.models.mobilenet_v3_small(weights=None, num_classes=10)
        )
        if name == "mobilenet_v3":  # torchvision draws the head from N(0, 0.01): logits ~0.03; nn.Linear's own init
            model.classifier[-1].reset_parameters()
        x = torch.randn(8, 3, HW, HW, generator=gen)
        _calibrate_bn_torch(model, x)
        return model.eval(), (x[:b],)
    raise ValueError(name)


def _ids_and_mask_encoder(model: Any, gen: Any, b: int, s: int) -> tuple[Any, tuple[Any, ...]]:
    """An encoder taking ``input_ids`` and ``attention_mask`` that returns ``last_hidden_state``, and its example."""
    import torch

    ids = torch.randint(0, VOCAB, (b, s), generator=gen)
    wrapped = _hf_module(model, ("input_ids", "attention_mask"), "last_hidden_state")
    return wrapped, (ids, torch.ones(b, s, dtype=torch.int64))


def save_torch(name: str, kind: str, folder: Path) -> Path:
    """Write the model as ``kind`` (pt2 | torchscript | onnx) the way its users do."""
    import torch

    model, args = build_torch(name)
    spec = ZOO[name]
    folder.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings(), _quiet():
        warnings.simplefilter("ignore")
        if kind == "pt2":
            path = folder / f"{name}.pt2"
            dims = {
                "batch": torch.export.Dim("batch", min=1, max=64),
                "seq": torch.export.Dim("seq", min=2, max=32),
                "samples": 10 * torch.export.Dim("frames", min=40, max=1600),  # as wav2vec2's users save it
            }
            shapes = tuple({a: dims[sym] for a, sym in d.items()} for d in spec.dims)
            ep = torch.export.export(model, args, dynamic_shapes=shapes)
            torch.export.save(ep, str(path))
        elif kind == "torchscript":
            path = folder / f"{name}.pt"
            torch.jit.save(torch.jit.trace(model, args, strict=False), str(path))
        elif kind == "onnx":
            path = folder / f"{name}.onnx"
            in_names = [s.split(":")[0] for s in spec.inputs]
            axes = dict(zip(in_names, spec.dims, strict=True))
            axes[spec.outputs[0]] = {0: "batch", 1: "seq"} if spec.sequence else {0: "batch"}
            if name == "gpt2":  # the legacy exporter has no aten::diff (HF's mask helpers): users get dynamo
                dyn = {n: dict.fromkeys(d, torch.export.Dim.AUTO) for n, d in zip(in_names, spec.dims, strict=True)}
                torch.onnx.export(
                    model,
                    args,
                    str(path),
                    input_names=in_names,
                    output_names=list(spec.outputs),
                    dynamic_shapes=dyn,
                    dynamo=True,
                )
            else:  # the legacy exporter at opset 17, which most tools read
                torch.onnx.export(
                    model,
                    args,
                    str(path),
                    input_names=in_names,
                    output_names=list(spec.outputs),
                    dynamic_axes=axes,
                    opset_version=17,
                    dynamo=False,
                )
        else:
            raise ValueError(kind)
    return path


# --- keras --------------------------------------------------------------------------------------


def _calibrate_bn_keras(model: Any, batch: np.ndarray) -> None:
    """Moving statistics from one real batch (momentum 0 keeps only this batch)."""
    import keras

    bns = [layer for layer in _all_layers(model) if isinstance(layer, keras.layers.BatchNormalization)]
    for layer in bns:
        layer.momentum = 0.0
    model(batch, training=True)
    for layer in bns:
        layer.momentum = 0.99


def _all_layers(model: Any) -> list[Any]:
    out = []
    for layer in model.layers:
        out.append(layer)
        if hasattr(layer, "layers"):
            out.extend(_all_layers(layer))
    return out


def build_keras(name: str) -> Any:
    import keras

    keras.utils.set_random_seed(SEED)
    if name == "keras_bilstm":
        x = keras.Input((None, 8), name="x")
        h = keras.layers.Bidirectional(keras.layers.LSTM(16, return_sequences=True))(x)
        y = keras.layers.Dense(4, name="y")(h)
        return keras.Model(x, y, name=name)
    if name == "keras_recommender":
        # A user's item history as catalog ids (sparse, as product ids are) -> IntegerLookup -> Embedding -> score.
        catalog = np.random.default_rng(SEED).choice(100_000, 500, replace=False)
        x = keras.Input((None,), dtype="int64", name="item_ids")
        idx = keras.layers.IntegerLookup(vocabulary=catalog.tolist(), name="item_lookup")(x)
        init = keras.initializers.RandomUniform(-1.0, 1.0, seed=SEED)  # outputs of order 1, not 1e-2
        e = keras.layers.Embedding(len(catalog) + 1, 16, embeddings_initializer=init)(idx)
        y = keras.layers.Dense(1, name="score")(keras.layers.GlobalAveragePooling1D()(e))
        return keras.Model(x, y, name=name)
    if name == "keras_transformer":
        # One encoder block as the Keras guides build it: token embedding, MultiHeadAttention, residual
        # LayerNormalization, a GELU feed-forward, pooled to class scores.
        x = keras.Input((None,), dtype="int64", name="tokens")
        e = keras.layers.Embedding(VOCAB, 32)(x)
        h = keras.layers.LayerNormalization()(e + keras.layers.MultiHeadAttention(2, 16)(e, e))
        f = keras.layers.Dense(32)(keras.layers.Dense(64, activation="gelu")(h))
        pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(h + f))
        return keras.Model(x, keras.layers.Dense(3, name="y")(pooled), name=name)
    images = pixels(16)  # pixels, as the preprocessing layers expect; the examples are the first of them
    inp = keras.Input((HW, HW, 3), name="image")
    if name == "keras_mobilenet_v2":
        # The user's preprocessing in front: pixels -> [0,1] -> ImageNet mean/std.
        h = keras.layers.Rescaling(1.0 / 255)(inp)
        h = keras.layers.Normalization(mean=[0.485, 0.456, 0.406], variance=[0.229**2, 0.224**2, 0.225**2])(h)
        base = keras.applications.MobileNetV2(
            input_shape=(HW, HW, 3), alpha=0.35, weights=None, classes=10, classifier_activation=None
        )
        model = keras.Model(inp, base(h), name=name)
    elif name == "keras_efficientnet_b0":
        # EfficientNet carries its own Rescaling + Normalization (adapted here on the batch, as a user would).
        model = keras.applications.EfficientNetB0(
            input_shape=(HW, HW, 3), weights=None, classes=10, classifier_activation=None
        )
        norm = next(layer for layer in model.layers if isinstance(layer, keras.layers.Normalization))
        norm.adapt(images / 255.0)
        model = keras.Model(inp, model(inp), name=name)
    else:
        raise ValueError(name)
    _calibrate_bn_keras(model, images)
    return model


def save_keras(name: str, kind: str, folder: Path) -> Path:
    model = build_keras(name)
    folder.mkdir(parents=True, exist_ok=True)
    with _quiet():
        if kind == "keras":
            path = folder / f"{name}.keras"
            model.save(path)
        elif kind == "savedmodel":
            path = folder / f"{name}.savedmodel"
            model.export(str(path), verbose=False)
        else:
            raise ValueError(kind)
    return path


# --- both ---------------------------------------------------------------------------------------


def save(name: str, kind: str, folder: Path) -> tuple[Path, dict[str, Any]]:
    """Write one zoo source; returns its path and the ``export()`` keyword arguments a user would pass."""
    spec = ZOO[name]
    if spec.framework == "torch":
        path = save_torch(name, kind, folder)
        kw: dict[str, Any] = {}
        if kind == "torchscript":  # it holds no signature, and loading it runs its code: the user says both
            from fwx.converters.base import ConvertOptions

            kw = {
                "inputs": list(spec.inputs),
                "outputs": list(spec.outputs),
                "convert": ConvertOptions(trust_model_code=True),
            }
        if spec.sequence:  # real ids and masks; --input keeps batch and sequence dynamic (examples alone pin S)
            kw["example_inputs"] = text_examples(spec)
            kw["inputs"] = list(spec.inputs)
        return path, kw
    kw = {} if spec.sequence else {"example_inputs": {"image": pixels(2)}}
    return save_keras(name, kind, folder), kw


def pixels(n: int) -> np.ndarray:
    """What a user passes as ``--example-inputs`` for a Keras image model: pixels in 0..255, the range its
    preprocessing layers expect (standard-normal noise, fwx's default, is far outside it: a deep random
    EfficientNet then amplifies float rounding into disagreements of 1e3 between correct artifacts)."""
    return np.random.default_rng(SEED + 1).uniform(0, 255, (max(n, 16), HW, HW, 3)).astype(np.float32)[:n]


def text_examples(spec: ZooModel) -> dict[str, np.ndarray]:
    """What a user passes as ``--example-inputs`` for a text model: ids in the vocabulary, a mask of 1s
    with padding at the end of the second row, segment ids 0 then 1. fwx tiles them to the sizes it
    validates at (two batch sizes, two lengths); generated integers (0..9 everywhere) are issue 12 item 8."""
    rng = np.random.default_rng(SEED)
    b, s = 2, 8
    out: dict[str, np.ndarray] = {}
    for name in (x.split(":")[0] for x in spec.inputs):
        if name == "input_ids":
            out[name] = rng.integers(0, VOCAB, (b, s)).astype(np.int64)
        elif name == "attention_mask":
            mask = np.ones((b, s), np.int64)
            mask[1, -3:] = 0
            out[name] = mask
        elif name == "token_type_ids":
            out[name] = np.repeat([[0] * (s // 2) + [1] * (s - s // 2)], b, axis=0).astype(np.int64)
    return out


ROWS: list[tuple[str, str]] = [(m.name, k) for m in ZOO.values() for k in m.kinds]
Builder = Callable[[str, str, Path], tuple[Path, dict[str, Any]]]


@contextlib.contextmanager
def _quiet() -> Any:
    """Exporters print progress to stdout and stderr; keep the test log readable."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


if __name__ == "__main__":  # build every source into a folder: python tests/zoo/models.py OUT [name ...]
    out = Path(sys.argv[1])
    wanted = sys.argv[2:] or list(ZOO)
    for n, k in ROWS:
        if n in wanted:
            p, _ = save(n, k, out / k)
            print(n, k, p)
