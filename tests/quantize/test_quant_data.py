"""Calibration/eval data readers: layouts, streaming, preprocessing, batching (numpy + Pillow only)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from fwx.errors import UsageError
from fwx.quantize import preprocess
from fwx.quantize.data import ImageSource, NpzSource, PerInputNpySource, PerSampleSource, open_source, pick
from fwx.quantize.stream import BatchStream, batch_size_for, stride_for, uniform_batches
from fwx.signature import Signature, parse_tensor_spec

SIG = Signature((parse_tensor_spec("image:float32[N,1,8,8]"),))
TWO = Signature((parse_tensor_spec("a:float32[N,3]"), parse_tensor_spec("b:int64[N,2]")))


def _data(n: int = 10) -> np.ndarray:
    return np.arange(n * 64, dtype=np.float32).reshape(n, 1, 8, 8)


def _all(src, sig: Signature, n: int) -> list[dict[str, np.ndarray]]:
    return list(src.samples(sig, n))


def test_pick_is_evenly_spaced_and_complete() -> None:
    assert pick(5, 10) == [0, 1, 2, 3, 4]
    assert pick(100, 5) == [0, 25, 50, 74, 99]
    assert len(pick(1000, 999)) == 999


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_rows_stream_equal_the_arrays(tmp_path: Path, compressed: bool) -> None:
    x = _data(10)
    path = tmp_path / "c.npz"
    (np.savez_compressed if compressed else np.savez)(path, image=x, labels=np.arange(10))
    src = open_source(path, SIG)
    assert isinstance(src, NpzSource)
    assert src.count == 10
    src.check(SIG, 10)
    got = _all(src, SIG, 4)
    assert [g["image"].shape for g in got] == [(1, 1, 8, 8)] * 4
    np.testing.assert_array_equal(np.concatenate([g["image"] for g in got]), x[pick(10, 4)])
    np.testing.assert_array_equal(src.labels(), np.arange(10))


def test_npz_is_streamed_not_loaded(tmp_path: Path) -> None:
    x = np.random.default_rng(0).random((400, 4096), dtype=np.float32)  # 6.5 MB
    path = tmp_path / "big.npz"
    np.savez(path, a=x[:, :3], b=np.zeros((400, 2), np.int64), big=x)
    sig = Signature((*TWO.inputs, parse_tensor_spec("big:float32[N,4096]")))
    src = open_source(path, sig)
    tracemalloc.start()
    total = sum(float(s["big"].sum()) for s in src.samples(sig, 400))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert total == pytest.approx(float(x.sum(dtype=np.float64)), rel=1e-4)
    assert peak < x.nbytes / 10, f"peak {peak} bytes: the reader loaded the whole array"


def test_per_input_npy_folder_and_per_sample_files_agree(tmp_path: Path) -> None:
    x = _data(6)
    per_input = tmp_path / "per_input"
    per_input.mkdir()
    np.save(per_input / "image.npy", x)
    np.save(per_input / "labels.npy", np.arange(6))
    per_sample = tmp_path / "per_sample"
    per_sample.mkdir()
    for i in range(6):  # with and without the batch axis: both fit
        np.save(per_sample / f"{i:03d}.npy", x[i] if i % 2 else x[i : i + 1])
    a, b = open_source(per_input, SIG), open_source(per_sample, SIG)
    assert isinstance(a, PerInputNpySource)
    assert isinstance(b, PerSampleSource)
    for src in (a, b):
        src.check(SIG, 6)
    np.testing.assert_array_equal(
        np.concatenate([s["image"] for s in _all(a, SIG, 6)]), np.concatenate([s["image"] for s in _all(b, SIG, 6)])
    )
    np.testing.assert_array_equal(a.labels(), np.arange(6))


def test_per_sample_npz_files_feed_multi_input_models(tmp_path: Path) -> None:
    for i in range(3):
        np.savez(tmp_path / f"s{i}.npz", a=np.full((3,), i, np.float64), b=np.full((1, 2), i, np.int32))
    src = open_source(tmp_path, TWO)
    src.check(TWO, 3)
    got = _all(src, TWO, 3)
    assert got[2]["a"].dtype == np.float32
    assert got[2]["a"].shape == (1, 3)
    assert got[2]["b"].dtype == np.int64
    assert got[2]["b"].tolist() == [[2, 2]]


def _write_images(folder: Path, x: np.ndarray, labels: np.ndarray) -> None:
    from PIL import Image

    for i, (img, label) in enumerate(zip(x, labels, strict=True)):
        (folder / str(label)).mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.uint8(np.round(img[0] * 255))).save(folder / str(label) / f"{i:04d}.png")


def test_image_folder_preprocessing_and_class_labels(tmp_path: Path) -> None:
    x = np.random.default_rng(1).random((6, 1, 8, 8)).astype(np.float32)
    labels = np.array([0, 1, 2, 0, 1, 2])
    _write_images(tmp_path, x, labels)
    src = open_source(tmp_path, SIG)
    assert isinstance(src, ImageSource)
    assert src.count == 6
    src.check(SIG, 6)
    got = np.concatenate([s["image"] for s in _all(src, SIG, 6)])
    order = sorted(range(6), key=lambda i: (labels[i], i))  # files sorted by class folder
    np.testing.assert_allclose(got, x[order], atol=1 / 255)
    assert src.labels().tolist() == sorted(labels.tolist())


def test_preprocess_options_resolve_against_the_model() -> None:
    spec = parse_tensor_spec("x:float32[N,3,32,32]")
    pre = preprocess.resolve(preprocess.parse("resize=16x24,scale=1/255,mean=0.485,0.456,0.406,std=0.5"), spec)
    assert pre.size == (16, 24)
    assert pre.layout == "nchw"
    assert pre.mode == "RGB"
    assert pre.mean == (0.485, 0.456, 0.406)
    assert pre.std == (0.5, 0.5, 0.5)
    assert pre.scale == pytest.approx(1 / 255)
    nhwc = preprocess.resolve({}, parse_tensor_spec("x:uint8[1,224,224,3]"))
    assert (nhwc.layout, nhwc.size, nhwc.scale, nhwc.dtype) == ("nhwc", (224, 224), 1.0, "uint8")
    with pytest.raises(UsageError, match="unknown preprocessing option"):
        preprocess.parse("resize=8x8,gamma=2")
    with pytest.raises(UsageError, match="3 channel"):
        preprocess.resolve(preprocess.parse("mean=0.1,0.2"), spec)
    with pytest.raises(UsageError, match="dynamic image size"):
        preprocess.resolve({}, parse_tensor_spec("x:float32[N,3,H,W]"))


def test_random_source_is_seeded_and_shaped() -> None:
    a = _all(open_source("random", SIG, random_count=3), SIG, 3)
    b = _all(open_source("random", SIG, random_count=3), SIG, 3)
    assert len(a) == 3
    assert a[0]["image"].shape == (1, 1, 8, 8)
    np.testing.assert_array_equal(a[2]["image"], b[2]["image"])


def test_batch_stream_follows_orts_strided_protocol(tmp_path: Path) -> None:
    x = _data(10)
    np.savez(tmp_path / "c.npz", image=x)
    stream = BatchStream(open_source(tmp_path / "c.npz", SIG), SIG, 10, batch_size_for(SIG, 4))
    assert len(stream) == 3  # 4 + 4 + 2
    seen = []
    stride = stride_for(len(stream), 4, max_samples=4)
    assert stride == 1
    for start in range(0, len(stream), stride):  # what quantize_static does with CalibStridedMinMax
        stream.set_range(start_index=start, end_index=start + stride)
        while (batch := stream.get_next()) is not None:
            seen.append(batch["image"])
    np.testing.assert_array_equal(np.concatenate(seen), x)
    assert [b["image"].shape[0] for b in stream] == [4, 4, 2]  # iterating restarts from the top


def test_stride_divides_the_batches() -> None:
    assert stride_for(13, 16) == 1
    assert stride_for(12, 16) == 4
    assert stride_for(63, 1) == 63
    assert stride_for(100, 1) == 50
    assert batch_size_for(Signature((parse_tensor_spec("x:float32[1,3]"),))) == 1


def test_uniform_batches_keep_one_shape_per_stride() -> None:
    assert uniform_batches(1000, 16) == (1000, 10)
    assert uniform_batches(208, 16) == (208, 16)
    assert uniform_batches(997, 16) == (992, 16)  # a prime: round down rather than 997 batches of one
    assert uniform_batches(5, 16) == (5, 5)
    assert uniform_batches(7, 1) == (7, 1)
