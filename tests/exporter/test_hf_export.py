"""Hugging Face folders exported by task: Optimum's names, every format, validation on the model's own inputs,
decoders with a cache that generate transformers' own tokens, and the artifacts served as exported.

Each folder is a tiny random model saved with ``save_pretrained``. Validation runs every dynamic axis at two
sizes (batch 1 and 3, sequence 8 and 12; the cache decoder at its first step, with an empty cache, and later).
All five formats for BERT, GPT-2 and ViT and the Llama decoder with a cache; ONNX and one other for the rest,
to keep the suite's time.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwx.exporter import ExportOptions
from fwx.exporter.parts import export_all
from fwx.sources.hf_tasks import infer_task
from tests.exporter import hf_folders as hf

pytestmark = pytest.mark.slow
ALL = ("torchscript", "pt2", "savedmodel", "onnx", "tflite")


def _export(tmp_path: Path, name: str, targets: tuple[str, ...], **kw: Any) -> list[Any]:
    build = {
        "llama_past": hf.llama,
        "qwen2_past": hf.qwen2,
        "gpt2_past": hf.gpt2,
        "mistral_past": hf.mistral,
        "gemma2_past": hf.gemma2,
        "bloom_past": hf.bloom,
    }.get(name)
    folder, task = build(tmp_path / name, with_past=True) if build else hf.BUILDERS[name](tmp_path / name)
    results = export_all(str(folder), list(targets), ExportOptions(out=tmp_path / "repo", task=task, **kw))
    for res in results:
        assert res.ok, res.failures
        published = set(res.manifest.artifacts)
        assert all(res.manifest.artifacts[k].validation["passed"] for k in published)
    return results


def _published(res: Any) -> set[str]:
    return set(res.manifest.artifacts)


@pytest.mark.parametrize("name", ["bert", "gpt2", "vit"])
def test_a_folder_reaches_all_five_formats_with_optimums_names(tmp_path: Path, name: str) -> None:
    (res,) = _export(tmp_path, name, ALL)
    assert _published(res) == set(ALL)
    inputs = res.signature.input_names
    want = {
        "bert": ["input_ids", "attention_mask", "token_type_ids"],
        "gpt2": ["input_ids", "attention_mask"],
        "vit": ["pixel_values"],
    }[name]
    assert inputs == want
    assert res.signature.output_names == ["logits"]
    assert res.signature.inputs[0].shape[0] == "batch_size"
    _one_spelling(res)


def _one_spelling(res: Any) -> None:
    """Every format's signature in fwx.json names the dynamic dims as pinned (batch_size, sequence_length):
    SavedModel and TFLite record none of their own, a .pt2 program made-up ones (s18)."""
    pinned = res.manifest.signature
    for key, entry in res.manifest.artifacts.items():
        assert entry.signature == pinned, (key, entry.signature)


@pytest.mark.parametrize(
    ("name", "inputs", "outputs"),
    [
        ("distilbert", ["input_ids", "attention_mask"], ["last_hidden_state"]),
        ("llama", ["input_ids", "attention_mask"], ["logits"]),
        ("whisper", ["input_features"], ["last_hidden_state"]),
    ],
)
def test_other_architectures_reach_all_five_formats(
    tmp_path: Path, name: str, inputs: list[str], outputs: list[str]
) -> None:
    (res,) = _export(tmp_path, name, ALL)
    assert res.signature.input_names == inputs
    assert res.signature.output_names == outputs
    assert _published(res) == set(ALL), res.manifest.skipped


def test_text2text_writes_an_encoder_and_a_decoder(tmp_path: Path) -> None:
    enc, dec = _export(tmp_path, "t5", ALL)
    assert _published(enc) == set(ALL), enc.manifest.skipped
    assert _published(dec) == set(ALL), dec.manifest.skipped
    assert (enc.manifest.name, dec.manifest.name) == ("t5-encoder", "t5-decoder")
    assert enc.signature.input_names == ["input_ids", "attention_mask"]
    assert dec.signature.input_names == ["input_ids", "encoder_attention_mask", "encoder_hidden_states"]
    assert dec.signature.output_names == ["logits"]


def test_validation_uses_the_whole_vocabulary_real_padding_and_tokenized_sentences(tmp_path: Path) -> None:
    """BERT's token_type_ids table has 2 rows: ids were once drawn from {0, 1} for every input."""
    (res,) = _export(tmp_path, "bert", ("onnx",))
    m = res.manifest
    assert m.samples["input_ranges"]["input_ids"] == [0, hf.VOCAB]
    assert m.samples["input_ranges"]["token_type_ids"] == [0, 2]
    report = res.reports["onnx"]
    drawn = list(report.inputs)
    assert len(drawn) == 4 + 2  # generated samples, then a batch of three sentences and one alone
    version = res.version_dir
    assert {"tokenizer.json", "tokenizer_config.json", "config.json"} <= set(m.assets)
    assert all((version / name).is_file() for name in m.assets)
    m.verify(version)


