"""Hugging Face folders as sources: detection, the task table, and the safety rules (one line each)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from fwx.errors import UnsafeModelError, UsageError
from fwx.formats import Format, detect_format, is_hf_folder
from fwx.sources import hf_tasks
from fwx.sources.hf_files import check_folder, load_weights


def _folder(tmp_path: Path, config: dict[str, object] | None = None) -> Path:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config or {"architectures": ["BertModel"]}))
    (folder / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    return folder


def test_a_save_pretrained_folder_is_detected_as_a_pytorch_source(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    assert is_hf_folder(folder)
    assert detect_format(folder) is Format.PYTORCH
    (folder / "model.safetensors").unlink()
    assert not is_hf_folder(folder)


@pytest.mark.parametrize(
    ("arch", "model_type", "task"),
    [
        ("BertForSequenceClassification", "bert", "text-classification"),
        ("DistilBertModel", "distilbert", "feature-extraction"),
        ("GPT2LMHeadModel", "gpt2", "text-generation-with-past"),
        ("LlamaForCausalLM", "llama", "text-generation-with-past"),
        ("MarianMTModel", "marian", "text2text-generation"),
        ("BartForConditionalGeneration", "bart", "text2text-generation"),
        ("T5WithLMHeadModel", "t5", "text2text-generation"),
        ("Wav2Vec2ForCTC", "wav2vec2", "automatic-speech-recognition"),
        ("ResNetForImageClassification", "resnet", "image-classification"),
        ("ViTForImageClassification", "vit", "image-classification"),
        ("WhisperForConditionalGeneration", "whisper", "automatic-speech-recognition"),
        ("T5ForConditionalGeneration", "t5", "text2text-generation"),
        ("BertForQuestionAnswering", "bert", "question-answering"),
        ("DetrForObjectDetection", "detr", "object-detection"),
        ("YolosForObjectDetection", "yolos", "object-detection"),
        ("DetrForSegmentation", "detr", "image-segmentation"),
        ("SegformerForSemanticSegmentation", "segformer", "image-segmentation"),
        ("MaskFormerForInstanceSegmentation", "maskformer", "image-segmentation"),
        ("Mask2FormerForUniversalSegmentation", "mask2former", "image-segmentation"),
    ],
)
def test_the_task_is_inferred_from_the_architecture(arch: str, model_type: str, task: str) -> None:
    assert hf_tasks.infer_task({"architectures": [arch], "model_type": model_type}) == task


def test_a_waveform_model_with_a_sequence_head_classifies_audio() -> None:
    config = {"architectures": ["Wav2Vec2ForSequenceClassification"], "conv_kernel": [10], "conv_stride": [5]}
    assert hf_tasks.infer_task(config) == "audio-classification"
    assert hf_tasks.infer_task({"architectures": ["HubertForSequenceClassification"], **config}) == (
        "audio-classification"
    )


def test_a_waveform_is_never_shorter_than_the_feature_encoders_receptive_field() -> None:
    """Wav2Vec2's default encoder turns 400 samples into one frame; a sample of 3 cannot run."""
    config = {"conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_stride": [5, 2, 2, 2, 2, 2, 2]}
    assert hf_tasks.min_waveform(config) == 400
    sizes = hf_tasks.audio_sizes(config)["sequence_length"]
    assert min(sizes) >= 400
    assert len(set(sizes)) == 2
    assert hf_tasks.audio_sizes({"num_mel_bins": 80}) == {}  # Whisper's frames are fixed


def test_a_convolutional_vision_model_keeps_height_and_width_dynamic() -> None:
    (resnet,) = hf_tasks.image_inputs({"model_type": "resnet", "num_channels": 3})
    assert resnet.shape == ("batch_size", 3, "height", "width")
    (vit,) = hf_tasks.image_inputs({"model_type": "vit", "image_size": 16})
    assert vit.shape == ("batch_size", 3, 16, 16)  # its position table fixes the size


def test_alibi_decoders_take_no_position_ids() -> None:
    with_positions = frozenset({"input_ids", "position_ids"})
    assert hf_tasks.uses_positions({"model_type": "llama"}, with_positions)
    assert not hf_tasks.uses_positions({"model_type": "bloom"}, frozenset({"input_ids"}))
    assert not hf_tasks.uses_positions({"model_type": "falcon", "alibi": True}, with_positions)
    names = [s.name for s in hf_tasks.cache_inputs(1, 2, 8, positions=False)]
    assert names == ["input_ids", "attention_mask", "past_key_values.0.key", "past_key_values.0.value"]


def test_an_unknown_task_and_a_multi_model_task_without_its_part_are_refused() -> None:
    with pytest.raises(UsageError, match="unknown --task 'summarise'"):
        hf_tasks.split_part("summarise")
    with pytest.raises(UsageError, match="writes 2 models"):
        hf_tasks.split_part("text2text-generation")
    assert hf_tasks.split_part("text2text-generation:decoder") == ("text2text-generation", "decoder")
    with_past = "text2text-generation-with-past"
    optimum = ("encoder", "decoder", "decoder-with-past")  # Optimum's three files
    assert hf_tasks.get_task(with_past).parts == optimum
    assert hf_tasks.get_task("automatic-speech-recognition-with-past").parts == optimum
    assert hf_tasks.split_part(f"{with_past}:decoder-with-past") == (with_past, "decoder-with-past")
    assert hf_tasks.split_part(f"{with_past}:decoder-merged") == (with_past, "decoder-merged")  # only when named


