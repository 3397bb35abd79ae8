"""The task table of Hugging Face folders: which model class a task builds, its inputs and its outputs.

Task names, input and output names and dynamic axes are Optimum's
(``optimum.exporters.tasks.TasksManager`` and the ONNX configs), so an artifact
fwx writes drops into code written for Optimum's: ``input_ids`` /
``attention_mask`` / ``token_type_ids`` over ``[batch_size, sequence_length]``,
``logits``, ``last_hidden_state``; the decoder with a cache takes
``past_key_values.N.key|value`` and returns ``present.N.key|value``. Pure data:
nothing here imports transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fwx.errors import UsageError
from fwx.signature import TensorSpec

BATCH = "batch_size"
SEQ = "sequence_length"
PAST = "past_sequence_length"
TOTAL = "past_sequence_length + sequence_length"  # Optimum's name for the attention mask of a step with a cache


@dataclass(frozen=True)
class Task:
    """One task: the Auto class that builds its model, what it reads and returns, and its parts."""

    name: str
    auto_class: str
    kind: str  # text | image | audio | speech-encoder | decoder-with-past | seq2seq
    outputs: tuple[str, ...]
    parts: tuple[str, ...] = ()  # text2text-generation: one artifact per part (encoder, decoder)
    writes: str = ""  # what the task publishes, for docs and messages
    fallbacks: tuple[str, ...] = ()  # further Auto classes tried in order (segmentation has three)
    optional_parts: tuple[str, ...] = ()  # parts written only when named (``TASK:PART``)


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("feature-extraction", "AutoModel", "text", ("last_hidden_state",), writes="hidden states"),
        Task(
            "text-classification", "AutoModelForSequenceClassification", "text", ("logits",), writes="one row of logits"
        ),
        Task("token-classification", "AutoModelForTokenClassification", "text", ("logits",), writes="logits per token"),
        Task("fill-mask", "AutoModelForMaskedLM", "text", ("logits",), writes="vocabulary logits per token"),
        Task(
            "question-answering",
            "AutoModelForQuestionAnswering",
            "text",
            ("start_logits", "end_logits"),
            writes="span start and end logits",
        ),
        Task("text-generation", "AutoModelForCausalLM", "text", ("logits",), writes="next-token logits, no cache"),
        Task(
            "text-generation-with-past",
            "AutoModelForCausalLM",
            "decoder-with-past",
            ("logits",),
            writes="one decoder for the first and later steps: past keys/values in, present out",
        ),
        Task("image-classification", "AutoModelForImageClassification", "image", ("logits",), writes="class logits"),
        Task(
            "object-detection",
            "AutoModelForObjectDetection",
            "image",
            ("logits", "pred_boxes"),
            writes="class logits and boxes (cx, cy, w, h in [0, 1]) per query",
        ),
        Task(
            "image-segmentation",
            "AutoModelForImageSegmentation",
            "image",
            ("logits",),
            writes="per-pixel class logits (DETR: per-query logits, boxes and masks; MaskFormer: query classes and masks)",
            fallbacks=("AutoModelForSemanticSegmentation", "AutoModelForUniversalSegmentation"),
        ),
        Task(
            "semantic-segmentation",
            "AutoModelForSemanticSegmentation",
            "image",
            ("logits",),
            writes="per-pixel class logits",
        ),
        Task(
            "audio-classification",
            "AutoModelForAudioClassification",
            "audio",
            ("logits",),
            writes="class logits from a raw waveform",
        ),
        Task(
            "automatic-speech-recognition",
            "AutoModelForSpeechSeq2Seq",
            "audio",
            ("last_hidden_state",),
            writes="the encoder (Whisper: mel features -> hidden states; CTC models: logits)",
        ),
        Task(
            "automatic-speech-recognition-with-past",
            "AutoModelForSpeechSeq2Seq",
            "seq2seq",
            ("logits",),
            parts=("encoder", "decoder", "decoder-with-past"),
            optional_parts=("decoder-merged",),
            writes="Whisper: NAME-encoder, NAME-decoder (first step) and NAME-decoder-with-past (later steps)",
        ),
        Task(
            "text2text-generation",
            "AutoModelForSeq2SeqLM",
            "seq2seq",
            ("logits",),
            parts=("encoder", "decoder"),
            writes="two models: NAME-encoder and NAME-decoder",
        ),
        Task(
            "text2text-generation-with-past",
            "AutoModelForSeq2SeqLM",
            "seq2seq",
            ("logits",),
            parts=("encoder", "decoder", "decoder-with-past"),
            optional_parts=("decoder-merged",),
            writes="three models: NAME-encoder, NAME-decoder (first step) and NAME-decoder-with-past (later steps)",
        ),
    )
}

#: Architecture name endings -> task (``config.architectures[0]``), first match wins. A causal LM is
#: ``text-generation-with-past``, as Optimum's ``main_export`` makes an inferred task that has a cache;
#: ``MarianMTModel`` (and FSMT's) are translation models, seq2seq like every ``*ForConditionalGeneration``.
_BY_SUFFIX = (
    ("ForSequenceClassification", "text-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForMaskedLM", "fill-mask"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForCausalLM", "text-generation-with-past"),
    ("LMHeadModel", "text-generation-with-past"),
    ("ForImageClassification", "image-classification"),
    ("ForImageClassificationWithTeacher", "image-classification"),
    ("ForObjectDetection", "object-detection"),
    ("ForSemanticSegmentation", "image-segmentation"),
    ("ForSegmentation", "image-segmentation"),
    ("ForInstanceSegmentation", "image-segmentation"),
    ("ForUniversalSegmentation", "image-segmentation"),
    ("ForAudioClassification", "audio-classification"),
    ("ForCTC", "automatic-speech-recognition"),
    ("ForSpeechSeq2Seq", "automatic-speech-recognition"),
    ("ForConditionalGeneration", "text2text-generation"),
    ("MTModel", "text2text-generation"),
    ("Model", "feature-extraction"),
)
#: Architectures named ``*LMHeadModel`` that are seq2seq, not causal (T5's old name).
_SEQ2SEQ_TYPES = frozenset({"t5", "mt5", "bart", "mbart", "marian", "pegasus", "fsmt", "m2m_100", "longt5"})
#: ``model_type``s whose ``*ForConditionalGeneration`` is speech recognition, not text-to-text.
_SPEECH_TYPES = frozenset({"whisper", "speech_to_text", "moonshine"})


def task_names() -> str:
    return ", ".join(TASKS)


def get_task(name: str) -> Task:
    base = name.split(":", 1)[0]
    if base not in TASKS:
        raise UsageError(f"unknown --task {name!r}", hint=f"use one of: {task_names()}")
    return TASKS[base]


def split_part(name: str) -> tuple[str, str | None]:
    """``text2text-generation:decoder`` -> (``text2text-generation``, ``decoder``); a plain task has no part."""
    base, _, part = name.partition(":")
    task = get_task(base)
    if part and part not in (*task.parts, *task.optional_parts):
        known = ", ".join((*task.parts, *task.optional_parts)) or "none"
        raise UsageError(f"task {base} has no part {part!r}", hint=f"its parts are: {known}")
    if task.parts and not part:
        raise UsageError(f"task {base} writes {len(task.parts)} models", hint="export it with `fwx export --task`")
    return base, part or None


def architecture(config: Mapping[str, Any]) -> str:
    """``config.architectures[0]``, read as data: a folder's config may hold any JSON there."""
    archs = config.get("architectures")
    if isinstance(archs, str):
        return archs
    return str(archs[0]) if isinstance(archs, list) and archs else ""


