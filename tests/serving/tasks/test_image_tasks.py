"""KServe v2 inference with PNG and JPEG bytes in answers what transformers' image classification pipeline
answers for the same ViT folder: the same labels in the same order, scores within 1e-5 of the pipeline with
transformers' PIL processor (the steps fwx applies) and within 2e-3 of its default torchvision processor (its
own resize rounds differently by at most one 8-bit level: 5e-4 at most measured on these images). Several
images per request and concurrent requests; hostile bytes are one clear 400 each and the server keeps serving.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import shutil
import struct
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.exporter import hf_folders as hf

pytestmark = pytest.mark.slow
PROCESSOR = {
    "image_processor_type": "ViTImageProcessor",
    "do_resize": True,
    "size": {"height": 16, "width": 16},
    "resample": 3,  # bicubic, not the default bilinear: the folder's own resample is applied
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.5, 0.4, 0.3],
    "image_std": [0.2, 0.3, 0.4],
}
SIZES = [(23, 31), (16, 16), (64, 48), (9, 40), (120, 7)]
#: ResNet's processor: the shortest edge to 16 / 0.875 = 18 keeping the aspect ratio, then the centre 16 x 16.
CONVNEXT = {
    "image_processor_type": "ConvNextImageProcessor",
    "do_resize": True,
    "size": {"shortest_edge": 16},
    "crop_pct": 0.875,
    "resample": 3,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225],
}


@pytest.fixture(scope="module")
def vit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(repository, source folder): ``vit`` with a ViT processor, ``deit`` with one fwx does not apply,
    ``resnet`` (beside the ViT folder) with ResNet's ConvNeXt processor."""
    from fwx.exporter import ExportOptions
    from fwx.exporter.parts import export_all

    root = tmp_path_factory.mktemp("vision")
    folder, task = hf.vit(root / "vit")
    (folder / "preprocessor_config.json").write_text(json.dumps(PROCESSOR))
    other = root / "deit"
    shutil.copytree(folder, other)
    (other / "preprocessor_config.json").write_text(
        json.dumps(PROCESSOR | {"image_processor_type": "DeiTImageProcessor", "do_center_crop": True})
    )
    resnet, _ = hf.resnet(root / "resnet")
    (resnet / "preprocessor_config.json").write_text(json.dumps(CONVNEXT))
    for name, src in (("vit", folder), ("deit", other), ("resnet", resnet)):
        results = export_all(str(src), ["onnx"], ExportOptions(out=root / "repo", task=task, name=name))
        assert all(r.ok for r in results), [r.failures for r in results]
    return root / "repo", folder


@pytest.fixture(scope="module")
def srv(vit: tuple[Path, Path], live_server: Callable[..., Any]) -> Any:
    return live_server(vit[0], load_probe=False, grpc_port=0)


