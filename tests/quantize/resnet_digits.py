"""A tiny ResNet with torchvision's own stem and BasicBlocks, trained briefly on digits upscaled to 32x32.

torchvision's stem pools with ``MaxPool2d(3, stride=2, padding=1)``; through
ONNX and SavedModel that padding used to be a PADV2 with float32's lowest value,
which int8 calibration took into the range of the activation before it (scale
~1e36): LiteRT's XNNPACK delegate could not prepare the ResNet-18 INT8 TFLite
model. This network keeps that pattern (stem, residual adds, a downsampling
block, global average pool) at 1/16 of the width so it trains and exports in
seconds.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

SIZE = 32


def build() -> Any:
    import torch
    from torch import nn

    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    from torchvision.models.resnet import BasicBlock

    class TinyResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = BasicBlock(8, 8)
            down = nn.Sequential(nn.Conv2d(8, 16, 1, 2, bias=False), nn.BatchNorm2d(16))
            self.layer2 = BasicBlock(8, 16, 2, down)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(16, 10)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(image))))
            x = self.layer2(self.layer1(x))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return TinyResNet()


def upscale(x: np.ndarray) -> np.ndarray:
    """[N,1,8,8] intensities 0..16 -> [N,1,32,32] in 0..1 (nearest neighbour, as a camera image would be)."""
    return (np.repeat(np.repeat(x, SIZE // 8, axis=2), SIZE // 8, axis=3) / 16.0).astype(np.float32)


def train(x: np.ndarray, y: np.ndarray, *, epochs: int = 4, seed: int = 0) -> Any:
    import torch

    from samples.digits import fit

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fit(build, x, y, epochs=epochs, seed=seed, lr=3e-3)
    finally:
        torch.set_num_threads(threads)


def write(folder: Path, digits: Any) -> tuple[Path, Path, Path, float]:
    """The trained weights, calibration data (training split), labelled eval data (held-out split) and the
    float model's held-out accuracy."""
    import torch

    x_tr, x_te = upscale(digits.x_train), upscale(digits.x_test)
    y_tr = digits.module.load_split()[1]
    model = train(x_tr, y_tr)
    weights = folder / "resnet.pt"
    torch.save(model.state_dict(), weights)
    calib = folder / "resnet_calib.npz"
    np.savez(calib, image=x_tr[:64])
    evaluation = folder / "resnet_eval.npz"
    np.savez(evaluation, image=x_te, labels=digits.y_test)
    with torch.no_grad():
        acc = float((model(torch.from_numpy(x_te)).argmax(-1).numpy() == digits.y_test).mean())
    return weights, calib, evaluation, acc
