"""Image preprocessing for calibration/eval folders of .jpg/.png files.

Calibration only helps if the images reach the model exactly as they will in
production, so the transform is explicit and recorded: resize to WxH, multiply
by ``scale``, subtract ``mean`` and divide by ``std`` per channel, lay out as
NCHW or NHWC. Written as ``resize=32x32,scale=1/255,mean=0.485,0.456,0.406,
std=0.229,0.224,0.225,layout=nchw,mode=rgb`` (a bare number continues the list
of the key before it) or passed as a dict with the same keys.
Anything not given is derived from the model's input spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fwx.errors import InputError, MissingDependencyError, UsageError, first_line
from fwx.signature import TensorSpec

KEYS = ("resize", "scale", "mean", "std", "layout", "mode")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")
HINT = "write e.g. resize=32x32,scale=1/255,mean=0.5,std=0.5,layout=nchw,mode=rgb"


@dataclass(frozen=True)
class Preprocess:
    """A resolved transform: every field set, ready to apply to one image."""

    size: tuple[int, int]  # (width, height)
    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]
    layout: str  # nchw | nhwc | hw
    mode: str  # L | RGB | BGR
    dtype: str

    def to_json(self) -> dict[str, Any]:
        return {
            "resize": f"{self.size[0]}x{self.size[1]}",
            "scale": self.scale,
            "mean": list(self.mean),
            "std": list(self.std),
            "layout": self.layout,
            "mode": self.mode,
            "dtype": self.dtype,
        }

    def apply(self, path: Path) -> np.ndarray:
        """Decode, convert, resize, normalise one image; returns one sample without a batch axis."""
        img = open_image(path, load=True)
        img = img.convert("L" if self.mode == "L" else "RGB")
        if img.size != self.size:
            img = img.resize(self.size, resample=2)  # PIL.Image.BILINEAR
        arr: np.ndarray = np.asarray(img, dtype=np.float32)
        if self.mode == "BGR":
            arr = arr[..., ::-1]
        arr = arr * np.float32(self.scale)
        if arr.ndim == 3:
            arr = (arr - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
            if self.layout == "nchw":
                arr = arr.transpose(2, 0, 1)
        else:
            arr = (arr - np.float32(self.mean[0])) / np.float32(self.std[0])
            if self.layout in ("nchw", "nhwc"):
                arr = arr[None] if self.layout == "nchw" else arr[..., None]
        if np.dtype(self.dtype).kind in "iu":
            info = np.iinfo(np.dtype(self.dtype))
            arr = np.clip(np.rint(arr), info.min, info.max)
        return np.ascontiguousarray(arr.astype(self.dtype))


def open_image(path: Path, *, load: bool = False) -> Any:
    """Open with Pillow; any decoding problem becomes one ``InputError`` naming the file."""
    try:
        from PIL import Image
    except ImportError:
        raise MissingDependencyError("pillow", "images", "reading calibration images") from None
    try:
        img = Image.open(path)
        if load:
            img.load()
        else:
            img.verify()  # checks headers/CRCs without decoding all pixels
        return img
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for bad files
        raise InputError(
            f"cannot read image {path}: {first_line(exc)}",
            hint="remove or replace the file; images must be .jpg/.png/.bmp/.gif/.webp",
        ) from exc


def parse(spec: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """``"resize=32x32,scale=1/255,mean=0.5,0.5,0.5"`` or a dict -> raw key/value dict."""
    if spec is None or spec == "":
        return {}
    if isinstance(spec, Mapping):
        raw = {str(k).lower(): v for k, v in spec.items()}
    else:
        raw = {}
        key = None
        for token in (t.strip() for t in str(spec).split(",") if t.strip()):
            if "=" in token:
                key, value = (x.strip() for x in token.split("=", 1))
                raw[key.lower()] = value
            elif key is not None and key.lower() in ("mean", "std"):
                raw[key.lower()] = f"{raw[key.lower()]},{token}"
            else:
                raise UsageError(f"cannot parse preprocessing option {token!r}", hint=HINT)
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise UsageError(f"unknown preprocessing option(s): {', '.join(unknown)}", hint=f"known: {', '.join(KEYS)}")
    return raw


def _number(text: Any, what: str) -> float:
    try:
        if isinstance(text, str) and "/" in text:
            num, den = text.split("/", 1)
            return float(num) / float(den)
        return float(text)
    except (TypeError, ValueError, ZeroDivisionError):
        raise UsageError(f"preprocessing {what}={text!r} is not a number", hint=HINT) from None


def _numbers(value: Any, what: str, channels: int) -> tuple[float, ...]:
    items = value if isinstance(value, (list, tuple)) else str(value).replace(";", ",").replace(":", ",").split(",")
    vals = tuple(_number(v, what) for v in items if str(v).strip())
    if len(vals) == 1:
        vals = vals * channels
    if len(vals) != channels:
        raise UsageError(
            f"preprocessing {what} has {len(vals)} values but the model takes {channels} channel(s)", hint=HINT
        )
    if what == "std" and any(v == 0 for v in vals):
        raise UsageError("preprocessing std must not be 0", hint=HINT)
    return vals


def _layout(spec: TensorSpec, given: str | None) -> str:
    """nchw/nhwc for rank-4 inputs (from the flag, else where a 1- or 3-sized axis sits); hw otherwise."""
    if spec.rank != 4:
        return "hw"  # [N,H,W] or [H,W]: grayscale without a channel axis
    if given:
        lay = str(given).lower()
        if lay not in ("nchw", "nhwc"):
            raise UsageError(f"preprocessing layout={given!r} is not nchw or nhwc", hint=HINT)
        return lay
    return "nhwc" if spec.shape[1] not in (1, 3) and spec.shape[3] in (1, 3) else "nchw"


def _size(raw: dict[str, Any], spec: TensorSpec, layout: str) -> tuple[int, int]:
    if "resize" in raw:
        try:
            w, h = (int(v) for v in str(raw["resize"]).lower().split("x"))
        except ValueError:
            raise UsageError(f"preprocessing resize={raw['resize']!r} is not WxH", hint=HINT) from None
        return w, h
    h_dim, w_dim = spec.shape[-3:-1] if layout == "nhwc" else spec.shape[-2:]
    if not (isinstance(h_dim, int) and isinstance(w_dim, int) and h_dim > 0 and w_dim > 0):
        raise UsageError(
            f"input {spec} has a dynamic image size; say what to resize calibration images to",
            hint="pass a preprocessing option resize=WxH",
        )
    return w_dim, h_dim


def resolve(raw: dict[str, Any], spec: TensorSpec) -> Preprocess:
    """Fill every option not given from the model input ``spec`` (size, layout, channels, dtype)."""
    if spec.rank not in (2, 3, 4):
        raise InputError(
            f"input {spec} does not look like an image (rank {spec.rank})",
            hint="use .npz/.npy calibration data for non-image inputs",
        )
    layout = _layout(spec, raw.get("layout"))
    c_dim = {"nchw": spec.shape[1], "nhwc": spec.shape[-1]}.get(layout, 1)
    channels = c_dim if isinstance(c_dim, int) and c_dim > 0 else 3
    w, h = _size(raw, spec, layout)
    mode = str(raw.get("mode") or ("L" if channels == 1 else "RGB")).upper()
    mode = "L" if mode in ("GRAY", "GREY", "L") else mode
    if mode not in ("L", "RGB", "BGR") or (mode == "L") != (channels == 1):
        raise UsageError(f"preprocessing mode={raw.get('mode')!r} does not fit {channels} channel(s)", hint=HINT)
    is_int = np.dtype(spec.dtype).kind in "iu"
    return Preprocess(
        size=(w, h),
        scale=_number(raw.get("scale", 1 if is_int else 1 / 255), "scale"),
        mean=_numbers(raw.get("mean", 0), "mean", channels),
        std=_numbers(raw.get("std", 1), "std", channels),
        layout=layout,
        mode=mode,
        dtype=spec.dtype,
    )
