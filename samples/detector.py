"""A small YOLO-style detector on synthetic shapes: the INT8 case object detectors are known for.

The data set is drawn in code (no download): 64x64 RGB images on a dim noisy
background with 1-3 filled shapes, 3 classes (rectangle, circle, triangle) in
random colours and sizes. The network is a 4-conv backbone down to an 8x8 grid
(stride 8) with one prediction per cell, YOLO style: objectness, the centre as
a sigmoid offset inside the cell, width/height as a sigmoid fraction of the
image, and class probabilities.

Decoding runs inside the exported graph: the single output ``detections``
``[N, 64, 4 + 3]`` holds boxes as pixel corners (x1, y1, x2, y2) and the
per-class scores (objectness x class probability), concatenated the way
YOLOv5's export does. That concatenation is what makes INT8 hard: one
activation range (0..64 px) has to carry both the boxes and the 0..1 scores,
so plain INT8 rounds every score to a multiple of about 0.25. Non-max
suppression is class-aware greedy NMS (IoU 0.5, numpy) on the decoded output,
run after the model (``nms``); ``samples/detector_nms.py`` builds the same NMS
as a graph for the formats that have the op (ONNX, TFLite, SavedModel).

mAP@0.5 is measured with pycocotools (``mean_ap``). Training takes ~10-30 s on
two cores with a fixed seed.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SIZE = 64
GRID = 8
STRIDE = SIZE // GRID
CLASSES = ("rectangle", "circle", "triangle")
INPUT_NAME = "image"
OUTPUT_NAME = "detections"
SEED = 0

Box = tuple[float, float, float, float, int]  # x1, y1, x2, y2, class


def _draw(img: np.ndarray, cls: int, box: tuple[int, int, int, int], colour: np.ndarray) -> None:
    x1, y1, x2, y2 = box
    yy, xx = np.mgrid[y1:y2, x1:x2]
    if cls == 0:
        mask = np.ones_like(yy, bool)
    elif cls == 1:
        cx, cy, rx, ry = (x1 + x2 - 1) / 2, (y1 + y2 - 1) / 2, (x2 - x1) / 2, (y2 - y1) / 2
        mask = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1
    else:  # apex at the top centre, base at the bottom
        t = (yy - y1 + 0.5) / (y2 - y1)
        half = t * (x2 - x1) / 2
        mask = np.abs(xx - (x1 + x2 - 1) / 2) <= half
    img[:, y1:y2, x1:x2][:, mask] = colour[:, None]


def make_shapes(n: int, seed: int = SEED) -> tuple[np.ndarray, list[list[Box]]]:
    """``n`` images float32 [n,3,64,64] in [0,1] and their boxes (pixel corners, class)."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(0.0, 0.15, (n, 3, SIZE, SIZE)).astype(np.float32)
    labels: list[list[Box]] = []
    for i in range(n):
        boxes: list[Box] = []
        for _ in range(int(rng.integers(1, 4))):
            for _try in range(20):
                w, h = (int(v) for v in rng.integers(12, 29, 2))
                x1, y1 = int(rng.integers(0, SIZE - w + 1)), int(rng.integers(0, SIZE - h + 1))
                if all(_iou((x1, y1, x1 + w, y1 + h), b[:4]) < 0.1 for b in boxes):
                    break
            cls = int(rng.integers(0, len(CLASSES)))
            _draw(images[i], cls, (x1, y1, x1 + w, y1 + h), rng.uniform(0.4, 1.0, 3).astype(np.float32))
            boxes.append((float(x1), float(y1), float(x1 + w), float(y1 + h), cls))
        labels.append(boxes)
    return images, labels


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def targets(labels: list[list[Box]]) -> np.ndarray:
    """Per-cell training targets [n, 8, 8, 5 + C]: obj, cx/cy offset in the cell, w/h fraction, one-hot class."""
    t = np.zeros((len(labels), GRID, GRID, 5 + len(CLASSES)), np.float32)
    for i, boxes in enumerate(labels):
        for x1, y1, x2, y2, cls in boxes:
            cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
            gx, gy = min(int(cx // STRIDE), GRID - 1), min(int(cy // STRIDE), GRID - 1)
            t[i, gy, gx, :5] = (1.0, cx / STRIDE - gx, cy / STRIDE - gy, (x2 - x1) / SIZE, (y2 - y1) / SIZE)
            t[i, gy, gx, 5 + cls] = 1.0
    return t


def build_model() -> Any:
    """Conv backbone to an 8x8 grid, a 1x1 head, and the decode (boxes in pixels + scores) in the graph."""
    import torch
    from torch import nn

    def block(cin: int, cout: int, stride: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU())

    class ShapesDetector(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = nn.Sequential(block(3, 8, 2), block(8, 16, 2), block(16, 32, 2), block(32, 32, 1))
            self.head = nn.Conv2d(32, 5 + len(CLASSES), 1)
            ys, xs = torch.meshgrid(torch.arange(GRID), torch.arange(GRID), indexing="ij")
            self.stride, self.half_size = float(STRIDE), SIZE / 2
            self.register_buffer("grid", torch.stack([xs, ys], -1).reshape(1, GRID * GRID, 2).float())

        def raw(self, image: torch.Tensor) -> torch.Tensor:
            return self.head(self.backbone(image)).flatten(2).transpose(1, 2)  # [N, 64, 5 + C]

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            p = torch.sigmoid(self.raw(image))
            centre = (p[..., 1:3] + self.grid) * self.stride
            half = p[..., 3:5] * self.half_size
            scores = p[..., :1] * p[..., 5:]
            return torch.cat([centre - half, centre + half, scores], -1)

    return ShapesDetector()


def train(images: np.ndarray, labels: list[list[Box]], *, epochs: int = 30, seed: int = SEED) -> Any:
    import torch

    torch.manual_seed(seed)
    model = build_model()
    x, t = torch.from_numpy(images), torch.from_numpy(targets(labels)).reshape(len(labels), GRID * GRID, -1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(64):
            raw, tb = model.raw(x[idx]), t[idx]
            pos = tb[..., 0] > 0
            loss = bce(raw[..., 0], tb[..., 0])
            loss = loss + 5 * ((torch.sigmoid(raw[..., 1:5])[pos] - tb[..., 1:5][pos]) ** 2).mean()
            loss = loss + bce(raw[..., 5:][pos], tb[..., 5:][pos])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def export_options(repo: Path) -> Any:
    """How the detector's state_dict is exported: ``fwx.exporter.ExportOptions`` with its signature pinned."""
    from fwx.exporter import ExportOptions

    return ExportOptions(
        out=repo,
        name="detector",
        model_class="samples.detector:build_model",
        inputs=["image:float32[N,3,64,64]"],
        outputs=["detections"],
    )


def nms(detections: np.ndarray, *, iou: float = 0.5, min_score: float = 0.01) -> list[np.ndarray]:
    """Class-aware greedy NMS per image: rows (x1, y1, x2, y2, score, class). The server-side step."""
    out = []
    for det in np.asarray(detections, np.float32):
        cls, best = det[:, 4:].argmax(1), det[:, 4:].max(1)
        rows = [i for i in np.argsort(-best, kind="stable") if best[i] >= min_score]
        keep: list[int] = []
        for i in rows:
            if all(cls[k] != cls[i] or _iou(tuple(det[k, :4]), tuple(det[i, :4])) <= iou for k in keep):
                keep.append(i)
        out.append(np.concatenate([det[keep, :4], best[keep, None], cls[keep, None]], 1))
    return out


def mean_ap(predictions: list[np.ndarray], labels: list[list[Box]]) -> float:
    """COCO-style mAP@0.5 (pycocotools), in points (0..100)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt: dict[str, Any] = {"images": [], "annotations": [], "categories": [{"id": i} for i in range(len(CLASSES))]}
    dets = []
    for i, (boxes, pred) in enumerate(zip(labels, predictions, strict=True)):
        gt["images"].append({"id": i, "width": SIZE, "height": SIZE})
        for x1, y1, x2, y2, cls in boxes:
            w, h = x2 - x1, y2 - y1
            gt["annotations"].append(
                {
                    "id": len(gt["annotations"]) + 1,
                    "image_id": i,
                    "category_id": cls,
                    "bbox": [x1, y1, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
        for x1, y1, x2, y2, score, cls in pred:
            dets.append({"image_id": i, "category_id": int(cls), "bbox": [x1, y1, x2 - x1, y2 - y1], "score": score})
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = gt
        coco.createIndex()
        ev = COCOeval(coco, coco.loadRes(dets) if dets else COCO(), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return round(float(ev.stats[1]) * 100, 4)


def map_scorer(images: np.ndarray, labels: list[list[Box]]) -> Callable[[Callable[..., Any]], float]:
    """A score function for ``fwx.quantize.budget_fit``: a model runner -> mAP@0.5 on these images."""

    def score(run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]) -> float:
        dets = np.concatenate([run({INPUT_NAME: images[i : i + 64]})[OUTPUT_NAME] for i in range(0, len(images), 64)])
        return mean_ap(nms(dets), labels)

    return score


def predict_torch(model: Any, images: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(images)).numpy()