def test_segmentation_outputs_follow_the_head() -> None:
    assert hf_tasks.task_outputs("image-segmentation", "SegformerForSemanticSegmentation") == ("logits",)
    assert hf_tasks.task_outputs("image-segmentation", "DetrForSegmentation") == ("logits", "pred_boxes", "pred_masks")
    assert hf_tasks.task_outputs("image-segmentation", "MaskFormerForInstanceSegmentation") == (
        "class_queries_logits",
        "masks_queries_logits",
    )
    assert hf_tasks.task_outputs("object-detection", "DetrForObjectDetection") == ("logits", "pred_boxes")


def test_token_type_ids_only_where_the_config_has_a_type_table() -> None:
    params = frozenset({"input_ids", "attention_mask", "token_type_ids"})
    assert [s.name for s in hf_tasks.text_inputs({"type_vocab_size": 2}, params)][-1] == "token_type_ids"
    assert [s.name for s in hf_tasks.text_inputs({}, params)] == ["input_ids", "attention_mask"]
    # RoBERTa and XLM-R keep a table of one row: the only type id is the default, not an input
    assert [s.name for s in hf_tasks.text_inputs({"type_vocab_size": 1}, params)] == ["input_ids", "attention_mask"]


def test_a_missing_shard_is_named_with_the_index_that_lists_it(tmp_path: Path) -> None:
    from fwx.errors import InputError
    from fwx.sources.hf_files import weight_files

    folder = tmp_path / "m"
    folder.mkdir()
    shards = {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"")
    with pytest.raises(InputError) as err:
        weight_files(folder)
    assert "model-00002-of-00002.safetensors is missing: " in str(err.value)
    assert "model.safetensors.index.json lists it" in str(err.value)
    assert err.value.exit_code == 2


def test_a_config_with_auto_map_is_refused_unless_trusted(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"architectures": ["X"], "auto_map": {"AutoModel": "modeling_x.XModel"}})
    with pytest.raises(UnsafeModelError, match=r"auto_map: loading it imports code from the folder \(modeling_x"):
        check_folder(folder, trust=False)
    assert check_folder(folder, trust=True)["auto_map"]


def test_a_link_that_leaves_the_folder_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (tmp_path / "elsewhere.json").write_text("{}")
    os.symlink(tmp_path / "elsewhere.json", folder / "tokenizer.json")
    with pytest.raises(UnsafeModelError, match="tokenizer.json is a link to .*outside the model folder"):
        check_folder(folder, trust=True)


class _Payload:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned",))


def test_a_pickled_bin_with_a_code_global_is_refused_naming_it(tmp_path: Path) -> None:
    import torch

    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(2), "x": _Payload()}, path)
    with pytest.raises(
        UnsafeModelError, match=r"pytorch_model.bin is a pickle that would import and run code: (posix|os)\.system"
    ):
        load_weights(path, trust=False)
    legacy = tmp_path / "legacy.bin"
    legacy.write_bytes(pickle.dumps({"x": _Payload()}, protocol=2))
    with pytest.raises(UnsafeModelError, match="(posix|os).system"):
        load_weights(legacy, trust=False)


def test_a_state_dict_bin_and_safetensors_load_as_data(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    torch.save({"w": torch.arange(3.0)}, tmp_path / "pytorch_model.bin")
    save_file({"w": torch.arange(3.0)}, str(tmp_path / "model.safetensors"))
    for name in ("pytorch_model.bin", "model.safetensors"):
        assert load_weights(tmp_path / name, trust=False)["w"].tolist() == [0.0, 1.0, 2.0]


def test_weights_fill_a_factory_module(tmp_path: Path) -> None:
    """``fwx export pkg.mod:build --weights model.safetensors``: a Linear(1,1) with w=2, b=1 turns 4 into 9."""
    import torch
    from safetensors.torch import save_file

    from fwx.sources.load import load_source

    (tmp_path / "hfw_factory.py").write_text("import torch\ndef build():\n    return torch.nn.Linear(1, 1)\n")
    save_file({"weight": torch.tensor([[2.0]]), "bias": torch.tensor([1.0])}, str(tmp_path / "w.safetensors"))
    src = load_source(f"{tmp_path / 'hfw_factory.py'}:build", weights=str(tmp_path / "w.safetensors"))
    assert src.obj(torch.tensor([[4.0]])).item() == 9.0
    assert "w.safetensors" in src.kind
    with pytest.raises(UsageError, match="--weights fills the module a factory builds"):
        load_source(tmp_path / "w.safetensors", weights=str(tmp_path / "w.safetensors"))


@pytest.mark.parametrize(
    ("arch", "model_type", "outputs"),
    [
        ("DetrForSegmentation", "detr", ["logits", "pred_boxes", "pred_masks"]),
        ("MaskFormerForInstanceSegmentation", "maskformer", ["class_queries_logits", "masks_queries_logits"]),
        ("SegformerForSemanticSegmentation", "segformer", ["logits"]),
    ],
)
def test_inspect_lists_the_outputs_a_segmentation_head_writes(
    tmp_path: Path, arch: str, model_type: str, outputs: list[str]
) -> None:
    from fwx.sources.inspection import inspect_path

    folder = _folder(tmp_path, {"architectures": [arch], "model_type": model_type})
    assert inspect_path(folder)["metadata"]["outputs"] == outputs


def test_inspect_reads_a_folder_as_data_and_names_its_task(tmp_path: Path) -> None:
    from fwx.sources.inspection import inspect_path

    folder = _folder(tmp_path, {"architectures": ["BertForSequenceClassification"], "model_type": "bert"})
    info = inspect_path(folder)
    assert info["format"] == "hugging face folder"
    assert info["metadata"]["task"] == "text-classification"
    assert info["metadata"]["outputs"] == ["logits"]
    (folder / "config.json").write_text(json.dumps({"architectures": ["X"], "auto_map": {"AutoModel": "m.X"}}))
    notes = inspect_path(folder)["notes"]
    assert any("auto_map" in n for n in notes)  # said, not loaded: inspect runs nothing
