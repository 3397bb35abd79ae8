"""KServe v2 inference with WAV bytes in answers what transformers' pipelines answer for the same Wav2Vec2
folders: audio classification's labels in the same order with scores within 1e-5 (float32 graphs, the same
samples), and a CTC model's transcript equal to the ASR pipeline's. Clips of several lengths in one request and
in concurrent ones; bad clips are one clear 400 each and the server keeps serving."""

from __future__ import annotations

import base64
import io
import json
import math
import wave
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.exporter import hf_folders as hf

pytestmark = pytest.mark.slow
RATE = 8000
LENGTHS = [400, 1234, 4000, 400, 20]  # 20: the shortest clip the two convolutions take


@pytest.fixture(scope="module")
def wav2vec2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """(repository, folders): ``cls`` (audio classification) and ``ctc`` (speech recognition), 8 kHz."""
    from fwx.exporter import ExportOptions
    from fwx.exporter.parts import export_all

    tf = hf.transformers()
    root = tmp_path_factory.mktemp("audio")
    folders = {}
    for name, build in (("cls", hf.wav2vec2_audio), ("ctc", hf.wav2vec2_ctc)):
        folder, task = build(root / name)
        tf.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=RATE, do_normalize=True).save_pretrained(folder)
        if name == "ctc":  # 16 ids as the model's vocab_size: pad, specials, the delimiter, letters
            vocab = {
                "<pad>": 0,
                "<s>": 1,
                "</s>": 2,
                "<unk>": 3,
                "|": 4,
                **{c: 5 + i for i, c in enumerate("etaoinshrdl")},
            }
            (root / "vocab.json").write_text(json.dumps(vocab))
            tf.Wav2Vec2CTCTokenizer(str(root / "vocab.json")).save_pretrained(folder)
        results = export_all(str(folder), ["onnx"], ExportOptions(out=root / "repo", task=task, name=name))
        assert all(r.ok for r in results), [r.failures for r in results]
        folders[name] = folder
    return root / "repo", folders


@pytest.fixture(scope="module")
def srv(wav2vec2: tuple[Path, dict[str, Path]], live_server: Callable[..., Any]) -> Any:
    return live_server(wav2vec2[0], load_probe=False)


def samples(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / RATE
    x = 0.5 * np.sin(2 * np.pi * (200 + 100 * seed) * t) + rng.normal(0, 0.1, n)
    return np.clip(np.round(x * 32767), -32768, 32767).astype("<i2")


def wav(pcm: np.ndarray, *, rate: int = RATE, channels: int = 1, width: int = 2) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


CLIPS = [samples(i, n) for i, n in enumerate(LENGTHS)]
WAVS = [wav(c) for c in CLIPS]


def infer(srv: Any, model: str, clips: list[bytes]) -> Any:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(srv.url.removeprefix("http://"), network_timeout=120)
    try:
        tensor = httpclient.InferInput("audio", [len(clips)], "BYTES")
        tensor.set_data_from_numpy(np.array(clips, dtype=object), binary_data=True)
        return [orjson.loads(x) for x in client.infer(model, [tensor]).as_numpy("output")]
    finally:
        client.close()


def reference(folder: Path, task: str) -> list[Any]:
    pipe = hf.transformers().pipeline(task, model=str(folder), device="cpu")
    return [pipe({"raw": c.astype(np.float32) / 32768.0, "sampling_rate": RATE}) for c in CLIPS]


def test_audio_classification_equals_the_pipeline(srv: Any, wav2vec2: Any) -> None:
    want = reference(wav2vec2[1]["cls"], "audio-classification")
    got = infer(srv, "cls", WAVS)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert [x["label"] for x in g] == [x["label"] for x in w], (g, w)
        assert all(math.isclose(x["score"], y["score"], abs_tol=1e-5) for x, y in zip(g, w, strict=True)), (g, w)
    with ThreadPoolExecutor(6) as pool:
        alone = list(pool.map(lambda b: infer(srv, "cls", [b])[0], WAVS * 2))
    assert [[x["label"] for x in a] for a in alone] == [[x["label"] for x in g] for g in got * 2]


def test_ctc_transcripts_equal_the_pipeline(srv: Any, wav2vec2: Any) -> None:
    want = reference(wav2vec2[1]["ctc"], "automatic-speech-recognition")
    got = infer(srv, "ctc", WAVS)
    assert got == [{"text": w["text"]} for w in want]
    assert any(w["text"] for w in want)  # the random model says something


def test_clips_as_base64_in_json(srv: Any) -> None:
    data = [base64.b64encode(b).decode() for b in WAVS[:2]]
    tensor = {
        "name": "audio",
        "datatype": "BYTES",
        "shape": [2],
        "data": data,
        "parameters": {"content_type": "base64"},
    }
    r = srv.request("POST", "/v2/models/ctc/infer", json={"inputs": [tensor]})
    assert r.status_code == 200, r.text
    assert [orjson.loads(d) for d in r.json()["outputs"][0]["data"]] == infer(srv, "ctc", WAVS[:2])


@pytest.mark.parametrize(
    ("name", "data", "fragment"),
    [
        ("44.1 kHz", wav(CLIPS[0], rate=44100), "clip 0 is sampled at 44100 Hz; the model takes 8000 Hz"),
        ("stereo", wav(np.repeat(CLIPS[0], 2), channels=2), "clip 0 has 2 channel(s) of 16-bit samples"),
        ("8-bit", wav(CLIPS[0].astype(np.uint8), width=1), "clip 0 has 1 channel(s) of 8-bit samples"),
        ("truncated", WAVS[2][:3000], "clip 0 is truncated"),
        ("random bytes", np.random.default_rng(2).bytes(2048), "clip 0 is not a PCM WAV file"),
        ("too short", wav(CLIPS[0][:10]), "clip 0 has 10 samples; the model needs at least 20"),
        ("too long", wav(np.zeros(61 * RATE, dtype="<i2")), "clip 0 is over 60 s"),
    ],
)
def test_bad_clips_are_one_clear_400(srv: Any, name: str, data: bytes, fragment: str) -> None:
    head = orjson.dumps(
        {
            "inputs": [
                {"name": "audio", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": len(data) + 4}}
            ]
        }
    )
    r = srv.request(
        "POST",
        "/v2/models/cls/infer",
        content=head + len(data).to_bytes(4, "little") + data,
        headers={"Inference-Header-Content-Length": str(len(head))},
    )
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]
    assert "\n" not in r.json()["error"]
    assert len(infer(srv, "cls", WAVS[:1])[0]) == 3  # still serving
