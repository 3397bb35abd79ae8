"""Encoded images in, the image classifier's labels out: KServe v2 ``BYTES`` holding PNG or JPEG files.

Decoding is bounded before it starts: Pillow opens only the PNG and JPEG
decoders, the header's pixel count is checked before ``load()`` reads any
pixel data, and each image is shrunk to the model's size before the next is
decoded. The version's ``preprocessor_config.json`` is applied here, in
Pillow and numpy, for the processors whose steps fwx implements exactly (the
PIL path of transformers: resize with the processor's resample, rescale in
float64 then float32, normalize); any other processor is refused and the
version's ``pixel_values`` tensor interface still works.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fwx.errors import InputError
from fwx.serving.tasks.assets import json_asset
from fwx.serving.tasks.media import Cached, files
from fwx.serving.tasks.postprocess import top_labels
from fwx.serving.tasks.textinfer import jsonlist

if TYPE_CHECKING:
    from PIL import Image

    from fwx.serving.batching.hooks import ModelSlot
    from fwx.serving.models import LoadedModel
    from fwx.serving.types import InferRequest, InferResponse, InferTensor

FORMATS = ("PNG", "JPEG")
MAX_PIXELS = 1 << 24  # per image (16.8 MP: 4096 x 4096); Pillow's own bomb check is at 179 MP
MAX_REQUEST_PIXELS = 1 << 26  # all images of one request, which bounds its decoding time
MAX_IMAGE_BYTES = 32 << 20
TOP_K = 5  # the image classification pipeline's default
RESAMPLE = range(6)  # Pillow's NEAREST, LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING (PILImageResampling)
#: The processor families whose steps fwx applies exactly, with their defaults: ViT resizes to a fixed
#: {height, width}; ConvNeXt (ResNet, ConvNeXt, RegNet folders) resizes the shortest edge to size / crop_pct,
#: keeping the aspect ratio, and crops the centre square (or resizes to the square from 384 up).
FAMILIES = {"ViT": 2, "ConvNext": 3}  # family -> default resample
PROCESSORS = frozenset(
    f"{family}{suffix}"
    for family in FAMILIES
    for suffix in ("ImageProcessor", "ImageProcessorFast", "ImageProcessorPil", "FeatureExtractor")
)


@dataclass(frozen=True)
class ImageProcessor:
    """A ViT- or ConvNeXt-style processor read from ``preprocessor_config.json``."""

    height: int
    width: int
    resample: int
    rescale: float | None
    mean: tuple[float, float, float] | None
    std: tuple[float, float, float] | None
    crop_pct: float | None = None  # ConvNeXt below 384: resize the shortest edge to height / crop_pct, crop

    def apply(self, image: Image.Image) -> np.ndarray:
        """An RGB image as the model's ``(3, height, width)`` float32 pixels."""
        resized = image.resize(self._resize_to(image.size), resample=self.resample, reducing_gap=None)
        if resized.size != (self.width, self.height):  # the centre crop; Pillow's crop copies pixels unchanged
            left, top = (resized.width - self.width) // 2, (resized.height - self.height) // 2
            resized = resized.crop((left, top, left + self.width, top + self.height))
        pixels: np.ndarray = np.asarray(resized)
        if self.rescale is not None:
            pixels = (pixels.astype(np.float64) * self.rescale).astype(np.float32)
        else:
            pixels = pixels.astype(np.float32)
        if self.mean is not None and self.std is not None:
            pixels = (pixels - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        return np.ascontiguousarray(pixels.transpose(2, 0, 1))

    def _resize_to(self, size: tuple[int, int]) -> tuple[int, int]:
        """(width, height) before the crop: transformers' ``get_resize_output_image_size`` for ConvNeXt."""
        if self.crop_pct is None:
            return self.width, self.height
        width, height = size
        short_side = int(self.height / self.crop_pct)
        short, long = (width, height) if width <= height else (height, width)
        new_long = int(short_side * long / short)
        return (short_side, new_long) if width <= height else (new_long, short_side)


@dataclass(frozen=True)
class VisionAssets:
    config: dict[str, Any]
    processor: ImageProcessor
    input_name: str
    dtype: np.dtype[Any]


_CACHE = Cached()


def vision_assets(model: LoadedModel) -> VisionAssets:
    """The version's processor and labels, read once (a 400 naming what is missing or not supported)."""
    return _CACHE.get(model, lambda: _load(model), VisionAssets)


def _load(model: LoadedModel) -> VisionAssets:
    inputs = model.signature.inputs
    if len(inputs) != 1 or len(inputs[0].shape) != 4 or inputs[0].dtype not in ("float32", "float16", "float64"):
        raise InputError(f"model {model.name} takes tensors, not images: its input is not one batch of pixels")
    processor = parse_processor(model.name, json_asset(model, "preprocessor_config.json"))
    config = json_asset(model, "config.json") if "config.json" in model.manifest.assets else {}
    return VisionAssets(config, processor, inputs[0].name, np.dtype(inputs[0].dtype))


def parse_processor(model: str, doc: dict[str, Any]) -> ImageProcessor:
    """The processor's steps, refusing any processor or setting whose steps fwx does not apply exactly."""
    kind = doc.get("image_processor_type") or doc.get("feature_extractor_type")
    family = next((f for f in FAMILIES if isinstance(kind, str) and kind.startswith(f)), "")
    if kind not in PROCESSORS:
        why: str | None = f"image processor {kind!r} is not one fwx applies"
    else:
        why = _unsupported(doc, family)
    if why:
        raise InputError(
            f"model {model}: {why} (fwx applies the ViT and ConvNext image processors)",
            hint="send the preprocessed pixel_values tensor instead; the tensor interface still works",
        )
    height, width, crop_pct = _size(doc, family)
    normalize = doc.get("do_normalize", True)
    return ImageProcessor(
        height,
        width,
        int(doc.get("resample", FAMILIES[family])),
        float(doc.get("rescale_factor", 1 / 255)) if doc.get("do_rescale", True) else None,
        _triple(doc.get("image_mean", (0.5, 0.5, 0.5))) if normalize else None,
        _triple(doc.get("image_std", (0.5, 0.5, 0.5))) if normalize else None,
        crop_pct,
    )


def _size(doc: dict[str, Any], family: str) -> tuple[int, int, float | None]:
    """(height, width, crop_pct): an integer ``size`` is the square (ViT) or the shortest edge (ConvNeXt),
    as transformers reads a legacy config."""
    size = doc["size"]
    if family == "ViT":
        return (size, size, None) if isinstance(size, int) else (size["height"], size["width"], None)
    edge = size if isinstance(size, int) else size["shortest_edge"]
    return edge, edge, float(doc.get("crop_pct", 224 / 256)) if edge < 384 else None


def _unsupported(doc: dict[str, Any], family: str) -> str | None:
    size = doc.get("size")
    keys = {"height", "width"} if family == "ViT" else {"shortest_edge"}
    if doc.get("do_resize", True) is not True or not (
        isinstance(size, int) or (isinstance(size, dict) and set(size) == keys)
    ):
        return f"only do_resize with size {{{', '.join(sorted(keys))}}} is applied"
    values = [size] if isinstance(size, int) else list(size.values())
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 4096 for v in values):
        return f"size {size} is not positive integers"
    crop_pct = doc.get("crop_pct", 224 / 256)
    if family != "ViT" and (not isinstance(crop_pct, (int, float)) or not 0.1 <= crop_pct <= 1):
        return f"crop_pct {crop_pct!r} is not a number in [0.1, 1]"
    if doc.get("resample", FAMILIES[family]) not in RESAMPLE:
        return f"resample {doc.get('resample')!r} is not one of Pillow's filters"
    if doc.get("do_center_crop") or doc.get("do_pad"):
        return "center crop and padding are not applied"
    for key in ("image_mean", "image_std"):
        value = doc.get(key, (0.5, 0.5, 0.5))
        if (
            not isinstance(value, (list, tuple))
            or len(value) != 3
            or not all(isinstance(v, (int, float)) for v in value)
        ):
            return f"{key} is not three numbers"
    if any(v == 0 for v in doc.get("image_std", (0.5,))):
        return "image_std holds a zero"
    if not isinstance(doc.get("rescale_factor", 1 / 255), (int, float)):
        return "rescale_factor is not a number"
    return None


