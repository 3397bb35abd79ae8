"""Tiny Hugging Face folders, saved as users save them (``save_pretrained``), random weights, no download.

Each builder makes a model from a small config (hidden size 32, 1-2 layers) with a wide initialiser
(logits of order 1, and generated tokens that vary), saves it to a folder and returns the folder with the
task it is exported for. A word-level tokenizer trained on a few sentences goes beside the text models.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

VOCAB = 96
CORPUS = (
    "Hello world, this is a test.",
    "The quick brown fox jumps over the lazy dog.",
    "fwx exports models.",
    "A tokenizer saved beside the model.",
)


def transformers() -> Any:
    """``transformers`` beside a CPU torch and PyPI's CUDA torchvision (see fwx.sources.hf.import_transformers)."""
    if "torchvision" not in sys.modules:
        sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import transformers as tf

    tf.logging.set_verbosity_error()
    return tf


#: The tiny shapes, one per family, that the exporter tests, the serving tests and the benchmarks share
#: (hidden size 32, 1-2 layers; the decoders with grouped-query attention, 4 heads over 2 key/value heads).
_BERT = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}
_GQA = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
SHAPES: dict[str, dict[str, Any]] = {
    "BertConfig": _BERT,
    "RobertaConfig": _BERT,
    "LlamaConfig": _GQA,
    "MistralConfig": _GQA,
    "Qwen2Config": _GQA,
    "Gemma2Config": _GQA,
}


def tiny_config(config: str, **overrides: Any) -> Any:
    """``transformers.<config>`` in its family's tiny shape, ``overrides`` applied: the one place the shapes live."""
    return getattr(transformers(), config)(**{**SHAPES[config], **overrides})


def save_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(list(CORPUS), trainers.WordLevelTrainer(special_tokens=specials))
    fast = transformers().PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )
    fast.save_pretrained(folder)


def _save(model: Any, folder: Path, tokenizer: bool = False) -> Path:
    import torch

    torch.manual_seed(0)
    model.eval()
    model.save_pretrained(folder)
    if tokenizer:
        save_tokenizer(folder)
    return folder


def _init(model: Any, std: float = 0.3) -> Any:
    """Re-draw every weight from N(0, std): a tiny random model whose outputs are of order 1."""
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower() or name.endswith("ln_f.weight") or ".ln_" in name:
                continue
            p.normal_(0.0, std)
    return model


def bert(folder: Path) -> tuple[Path, str]:
    cfg = tiny_config("BertConfig", num_labels=3, architectures=["BertForSequenceClassification"])
    model = transformers().BertForSequenceClassification(cfg)
    return _save(_init(model), folder, tokenizer=True), "text-classification"


def distilbert(folder: Path) -> tuple[Path, str]:
    tf = transformers()
    cfg = tf.DistilBertConfig(
        vocab_size=VOCAB,
        dim=32,
        n_layers=1,
        n_heads=2,
        hidden_dim=64,
        max_position_embeddings=64,
        architectures=["DistilBertModel"],
    )
    return _save(_init(tf.DistilBertModel(cfg)), folder, tokenizer=True), "feature-extraction"


def gpt2(folder: Path, with_past: bool = False) -> tuple[Path, str]:
    tf = transformers()
    cfg = tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    task = "text-generation-with-past" if with_past else "text-generation"
    return _save(_init(tf.GPT2LMHeadModel(cfg)), folder), task


def _gqa_decoder(
    folder: Path, config: str, model: str, with_past: bool, std: float = 0.3, **extra: Any
) -> tuple[Path, str]:
    """A Llama-class decoder with grouped-query attention (4 heads over 2 key/value heads)."""
    cfg = tiny_config(config, architectures=[model], **extra)
    task = "text-generation-with-past" if with_past else "text-generation"
    return _save(_init(getattr(transformers(), model)(cfg), std), folder), task


def mistral(folder: Path, with_past: bool = True) -> tuple[Path, str]:
    """A sliding window of 4 tokens: a prompt of 8 already has keys outside it."""
    return _gqa_decoder(folder, "MistralConfig", "MistralForCausalLM", with_past, sliding_window=4)


def gemma2(folder: Path, with_past: bool = True) -> tuple[Path, str]:
    """Sliding-window layers beside global ones, soft-capped attention and logits."""
    return _gqa_decoder(
        folder, "Gemma2Config", "Gemma2ForCausalLM", with_past, std=0.05, sliding_window=4, head_dim=8, eos_token_id=95
    )