def infer_task(config: Mapping[str, Any]) -> str:
    """The task of a folder without ``--task``, from ``config.architectures`` as Optimum infers it."""
    arch = architecture(config)
    model_type = str(config.get("model_type", ""))
    for suffix, task in _BY_SUFFIX:
        if arch.endswith(suffix):
            if task == "text2text-generation" and model_type in _SPEECH_TYPES:
                return "automatic-speech-recognition"
            if task == "text-generation-with-past" and model_type in _SEQ2SEQ_TYPES:
                return "text2text-generation"
            if task == "text-classification" and is_waveform(config):
                return "audio-classification"  # Wav2Vec2ForSequenceClassification classifies sound
            return task
    raise UsageError(
        f"cannot tell the task of this folder (architectures: {arch or 'none'})",
        hint=f"pass --task, one of: {task_names()}",
    )


#: Segmentation heads whose outputs are not one ``logits`` map, by architecture ending (Optimum's names).
_SEGMENTATION_OUTPUTS = (
    ("ForSegmentation", ("logits", "pred_boxes", "pred_masks")),  # DETR-family panoptic heads
    ("ForInstanceSegmentation", ("class_queries_logits", "masks_queries_logits")),  # MaskFormer
    ("ForUniversalSegmentation", ("class_queries_logits", "masks_queries_logits")),  # Mask2Former, OneFormer
)


def task_outputs(task: str, arch: str) -> tuple[str, ...]:
    """The outputs ``task`` writes for the model class ``arch``: the task's own, except for segmentation
    heads that answer per query rather than per pixel."""
    t = get_task(task)
    if t.name == "image-segmentation":
        for suffix, outputs in _SEGMENTATION_OUTPUTS:
            if arch.endswith(suffix):
                return outputs
    return t.outputs


