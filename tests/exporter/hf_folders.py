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
    tf = transformers()
    cfg = tf.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=3,
        architectures=["BertForSequenceClassification"],
    )
    return _save(_init(tf.BertForSequenceClassification(cfg)), folder, tokenizer=True), "text-classification"


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
    tf = transformers()
    cfg = getattr(tf, config)(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        architectures=[model],
        **extra,
    )
    task = "text-generation-with-past" if with_past else "text-generation"
    return _save(_init(getattr(tf, model)(cfg), std), folder), task


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
    cfg = tf.RobertaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
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
}