def bloom(folder: Path, with_past: bool = True) -> tuple[Path, str]:
    """ALiBi: no position table, no ``position_ids``."""
    tf = transformers()
    cfg = tf.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4, architectures=["BloomForCausalLM"])
    task = "text-generation-with-past" if with_past else "text-generation"
    return _save(_init(tf.BloomForCausalLM(cfg)), folder), task


def llama(folder: Path, with_past: bool = False) -> tuple[Path, str]:
    return _gqa_decoder(folder, "LlamaConfig", "LlamaForCausalLM", with_past)


def qwen2(folder: Path, with_past: bool = True) -> tuple[Path, str]:
    return _gqa_decoder(folder, "Qwen2Config", "Qwen2ForCausalLM", with_past)


def vit(folder: Path) -> tuple[Path, str]:
    tf = transformers()
    cfg = tf.ViTConfig(
        image_size=16,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=4,
    )
    return _save(_init(tf.ViTForImageClassification(cfg), 0.1), folder), "image-classification"


def whisper(folder: Path) -> tuple[Path, str]:
    tf = transformers()
    cfg = tf.WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=8,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=8,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        max_target_positions=16,
    )
    return _save(_init(tf.WhisperForConditionalGeneration(cfg), 0.1), folder), "automatic-speech-recognition"


def t5(folder: Path) -> tuple[Path, str]:
    tf = transformers()
    cfg = tf.T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=16,
        d_ff=64,
        num_layers=1,
        num_heads=2,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    return _save(_init(tf.T5ForConditionalGeneration(cfg), 0.2), folder, tokenizer=True), "text2text-generation"


def _bart_like(folder: Path, config: str, model: str) -> tuple[Path, str]:
    tf = transformers()
    cfg = getattr(tf, config)(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
        architectures=[model],
    )
    return _save(_init(getattr(tf, model)(cfg), 0.2), folder), "text2text-generation"


def bart(folder: Path) -> tuple[Path, str]:
    return _bart_like(folder, "BartConfig", "BartForConditionalGeneration")


def marian(folder: Path) -> tuple[Path, str]:
    """``MarianMTModel``: a translation model whose class name says nothing of its task."""
    return _bart_like(folder, "MarianConfig", "MarianMTModel")


def roberta(folder: Path) -> tuple[Path, str]:
    """A type table of one row (``type_vocab_size`` 1): no ``token_type_ids``."""
    tf = transformers()
    cfg = tiny_config(
        "RobertaConfig",
        max_position_embeddings=72,
        type_vocab_size=1,
        pad_token_id=0,
        num_labels=2,
        architectures=["RobertaForSequenceClassification"],
    )
    return _save(_init(tf.RobertaForSequenceClassification(cfg), 0.1), folder), "text-classification"


def _wav2vec2(folder: Path, model: str, task: str) -> tuple[Path, str]:
    """Wav2Vec2's feature encoder, two convolutions (kernel 10 stride 5, kernel 3 stride 2): 23 samples at least."""
    tf = transformers()
    cfg = tf.Wav2Vec2Config(
        vocab_size=16,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=4,
        num_conv_pos_embedding_groups=2,
        num_labels=3,
        classifier_proj_size=8,
        architectures=[model],
    )
    return _save(_init(getattr(tf, model)(cfg), 0.1), folder), task


def wav2vec2_ctc(folder: Path) -> tuple[Path, str]:
    return _wav2vec2(folder, "Wav2Vec2ForCTC", "automatic-speech-recognition")


def wav2vec2_audio(folder: Path) -> tuple[Path, str]:
    return _wav2vec2(folder, "Wav2Vec2ForSequenceClassification", "audio-classification")


def resnet(folder: Path) -> tuple[Path, str]:
    """Convolutions end to end: any height and width."""
    tf = transformers()
    cfg = tf.ResNetConfig(
        embedding_size=8,
        hidden_sizes=[8, 16],
        depths=[1, 1],
        layer_type="basic",
        num_labels=3,
        architectures=["ResNetForImageClassification"],
    )
    return _save(_init(tf.ResNetForImageClassification(cfg), 0.1), folder), "image-classification"


def _resnet_backbone(stages: int) -> Any:
    """A tiny transformers ResNet as a detector's backbone (no timm, nothing pretrained): ``stages`` stages,
    every one an output (DETR's segmentation head and MaskFormer's pixel decoder read four)."""
    names = [f"stage{i + 1}" for i in range(stages)]
    return transformers().ResNetConfig(
        embedding_size=8,
        hidden_sizes=[8 * 2**i for i in range(stages)],
        depths=[1] * stages,
        layer_type="basic",
        out_features=names if stages > 2 else names[-1:],
    )