def encoded(seed: int, size: tuple[int, int], fmt: str) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    smooth = np.linspace(0, 255, size[0] * size[1] * 3).reshape(*size, 3)  # noise over a ramp: resizing matters
    pixels = np.clip(smooth + rng.normal(0, 40, smooth.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


IMAGES = [encoded(i, s, "PNG" if i % 2 else "JPEG") for i, s in enumerate(SIZES)]


def infer(srv: Any, model: str, images: list[bytes], **params: Any) -> Any:
    """One request over REST with the binary tensor extension (tritonclient): the answers, or the response."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(srv.url.removeprefix("http://"), network_timeout=120)
    try:
        tensor = httpclient.InferInput("images", [len(images)], "BYTES")
        tensor.set_data_from_numpy(np.array(images, dtype=object), binary_data=True)
        try:
            result = client.infer(model, [tensor], parameters=params or None)
        except InferenceServerException as exc:
            return exc
        return [orjson.loads(x) for x in result.as_numpy("output")]
    finally:
        client.close()


def reference(folder: Path, images: list[bytes], *, pil: bool, family: str = "ViT") -> list[Any]:
    from PIL import Image

    tf = hf.transformers()
    processor = getattr(tf, f"{family}ImageProcessorPil")
    extra = {"image_processor": processor.from_pretrained(str(folder))} if pil else {}
    pipe = tf.pipeline("image-classification", model=str(folder), device="cpu", **extra)
    return [pipe(Image.open(io.BytesIO(b))) for b in images]


def same(got: list[Any], want: list[Any], tol: float) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert [x["label"] for x in g] == [x["label"] for x in w], (g, w)
        for x, y in zip(g, w, strict=True):
            assert math.isclose(x["score"], y["score"], abs_tol=tol), (g, w)


def test_images_answer_as_the_pipeline_does_in_one_request_and_concurrent_ones(srv: Any, vit: Any) -> None:
    got = infer(srv, "vit", IMAGES)
    same(got, reference(vit[1], IMAGES, pil=True), 1e-5)
    same(got, reference(vit[1], IMAGES, pil=False), 2e-3)
    assert len(got[0]) == 4  # the pipeline's top 5, cut to the model's 4 labels
    with ThreadPoolExecutor(8) as pool:
        alone = list(pool.map(lambda b: infer(srv, "vit", [b]), IMAGES * 3))
    same([a[0] for a in alone], got * 3, 1e-5)
    assert [len(a) for a in infer(srv, "vit", IMAGES[:2], top_k=2)] == [2, 2]
    assert "parameter top_k must be a positive integer" in str(infer(srv, "vit", IMAGES[:1], top_k=0))


def test_resnets_convnext_processor_answers_as_the_pipeline_does(srv: Any, vit: Any) -> None:
    resnet = vit[1].parent / "resnet"
    got = infer(srv, "resnet", IMAGES)
    same(got, reference(resnet, IMAGES, pil=True, family="ConvNext"), 1e-5)
    same(got, reference(resnet, IMAGES, pil=False), 2e-3)


def test_images_over_grpc(srv: Any, vit: Any) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        tensor = grpcclient.InferInput("args", [2], "BYTES")
        tensor.set_data_from_numpy(np.array(IMAGES[:2], dtype=object))
        result = client.infer("vit", [tensor])
        same([orjson.loads(x) for x in result.as_numpy("output")], reference(vit[1], IMAGES[:2], pil=True), 1e-5)
    finally:
        client.close()


@pytest.mark.parametrize("content_type", ["base64", "pil_image"])
def test_images_as_base64_in_json(srv: Any, content_type: str) -> None:
    """MLServer's codecs' marking: a JSON body carries each file base64-encoded."""
    data = [base64.b64encode(b).decode() for b in IMAGES[:3]]
    tensor = {"name": "images", "datatype": "BYTES", "shape": [3], "data": data}
    r = srv.request(
        "POST", "/v2/models/vit/infer", json={"inputs": [tensor | {"parameters": {"content_type": content_type}}]}
    )
    assert r.status_code == 200, r.text
    same([orjson.loads(d) for d in r.json()["outputs"][0]["data"]], infer(srv, "vit", IMAGES[:3]), 1e-6)
    bad = {"inputs": [tensor | {"data": ["not base64!"], "shape": [1], "parameters": {"content_type": "base64"}}]}
    r = srv.request("POST", "/v2/models/vit/infer", json=bad)
    assert r.status_code == 400
    assert "image 0 is not valid base64" in r.json()["error"]


def png_bomb(side: int) -> bytes:
    """A valid grey PNG of side x side zeros: a few hundred KiB that decode to side**2 bytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    z = zlib.compressobj(9)
    row = b"\x00" * (side + 1)
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    head = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def gif() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 20, 30)).save(out, format="GIF")
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "fragment"),
    [
        ("truncated png", IMAGES[1][: len(IMAGES[1]) // 2], "image 0 cannot be decoded"),
        ("decompression bomb", png_bomb(5_000), "image 0 is 5000x5000, over 16777216 pixels"),
        ("bomb over pillow's own limit", png_bomb(20_000), "image 0 is over 16777216 pixels"),
        ("gif", gif(), "image 0 is not a PNG or JPEG file"),
        ("random bytes", np.random.default_rng(1).bytes(4096), "image 0 is not a PNG or JPEG file"),
        ("empty", b"", "image 0 is not a PNG or JPEG file"),
    ],
)
def test_hostile_images_are_one_clear_400(srv: Any, name: str, data: bytes, fragment: str) -> None:
    r = srv.request(
        "POST",
        "/v2/models/vit/infer",
        content=_binary_body(data),
        headers={"Inference-Header-Content-Length": str(len(_binary_head(data)))},
    )
    assert r.status_code == 400, r.text
    message = r.json()["error"]
    assert fragment in message
    assert "\n" not in message
    assert infer(srv, "vit", IMAGES[:1])[0][0]["label"].startswith("LABEL_")  # still serving


def _binary_head(data: bytes) -> bytes:
    tensor = {"name": "images", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": len(data) + 4}}
    return orjson.dumps({"inputs": [tensor]})


def _binary_body(data: bytes) -> bytes:
    return _binary_head(data) + struct.pack("<I", len(data)) + data


def test_an_unsupported_processor_is_refused_and_tensors_still_work(srv: Any) -> None:
    r = infer(srv, "deit", IMAGES[:1])
    assert str(infer(srv, "deit", IMAGES[:1])) == str(r)  # the refusal is kept: the same line every time
    assert "image processor 'DeiTImageProcessor' is not one fwx applies" in str(r)
    assert "send the preprocessed pixel_values tensor instead" in str(r)
    body = {"inputs": [{"name": "pixel_values", "datatype": "FP32", "shape": [1, 3, 16, 16], "data": [0.1] * 768}]}
    ok = srv.request("POST", "/v2/models/deit/infer", json=body)
    assert ok.status_code == 200, ok.text
    assert ok.json()["outputs"][0]["shape"] == [1, 4]


def test_an_unsupported_processor_is_said_once_at_load(
    vit: tuple[Path, Path], live_server: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fwx.serving"):
        live_server(vit[0], load_probe=False)
    lines = [r.getMessage() for r in caplog.records if "DeiTImageProcessor" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("deit/1 takes tensors only: model deit: image processor 'DeiTImageProcessor'")
    assert not [r for r in caplog.records if r.getMessage().startswith(("vit/", "resnet/"))]