def _ids(name: str, seq: str = SEQ) -> TensorSpec:
    return TensorSpec(name, "int64", (BATCH, seq))


def text_inputs(config: Mapping[str, Any], forward_params: frozenset[str]) -> tuple[TensorSpec, ...]:
    """``input_ids``, ``attention_mask``, and ``token_type_ids`` only where the config has a type table of
    more than one row (RoBERTa and XLM-R keep a table of one: the only id is the default, as Optimum drops it)."""
    specs = [_ids("input_ids"), _ids("attention_mask")]
    if int(config.get("type_vocab_size") or 0) > 1 and "token_type_ids" in forward_params:
        specs.append(_ids("token_type_ids"))
    return tuple(specs)


#: Vision ``model_type``s that are convolutions end to end: any height and width (Optimum's dynamic axes),
#: traced without a Python branch on the size. The rest have position tables, windows or padding computed
#: from the size in Python, which fix it at the config's ``image_size``.
_ANY_SIZE_VISION = frozenset({"resnet", "convnext", "convnextv2", "regnet", "detr", "conditional_detr", "segformer"})
#: The two sizes height and width are validated at: multiples of 32, which a stride-32 pyramid divides.
IMAGE_SIZES: dict[str, tuple[int, ...]] = {"height": (32, 64), "width": (64, 96)}


def image_inputs(config: Mapping[str, Any]) -> tuple[TensorSpec, ...]:
    """``pixel_values``, channels first: ``height`` and ``width`` dynamic for a fully convolutional model,
    else the config's image size (position embeddings fix it)."""
    channels = int(config.get("num_channels", 3))
    if dynamic_image(config):
        return (TensorSpec("pixel_values", "float32", (BATCH, channels, "height", "width")),)
    size = config.get("image_size", 224)
    h, w = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    return (TensorSpec("pixel_values", "float32", (BATCH, channels, h, w)),)


def dynamic_image(config: Mapping[str, Any]) -> bool:
    return str(config.get("model_type", "")) in _ANY_SIZE_VISION


def audio_inputs(config: Mapping[str, Any]) -> tuple[TensorSpec, ...]:
    """Whisper's log-mel ``input_features`` (its encoder takes exactly 2 x max_source_positions frames);
    a CTC or audio-classification model's raw ``input_values``."""
    if "num_mel_bins" in config:
        frames = 2 * int(config.get("max_source_positions", 1500))
        return (TensorSpec("input_features", "float32", (BATCH, int(config["num_mel_bins"]), frames)),)
    return (TensorSpec("input_values", "float32", (BATCH, SEQ)),)


def is_waveform(config: Mapping[str, Any]) -> bool:
    """A model that reads a raw waveform through a convolutional feature encoder (Wav2Vec2, HuBERT, WavLM)."""
    return bool(config.get("conv_kernel")) and bool(config.get("conv_stride")) and "num_mel_bins" not in config


def min_waveform(config: Mapping[str, Any]) -> int:
    """The shortest waveform the feature encoder's convolutions turn into one frame: its receptive field.

    Each layer maps ``n`` samples to ``(n - kernel) // stride + 1``; walking back from one frame gives
    the length (400 samples for Wav2Vec2's (10, 3, 3, 3, 3, 2, 2) / (5, 2, 2, 2, 2, 2, 2)).
    """
    kernels = [int(k) for k in config.get("conv_kernel") or ()]
    strides = [int(s) for s in config.get("conv_stride") or ()]
    n = 1
    for kernel, stride in zip(reversed(kernels), reversed(strides), strict=False):
        n = (n - 1) * stride + kernel
    return n


def audio_sizes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The waveform lengths traced and validated at: a few frames' worth, never below the receptive field."""
    if "num_mel_bins" in config:
        return {}
    n = min_waveform(config)
    hop = 1
    for stride in config.get("conv_stride") or ():
        hop *= int(stride)
    return {SEQ: (n + 3 * hop, n + 7 * hop)}


def decoder_part_inputs(hidden: int) -> tuple[TensorSpec, ...]:
    """A seq2seq decoder without a cache, as Optimum's ``decoder_model``: the decoder's ``input_ids``, the
    encoder's mask and hidden states."""
    return (
        _ids("input_ids", "decoder_sequence_length"),
        _ids("encoder_attention_mask", "encoder_sequence_length"),
        TensorSpec("encoder_hidden_states", "float32", (BATCH, "encoder_sequence_length", hidden)),
    )


