"""The image and audio steps on their own, without a server: which processors are refused and why, the CTC
decode's rules, the WAV reader's refusals; and that none of it imports transformers or torch."""

from __future__ import annotations

import io
import subprocess
import sys
import wave

import numpy as np
import pytest

from fwx.errors import InputError
from fwx.serving.tasks.audio import CtcVocab, read_wav
from fwx.serving.tasks.vision import parse_processor

VIT = {
    "image_processor_type": "ViTImageProcessor",
    "do_resize": True,
    "size": {"height": 8, "width": 12},
    "resample": 2,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}


def test_a_vit_processor_is_applied_as_resize_rescale_normalize() -> None:
    from PIL import Image

    proc = parse_processor("m", VIT)
    out = proc.apply(Image.new("RGB", (30, 20), (255, 0, 51)))
    assert out.shape == (3, 8, 12)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[:, 0, 0], [1.0, -1.0, 51 / 255 / 0.5 - 1.0], rtol=1e-6)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"image_processor_type": "BeitImageProcessor"}, "image processor 'BeitImageProcessor' is not one"),
        ({"size": {"shortest_edge": 224}}, "only do_resize with size {height, width} is applied"),
        ({"do_resize": False}, "only do_resize with size {height, width} is applied"),
        ({"do_center_crop": True}, "center crop and padding are not applied"),
        ({"resample": 9}, "resample 9 is not one of Pillow's filters"),
        ({"image_std": [0.5, 0, 0.5]}, "image_std holds a zero"),
        ({"image_mean": [0.5]}, "image_mean is not three numbers"),
        ({"size": {"height": 0, "width": 8}}, "is not positive integers"),
        ({"image_processor_type": "ConvNextImageProcessor"}, "only do_resize with size {shortest_edge} is applied"),
        ({"image_processor_type": "ConvNextImageProcessor", "size": 8, "crop_pct": 1.5}, "crop_pct 1.5 is not"),
    ],
)
def test_other_processors_are_refused_naming_why(change: dict[str, object], fragment: str) -> None:
    with pytest.raises(InputError) as err:
        parse_processor("m", VIT | change)
    assert fragment in str(err.value)
    assert "pixel_values tensor" in str(err.value)


def test_legacy_integer_sizes_read_as_transformers_reads_them() -> None:
    vit = parse_processor("m", VIT | {"size": 12, "image_processor_type": "ViTFeatureExtractor"})
    assert (vit.height, vit.width, vit.crop_pct) == (12, 12, None)
    legacy = {"feature_extractor_type": "ConvNextFeatureExtractor", "size": 224, "crop_pct": 0.875}
    convnext = parse_processor("m", legacy)
    assert (convnext.height, convnext.width, convnext.crop_pct, convnext.resample) == (224, 224, 0.875, 3)
    assert convnext._resize_to((300, 200)) == (384, 256)  # the short side to int(224 / 0.875), the ratio kept
    assert parse_processor("m", legacy | {"size": 384}).crop_pct is None  # from 384 up: resized to the square


def test_ctc_decode_collapses_repeats_drops_pad_and_spaces_words() -> None:
    vocab = CtcVocab({0: "<pad>", 1: "|", 2: "a", 3: "b"}, "<unk>", "<pad>", "|", " ", lower=False, clean_up=False)
    # a a pad a | | b 9: repeats collapse, the pad keeps two a's apart, the delimiter is a space, 9 is unknown
    assert vocab.decode(np.array([2, 2, 0, 2, 1, 1, 3, 9, 1])) == "aa b<unk>"
    assert vocab.decode(np.array([0, 0])) == ""


def _wav(frames: bytes, rate: int = 8000, channels: int = 1, width: int = 2) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(frames)
    return out.getvalue()


def test_wav_samples_are_pcm16_over_32768() -> None:
    x = read_wav(_wav(np.array([0, 16384, -32768, 32767], "<i2").tobytes()), 0, 8000, [10**9])
    np.testing.assert_array_equal(x, np.array([0, 0.5, -1, 32767 / 32768], np.float32))


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (_wav(b"\0\0" * 8, rate=16000), "clip 3 is sampled at 16000 Hz; the model takes 8000 Hz"),
        (_wav(b"\0" * 8, width=1), "clip 3 has 1 channel(s) of 8-bit samples"),
        (b"RIFF", "clip 3 is not a PCM WAV file"),
        (_wav(b"\0\0" * 8)[:-4], "clip 3 is truncated: 6 of 8 samples"),
    ],
)
def test_wav_refusals(data: bytes, fragment: str) -> None:
    with pytest.raises(InputError) as err:
        read_wav(data, 3, 8000, [10**9])
    assert fragment in str(err.value)


def test_the_request_budget_counts_every_clip() -> None:
    budget = [12]
    read_wav(_wav(b"\0\0" * 8), 0, 8000, budget)
    with pytest.raises(InputError, match="over 300 s in all"):
        read_wav(_wav(b"\0\0" * 8), 1, 8000, budget)


def test_the_media_tasks_import_neither_transformers_nor_torch() -> None:
    code = (
        "import sys, fwx.serving.tasks.plane, fwx.serving.tasks.vision, fwx.serving.tasks.audio;"
        "bad = {'transformers', 'torch', 'tensorflow'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
