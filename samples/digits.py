"""The digits CNN: a small, deterministic image classifier for quantisation work.

It trains on scikit-learn's bundled 8x8 digits (no download) in a few seconds
on two cores, with a fixed seed and a stratified held-out split, so the INT8
accuracy bar (<= 0.5 point of top-1 lost) is measured on data the model never
saw. The network is big enough (~150k parameters, ~600 KB in float32) that
weights, not file overhead, dominate the artifact size, so the ~4x shrink of
INT8 shows.

The same trained weights are also copied into an equivalent Keras model, which
gives a SavedModel for the TFLite path without depending on an ONNX->TF
translator. Both take ``image:float32[N,1,8,8]`` (NCHW, raw pixel intensities in [0, 16]) and
return ``logits:float32[N,10]``.

Run ``python samples/digits.py OUT_DIR`` to write digits.pt (state_dict; the
factory is ``build_model``),
digits.onnx, digits.savedmodel/, calib.npz (``image``: training split) and
eval.npz (``image`` + ``labels``: held-out split).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SEED = 0
TEST_FRACTION = 0.25
INPUT_NAME = "image"
OUTPUT_NAME = "logits"


def load_split(seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test); x is float32 [N,1,8,8] in [0, 16], y is int64.

    The pixels stay raw intensities (0..16, as sklearn ships them), the way many
    pipelines feed 0..255 images: random calibration data (standard normal) then
    gets the activation ranges wrong, which is what the benchmark shows.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = data.images.astype(np.float32)[:, None, :, :]
    y = data.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=TEST_FRACTION, random_state=seed, stratify=y)
    return x_tr, y_tr, x_te, y_te


def build_model() -> Any:
    """Conv(1->32) Conv(32->64) MaxPool Linear(1024->128) Linear(128->10), ReLU between."""
    import torch
    from torch import nn

    class DigitsCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
            self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
            self.pool = nn.MaxPool2d(2)
            self.fc1 = nn.Linear(64 * 4 * 4, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.conv1(image))
            h = self.pool(torch.relu(self.conv2(h)))
            h = torch.relu(self.fc1(torch.flatten(h, 1)))
            return self.fc2(h)

    return DigitsCNN()


def train(x: np.ndarray, y: np.ndarray, *, epochs: int = 15, seed: int = SEED) -> Any:
    """Adam, batch 64; deterministic for a given seed on CPU.

    One intra-op thread: the batches are tiny, and with several threads on a
    busy 2-core machine OpenMP spin-waits made training 8x slower.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fit(build_model, x, y, epochs=epochs, seed=seed, lr=2e-3)
    finally:
        torch.set_num_threads(threads)


def fit(build: Callable[[], Any], x: np.ndarray, y: np.ndarray, *, epochs: int, seed: int, lr: float) -> Any:
    """Seed, build, then Adam over batches of 64 in a seeded order; the model comes back in eval mode."""
    import torch

    torch.manual_seed(seed)
    model = build()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(xt), generator=gen).split(64):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    return model.eval()


def predict_torch(model: Any, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float((logits.argmax(-1) == labels).mean())


def export_onnx(model: Any, path: Path, *, opset: int = 17) -> Path:
    """Float32 ONNX with a dynamic batch axis and the pinned names."""
    import warnings

    import torch

    with warnings.catch_warnings():  # the TorchScript-based exporter is chosen on purpose (as fwx's torch2onnx)
        warnings.simplefilter("ignore", DeprecationWarning)  # "legacy exporter" and its internals' notices
        torch.onnx.export(
            model,
            (torch.zeros(1, 1, 8, 8),),
            str(path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            opset_version=opset,
            dynamo=False,
            dynamic_axes={INPUT_NAME: {0: "N"}, OUTPUT_NAME: {0: "N"}},
        )
    return path


def to_keras(model: Any) -> Any:
    """The same network in Keras (NHWC inside, NCHW at the input), with the trained weights copied."""
    import keras

    inp = keras.Input((1, 8, 8), name=INPUT_NAME)
    h = keras.layers.Permute((2, 3, 1))(inp)
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv1")(h)
    h = keras.layers.Conv2D(64, 3, padding="same", activation="relu", name="conv2")(h)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(128, activation="relu", name="fc1")(h)
    out = keras.layers.Dense(10, name="fc2")(h)
    km = keras.Model(inp, out, name="digits_cnn")
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    km.get_layer("conv1").set_weights([sd["conv1.weight"].transpose(2, 3, 1, 0), sd["conv1.bias"]])
    km.get_layer("conv2").set_weights([sd["conv2.weight"].transpose(2, 3, 1, 0), sd["conv2.bias"]])
    # torch flattens (C,H,W), Keras (H,W,C): reorder the first dense layer's rows to match.
    w1 = sd["fc1.weight"].reshape(128, 64, 4, 4).transpose(2, 3, 1, 0).reshape(1024, 128)
    km.get_layer("fc1").set_weights([w1, sd["fc1.bias"]])
    km.get_layer("fc2").set_weights([sd["fc2.weight"].T, sd["fc2.bias"]])
    return km


def export_savedmodel(keras_model: Any, path: Path) -> Path:
    """A SavedModel whose serving_default takes ``image`` and returns ``{"logits": ...}``."""
    import keras
    import tensorflow as tf

    archive = keras.export.ExportArchive()
    archive.track(keras_model)
    archive.add_endpoint(
        "serving_default",
        lambda image: {OUTPUT_NAME: keras_model(image)},
        input_signature=[tf.TensorSpec([None, 1, 8, 8], tf.float32, name=INPUT_NAME)],
    )
    archive.write_out(str(path), verbose=False)
    return path


def write_data(folder: Path, x_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> tuple[Path, Path]:
    """calib.npz (training images only) and eval.npz (held-out images + labels)."""
    folder.mkdir(parents=True, exist_ok=True)
    calib, ev = folder / "calib.npz", folder / "eval.npz"
    np.savez(calib, **{INPUT_NAME: x_train})
    np.savez(ev, **{INPUT_NAME: x_test, "labels": y_test})
    return calib, ev


def main(argv: list[str]) -> int:
    import torch

    out = Path(argv[0] if argv else "digits-out")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    x_tr, y_tr, x_te, y_te = load_split()
    model = train(x_tr, y_tr)
    print(
        f"trained in {time.perf_counter() - t0:.1f}s; held-out top-1 "
        f"{accuracy(predict_torch(model, x_te), y_te) * 100:.2f}% on {len(y_te)} samples"
    )
    torch.save(model.state_dict(), out / "digits.pt")
    export_onnx(model, out / "digits.onnx")
    export_savedmodel(to_keras(model), out / "digits.savedmodel")
    write_data(out, x_tr, x_te, y_te)
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