def _detr_like(folder: Path, config: str, model: str, task: str, heads: int = 2, stages: int = 2) -> tuple[Path, str]:
    """DETR and Conditional DETR from config alone: a transformers ResNet backbone, no timm, no download."""
    tf = transformers()
    cfg = getattr(tf, config)(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone=None,
        backbone_config=_resnet_backbone(stages),
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_queries=5,
        num_labels=3,
        architectures=[model],
    )
    return _save(_init(getattr(tf, model)(cfg), 0.1), folder), task


def detr(folder: Path) -> tuple[Path, str]:
    return _detr_like(folder, "DetrConfig", "DetrForObjectDetection", "object-detection")


def conditional_detr(folder: Path) -> tuple[Path, str]:
    return _detr_like(folder, "ConditionalDetrConfig", "ConditionalDetrForObjectDetection", "object-detection")


def detr_segmentation(folder: Path) -> tuple[Path, str]:
    """The mask head's group norms want d_model + heads divisible by 8 (32 + 8), and four backbone stages."""
    return _detr_like(folder, "DetrConfig", "DetrForSegmentation", "image-segmentation", heads=8, stages=4)


def yolos(folder: Path) -> tuple[Path, str]:
    """A ViT with detection tokens: its position table fixes the image size (32 x 32)."""
    tf = transformers()
    cfg = tf.YolosConfig(
        image_size=[32, 32],
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_detection_tokens=5,
        num_labels=3,
        architectures=["YolosForObjectDetection"],
    )
    return _save(_init(tf.YolosForObjectDetection(cfg), 0.1), folder), "object-detection"


def segformer(folder: Path) -> tuple[Path, str]:
    tf = transformers()
    cfg = tf.SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[8, 16],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        decoder_hidden_size=16,
        num_labels=3,
        architectures=["SegformerForSemanticSegmentation"],
    )
    return _save(_init(tf.SegformerForSemanticSegmentation(cfg), 0.1), folder), "image-segmentation"


def maskformer(folder: Path) -> tuple[Path, str]:
    """Group norms of 32 groups: the pixel decoder's widths are 32."""
    tf = transformers()
    decoder = {
        "model_type": "detr",
        "d_model": 16,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 32,
        "decoder_ffn_dim": 32,
        "num_queries": 5,
    }
    cfg = tf.MaskFormerConfig(
        backbone_config=_resnet_backbone(4),
        use_pretrained_backbone=False,
        num_queries=5,
        num_labels=3,
        fpn_feature_size=32,
        mask_feature_size=32,
        decoder_config=decoder,
        architectures=["MaskFormerForInstanceSegmentation"],
    )
    return _save(_init(tf.MaskFormerForInstanceSegmentation(cfg), 0.1), folder), "image-segmentation"


def mask2former(folder: Path) -> tuple[Path, str]:
    tf = transformers()
    cfg = tf.Mask2FormerConfig(
        backbone_config=_resnet_backbone(4),
        use_pretrained_backbone=False,
        num_queries=5,
        num_labels=3,
        feature_size=32,
        mask_feature_size=32,
        hidden_dim=32,
        encoder_layers=1,
        decoder_layers=2,
        num_attention_heads=2,
        dim_feedforward=32,
        encoder_feedforward_dim=32,
        architectures=["Mask2FormerForUniversalSegmentation"],
    )
    return _save(_init(tf.Mask2FormerForUniversalSegmentation(cfg), 0.1), folder), "image-segmentation"


BUILDERS: dict[str, Callable[[Path], tuple[Path, str]]] = {
    "bert": bert,
    "distilbert": distilbert,
    "gpt2": gpt2,
    "llama": llama,
    "vit": vit,
    "whisper": whisper,
    "t5": t5,
    "roberta": roberta,
    "bart": bart,
    "marian": marian,
    "wav2vec2_ctc": wav2vec2_ctc,
    "wav2vec2_audio": wav2vec2_audio,
    "resnet": resnet,
    "detr": detr,
    "conditional_detr": conditional_detr,
    "detr_segmentation": detr_segmentation,
    "yolos": yolos,
    "segformer": segformer,
    "maskformer": maskformer,
    "mask2former": mask2former,
}