def _triple(value: Any) -> tuple[float, float, float]:
    a, b, c = (float(v) for v in value)
    return a, b, c


def decode(raw: bytes, index: int, budget: list[int]) -> Image.Image:
    """One element as an RGB image (EXIF orientation applied, as transformers' ``load_image``), refusing
    anything but a complete PNG or JPEG within the pixel limits; ``budget`` holds the request's pixels left."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if len(raw) > MAX_IMAGE_BYTES:
        raise InputError(f"image {index} is over {MAX_IMAGE_BYTES >> 20} MiB")
    try:
        image = Image.open(io.BytesIO(raw), formats=FORMATS)
    except UnidentifiedImageError:
        raise InputError(f"image {index} is not a PNG or JPEG file", hint="send PNG or JPEG bytes") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputError(f"image {index} is over {MAX_PIXELS} pixels", hint="send a smaller image") from None
    except Exception as exc:  # noqa: BLE001 - a decoder's header parser raises many types on bad bytes
        raise InputError(f"image {index} cannot be read: {_first(exc)}", hint="send a complete PNG or JPEG") from None
    with image:
        width, height = image.size
        if width * height > MAX_PIXELS:
            raise InputError(
                f"image {index} is {width}x{height}, over {MAX_PIXELS} pixels", hint="send a smaller image"
            )
        budget[0] -= width * height
        if budget[0] < 0:
            raise InputError(f"the request's images are over {MAX_REQUEST_PIXELS} pixels in all", hint="send fewer")
        try:
            image.load()
            return ImageOps.exif_transpose(image).convert("RGB")
        except Exception as exc:  # noqa: BLE001 - truncated or corrupt data: OSError, SyntaxError, zlib.error ...
            raise InputError(
                f"image {index} cannot be decoded: {_first(exc)}", hint="send a complete PNG or JPEG"
            ) from None


def _first(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def pixels(assets: VisionAssets, tensor: InferTensor) -> np.ndarray:
    """Every element of a BYTES tensor decoded and preprocessed: ``(n, 3, height, width)``."""
    budget = [MAX_REQUEST_PIXELS]
    rows = [assets.processor.apply(decode(raw, i, budget)) for i, raw in enumerate(files(tensor, "image"))]
    return np.stack(rows).astype(assets.dtype, copy=False)


def _top_k(request: InferRequest) -> int:
    value = request.parameters.get("top_k", TOP_K)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError("parameter top_k must be a positive integer")
    return value  # at most the number of labels: top_labels cuts it


async def run_image_task(
    model: LoadedModel, slot: ModelSlot, request: InferRequest, deadline: float | None
) -> InferResponse:
    """The top labels of each image (the pipeline's answer), the images batched with the version's others."""
    assets = await asyncio.to_thread(vision_assets, model)
    if len(request.inputs) != 1:
        raise InputError(f"image classification takes one BYTES input of images, not {len(request.inputs)}")
    k = _top_k(request)
    batch = await asyncio.to_thread(pixels, assets, request.inputs[0])
    outputs = await slot.batcher.submit({assets.input_name: batch}, len(batch), deadline)
    return jsonlist(model, request, top_labels(assets.config, np.asarray(dict(outputs)["logits"]), k))