DEC = "decoder_sequence_length"
ENC = "encoder_sequence_length"
PAST_DEC = "past_decoder_sequence_length"


def seq2seq_cache_inputs(
    layers: int, heads: int, head_dim: int, hidden: int, frames: int | None = None
) -> tuple[TensorSpec, ...]:
    """The seq2seq decoder with a cache: new decoder ids, the encoder's mask and states, the decoder's cache.
    Whisper's (``frames``: its encoder's fixed output length) takes no mask: every frame is real."""
    specs = [_ids("input_ids", DEC)]
    if frames is None:
        specs.append(_ids("encoder_attention_mask", ENC))
    specs.append(TensorSpec("encoder_hidden_states", "float32", (BATCH, frames or ENC, hidden)))
    for i in range(layers):
        for kind in ("key", "value"):
            specs.append(
                TensorSpec(f"past_key_values.{i}.decoder.{kind}", "float32", (BATCH, heads, PAST_DEC, head_dim))
            )
    return tuple(specs)


def _kv_specs(i: int, side: str, heads: int, length: str | int, head_dim: int) -> list[TensorSpec]:
    return [
        TensorSpec(f"past_key_values.{i}.{side}.{kind}", "float32", (BATCH, heads, length, head_dim))
        for kind in ("key", "value")
    ]


def seq2seq_first_inputs(hidden: int, frames: int | None = None) -> tuple[TensorSpec, ...]:
    """Optimum's ``decoder_model`` of a with-past export: as the decoder without a cache (Whisper's without a
    mask, over its fixed frames); it returns the whole cache."""
    if frames is None:
        return decoder_part_inputs(hidden)
    return (_ids("input_ids", DEC), TensorSpec("encoder_hidden_states", "float32", (BATCH, frames, hidden)))


def seq2seq_past_inputs(layers: int, heads: int, head_dim: int, frames: int | None = None) -> tuple[TensorSpec, ...]:
    """Optimum's ``decoder_with_past_model``: new ids, the encoder's mask, and per layer the self-attention
    cache then the cross-attention one (``encoder_sequence_length`` long: the mask's length)."""
    specs = [_ids("input_ids", DEC)]
    if frames is None:
        specs.append(_ids("encoder_attention_mask", ENC))
    for i in range(layers):
        specs += _kv_specs(i, "decoder", heads, PAST_DEC, head_dim)
        specs += _kv_specs(i, "encoder", heads, frames or ENC, head_dim)
    return tuple(specs)


#: The first decoder's sizes: tracing, the start token alone, a few tokens (no cache in).
SEQ2SEQ_FIRST_SIZES: dict[str, tuple[int, ...]] = {BATCH: (2, 1, 3), DEC: (3, 1, 2), ENC: (5, 6, 7)}

#: As ``CACHE_SIZES``: tracing (all >= 2), the first step (an empty cache, the start token), a later step.
SEQ2SEQ_CACHE_SIZES: dict[str, tuple[int, ...]] = {
    BATCH: (2, 1, 3),
    DEC: (3, 1, 1),
    PAST_DEC: (4, 0, 5),
    ENC: (5, 6, 7),
}


def cache_inputs(layers: int, kv_heads: int, head_dim: int, *, positions: bool = True) -> tuple[TensorSpec, ...]:
    """The merged decoder's inputs: ids, the mask over past + new tokens, positions (not for a model with
    ALiBi, which has none: BLOOM, MPT), and each layer's cache."""
    specs = [_ids("input_ids"), _ids("attention_mask", TOTAL)]
    if positions:
        specs.append(_ids("position_ids"))
    for i in range(layers):
        for kind in ("key", "value"):
            specs.append(TensorSpec(f"past_key_values.{i}.{kind}", "float32", (BATCH, kv_heads, PAST, head_dim)))
    return tuple(specs)


def uses_positions(config: Mapping[str, Any], forward_params: frozenset[str]) -> bool:
    """Whether a decoder reads ``position_ids``: not when its forward has none, nor when ALiBi biases the
    scores instead (Falcon with ``alibi``)."""
    return "position_ids" in forward_params and not config.get("alibi")


def cache_outputs(layers: int) -> tuple[str, ...]:
    return ("logits", *(f"present.{i}.{kind}" for i in range(layers) for kind in ("key", "value")))


#: Sizes the cache decoder's symbols are drawn at, one plan per position: tracing (all >= 2), the first step
#: (an empty cache), a later step (one new token). Only these keep the mask as long as past + new tokens.
CACHE_SIZES: dict[str, tuple[int, ...]] = {
    BATCH: (2, 1, 3),
    SEQ: (5, 4, 1),
    PAST: (3, 0, 6),
    TOTAL: (8, 4, 7),
}