@pytest.mark.parametrize(
    ("name", "targets"),
    [
        ("llama_past", ("torchscript", "savedmodel", "onnx", "tflite")),
        ("qwen2_past", ("torchscript", "savedmodel", "onnx", "tflite")),
        ("gpt2_past", ("torchscript", "savedmodel", "onnx", "tflite")),
    ],
)
def test_a_decoder_with_a_cache_generates_transformers_own_tokens(
    tmp_path: Path, name: str, targets: tuple[str, ...]
) -> None:
    (res,) = _export(tmp_path, name, targets)
    sig = res.signature
    assert sig.input_names[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert sig.input("past_key_values.0.key").shape[2] == "past_sequence_length"
    assert sig.output_names[:3] == ["logits", "present.0.key", "present.0.value"]
    assert sig.output("present.1.value").shape[2] == "past_sequence_length + sequence_length"
    for key in targets:
        notes = res.reports[key].artifact(key).notes
        assert any("greedy generation of 16 tokens" in n for n in notes), (key, notes)
        kept = res.manifest.artifacts[key].validation["notes"]  # fwx.json keeps what the check found
        assert any("greedy generation of 16 tokens" in n for n in kept), (key, kept)
    assert res.manifest.samples["sizes"]["past_sequence_length"][1] == 0  # the first step: an empty cache
    _one_spelling(res)
    # a SavedModel signature key is a Python identifier: the one rename a format forces, recorded as data
    names = res.manifest.artifacts["savedmodel"].names
    assert names["past_key_values.0.key"] == "past_key_values_0_key"
    assert all(not res.manifest.artifacts[k].names for k in targets if k != "savedmodel")


@pytest.mark.parametrize(
    ("name", "targets"),
    [("mistral_past", ("onnx", "tflite")), ("gemma2_past", ("onnx",)), ("bloom_past", ("torchscript",))],
)
def test_sliding_window_soft_capped_and_alibi_decoders_generate_at_a_left_padded_batch(
    tmp_path: Path, name: str, targets: tuple[str, ...]
) -> None:
    """``present`` is past + new (the window is the mask's business), checked the way generation uses it: a
    prompt alone and a left-padded batch of two, one row longer than Mistral's window of 4."""
    (res,) = _export(tmp_path, name, targets)
    sig = res.signature
    assert ("position_ids" in sig.input_names) is (name != "bloom_past")  # ALiBi takes none
    assert sig.output("present.0.key").shape[2] == "past_sequence_length + sequence_length"
    for key in targets:
        notes = res.reports[key].artifact(key).notes
        assert any("a left-padded batch of 2 (3 and 8 tokens)" in n for n in notes), (key, notes)


@pytest.mark.parametrize(
    ("name", "task", "inputs", "dims"),
    [
        ("roberta", "text-classification", ["input_ids", "attention_mask"], ("batch_size", "sequence_length")),
        ("wav2vec2_ctc", "automatic-speech-recognition", ["input_values"], ("batch_size", "sequence_length")),
        ("wav2vec2_audio", "audio-classification", ["input_values"], ("batch_size", "sequence_length")),
        ("resnet", "image-classification", ["pixel_values"], ("batch_size", 3, "height", "width")),
    ],
)
def test_the_task_is_inferred_and_the_inputs_are_the_models_own(
    tmp_path: Path, name: str, task: str, inputs: list[str], dims: tuple[object, ...]
) -> None:
    """Without --task, as Optimum infers it; no token_type_ids for a one-row table; a waveform long enough
    for the feature encoder; a convolutional network at any height and width."""
    folder, _ = hf.BUILDERS[name](tmp_path / name)
    (res,) = export_all(str(folder), ["onnx"], ExportOptions(out=tmp_path / "repo"))
    assert res.ok, res.failures
    assert res.manifest.artifacts["onnx"].validation["passed"]
    assert infer_task(json.loads((folder / "config.json").read_text())) == task
    assert res.signature.input_names == inputs
    assert res.signature.inputs[0].shape == dims


@pytest.mark.parametrize(
    ("name", "task", "targets", "outputs"),
    [
        ("detr", "object-detection", ("onnx", "tflite"), ["logits", "pred_boxes"]),
        ("conditional_detr", "object-detection", ("torchscript",), ["logits", "pred_boxes"]),
        ("yolos", "object-detection", ("onnx", "pt2"), ["logits", "pred_boxes"]),
        ("segformer", "image-segmentation", ("onnx", "savedmodel"), ["logits"]),
        ("detr_segmentation", "image-segmentation", ("onnx",), ["logits", "pred_boxes", "pred_masks"]),
        ("maskformer", "image-segmentation", ("onnx",), ["class_queries_logits", "masks_queries_logits"]),
    ],
)
def test_detection_and_segmentation_heads_export_with_optimums_names(
    tmp_path: Path, name: str, task: str, targets: tuple[str, ...], outputs: list[str]
) -> None:
    """DETR-style detectors and segmentation heads built from config alone (a transformers ResNet backbone, no
    timm, nothing pretrained), the task inferred, judged against transformers on the same images. DETR and
    SegFormer are convolutions before attention over the flattened map: any height and width; YOLOS has a
    position table of the config's size, and MaskFormer keeps the size it was traced at."""
    folder, _ = hf.BUILDERS[name](tmp_path / name)
    assert infer_task(json.loads((folder / "config.json").read_text())) == task
    (res,) = export_all(str(folder), list(targets), ExportOptions(out=tmp_path / "repo"))
    assert res.ok, res.failures
    assert set(res.manifest.artifacts) == set(targets)
    assert all(a.validation["passed"] for a in res.manifest.artifacts.values())
    assert res.signature.input_names == ["pixel_values"]
    assert res.signature.output_names == outputs
    fixed = {"yolos": 32, "maskformer": 224}  # a position table; no size in the config: 224
    size = fixed.get(name)
    dims = ("batch_size", 3, size, size) if size else ("batch_size", 3, "height", "width")
    assert res.signature.inputs[0].shape == dims
    _one_spelling(res)


@pytest.mark.parametrize(
    ("name", "targets"),
    [("bart", ("onnx", "pt2")), ("t5", ("torchscript",)), ("marian", ("savedmodel",)), ("whisper", ("onnx",))],
)
def test_a_merged_seq2seq_decoder_generates_transformers_own_tokens(
    tmp_path: Path, name: str, targets: tuple[str, ...]
) -> None:
    """BART, T5, Marian and Whisper: fwx's merged decoder (``:decoder-merged``), every step in one artifact
    with its own self-attention cache, greedy tokens equal to transformers' for one input alone and batches of
    two (text padded at the end and at the start)."""
    folder, _ = hf.BUILDERS[name](tmp_path / name)
    base = "automatic-speech-recognition" if name == "whisper" else "text2text-generation"
    task = f"{base}-with-past:decoder-merged"
    (res,) = export_all(str(folder), list(targets), ExportOptions(out=tmp_path / "repo", task=task))
    assert res.ok, res.failures
    sig = res.signature
    mask = [] if name == "whisper" else ["encoder_attention_mask"]  # every Whisper frame is real
    assert sig.input_names[: 3 + len(mask)] == [
        "input_ids",
        *mask,
        "encoder_hidden_states",
        "past_key_values.0.decoder.key",
    ]
    assert sig.output_names[:2] == ["logits", "present.0.decoder.key"]
    total = "past_decoder_sequence_length + decoder_sequence_length"
    assert sig.output("present.0.decoder.key").shape[2] == total
    _one_spelling(res)
    for key in targets:
        notes = res.reports[key].artifact(key).notes
        assert any("batch of 2" in n for n in notes), (key, notes)


@pytest.mark.parametrize(
    ("name", "targets"),
    [("bart", ("onnx",)), ("t5", ("torchscript", "pt2")), ("marian", ("savedmodel",)), ("whisper", ("onnx",))],
)
def test_a_seq2seq_export_with_past_writes_optimums_three_models(
    tmp_path: Path, name: str, targets: tuple[str, ...]
) -> None:
    """Optimum's layout: the encoder, the decoder of the first step (the whole cache out, cross-attention
    included) and the decoder with past (both caches in, never the encoder states); each checked in its role
    with the other in PyTorch, greedy tokens equal to transformers' alone and in padded batches of two."""
    folder, _ = hf.BUILDERS[name](tmp_path / name)
    base = "automatic-speech-recognition" if name == "whisper" else "text2text-generation"
    enc, first, later = _export_folder(tmp_path, folder, targets, f"{base}-with-past")
    assert [r.manifest.name for r in (enc, first, later)] == [
        f"{name}-encoder",
        f"{name}-decoder",
        f"{name}-decoder-with-past",
    ]
    mask = [] if name == "whisper" else ["encoder_attention_mask"]
    assert first.signature.input_names == ["input_ids", *mask, "encoder_hidden_states"]
    assert first.signature.output_names[:5] == [
        "logits",
        "present.0.decoder.key",
        "present.0.decoder.value",
        "present.0.encoder.key",
        "present.0.encoder.value",
    ]
    assert later.signature.input_names[: 5 + len(mask)] == [
        "input_ids",
        *mask,
        "past_key_values.0.decoder.key",
        "past_key_values.0.decoder.value",
        "past_key_values.0.encoder.key",
        "past_key_values.0.encoder.value",
    ]
    assert "encoder_hidden_states" not in later.signature.input_names
    assert all(".encoder." not in n for n in later.signature.output_names)
    total = "past_decoder_sequence_length + decoder_sequence_length"
    assert later.signature.output("present.0.decoder.key").shape[2] == total
    _one_spelling(later)
    _same_dim_names(first)  # a TF file may state a fixed axis of the new cache as -1 (see the docs)
    for res, role in ((first, "this decoder with"), (later, "this decoder_with_past with")):
        for key in targets:
            notes = res.manifest.artifacts[key].validation["notes"]
            assert any(role in n and "batch of 2" in n for n in notes), (key, notes)


def test_a_decoder_with_past_that_generates_other_tokens_fails(tmp_path: Path) -> None:
    """The split check can fail: the same BART decoder_with_past artifact, with the first step taken by a model
    of other weights (its cross-attention keys and values are other ones), diverges from that model's tokens."""
    from fwx.formats import Format
    from fwx.runtimes.base import load_runtime
    from fwx.sources import hf_seq2seq, hf_seq2seq_split, hf_tasks

    folder, _ = hf.bart(tmp_path / "bart")
    (later,) = _export_folder(tmp_path, folder, ("onnx",), "text2text-generation-with-past:decoder-with-past")
    other = hf._init(hf.transformers().BartForConditionalGeneration.from_pretrained(str(folder)), 0.5).eval()
    shape = hf_seq2seq.DecoderShape.of(other.config)
    specs = {
        "decoder": hf_tasks.seq2seq_first_inputs(shape.hidden),
        "decoder-with-past": hf_tasks.seq2seq_past_inputs(shape.layers, shape.heads, shape.head_dim),
    }
    check = hf_seq2seq_split.greedy_check(other, shape, hf.VOCAB, "decoder-with-past", specs)
    rt = load_runtime(Format.ONNX, later.version_dir / "model.onnx")
    try:
        errors, _ = check(rt)
    finally:
        rt.close()
    assert errors
    assert "differs from transformers' at token" in errors[0]


def _same_dim_names(res: Any) -> None:
    """Every dynamic axis is spelled as pinned in every format; a fixed one is the pin's size or unstated (-1)."""
    pinned = res.manifest.signature
    for key, entry in res.manifest.artifacts.items():
        for side in ("inputs", "outputs"):
            for p, g in zip(pinned[side], entry.signature[side], strict=True):
                assert p["name"] == g["name"], (key, g)
                assert all(
                    gd == pd or (isinstance(pd, int) and gd == -1)
                    for pd, gd in zip(p["shape"], g["shape"], strict=True)
                ), (key, g)


def _export_folder(tmp_path: Path, folder: Path, targets: tuple[str, ...], task: str) -> list[Any]:
    results = export_all(str(folder), list(targets), ExportOptions(out=tmp_path / "repo", task=task))
    for res in results:
        assert res.ok, res.failures
        assert set(res.manifest.artifacts) == set(targets), res.manifest.skipped
        assert all(a.validation["passed"] for a in res.manifest.artifacts.values())
    return results


def test_a_cache_decoder_that_generates_other_tokens_fails(tmp_path: Path) -> None:
    """The generation check can fail: against a model with other weights the same artifact diverges."""
    from fwx.formats import Format
    from fwx.runtimes.base import load_runtime
    from fwx.sources import hf_cache

    (res,) = _export(tmp_path, "llama_past", ("onnx",))
    tf = hf.transformers()
    other = hf._init(tf.LlamaForCausalLM.from_pretrained(str(tmp_path / "llama_past")), 0.5).eval()
    check = hf_cache.greedy_check(other, hf_cache.CacheShape.of(other.config), hf.VOCAB)
    rt = load_runtime(Format.ONNX, res.version_dir / "model.onnx")
    try:
        errors, _ = check(rt)
    finally:
        rt.close()
    assert errors
    assert "greedy generation (a prompt of 5 tokens) differs from transformers' at token" in errors[0]


def test_an_export_is_served_over_rest_with_the_tasks_names(tmp_path: Path) -> None:
    import httpx

    from fwx.serving.config import ServerConfig
    from fwx.serving.server import Server

    (res,) = _export(tmp_path, "bert", ("onnx",))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = Server(ServerConfig(repository=tmp_path / "repo", http_port=0, grpc_port=-1, poll_seconds=0))
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(120)
    try:
        ids = np.array([[2, 7, 9, 3]], dtype=np.int64)
        body = {
            "inputs": [
                {"name": n, "datatype": "INT64", "shape": [1, 4], "data": d.ravel().tolist()}
                for n, d in (("input_ids", ids), ("attention_mask", np.ones_like(ids)), ("token_type_ids", 0 * ids))
            ]
        }
        url = f"http://127.0.0.1:{server.http_port}/v2/models/bert/infer"
        with httpx.Client(timeout=60) as client:
            r = client.post(url, json=body)
        assert r.status_code == 200, r.text
        (out,) = r.json()["outputs"]
        assert out["name"] == "logits"
        assert out["shape"] == [1, 3]
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():
            loop.close()


def test_a_model_id_is_exported_from_the_local_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fwx export org/name``: the snapshot's files are links into ``../../blobs/``, read offline."""
    from tests.sources.test_hf_hub import cache_model

    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    folder, _ = hf.roberta(tmp_path / "saved")
    cache_model(tmp_path / "hf-home" / "hub", "tiny-org/tiny-roberta", folder)
    (res,) = export_all("tiny-org/tiny-roberta", ["onnx"], ExportOptions(out=tmp_path / "repo"))
    assert res.ok, res.failures
    assert res.manifest.name == "tiny-roberta"
    assert res.manifest.artifacts["onnx"].validation["passed"]
    assert "models--tiny-org--tiny-roberta/snapshots/" in res.manifest.source.path


def test_a_model_id_that_is_not_cached_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.validators.cli_run import fwx_cli

    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.chdir(tmp_path)
    code, text = fwx_cli(["export", "tiny-org/absent", "--to", "onnx", "--out", tmp_path / "repo"], capsys)
    assert code == 2
    assert "tiny-org/absent is not in the Hugging Face cache" in text
    assert "Traceback" not in text
