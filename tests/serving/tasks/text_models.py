"""Tiny Hugging Face folders exported with fwx into one repository, and transformers' own answers for them.

The decoders come from tests/exporter/hf_folders (random weights, ``save_pretrained``); each gets a
word-level tokenizer whose vocabulary covers every id the model can emit (``w11`` .. ``w95`` beside the
special tokens and the chat template's words), so a generated token always decodes to text and the texts compare token for token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.exporter import hf_folders as hf

VOCAB = hf.VOCAB
SPECIALS = ["[PAD]", "<s>", "</s>", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CHAT_WORDS = ["user", "assistant", "system", ":"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def words(*ids: int) -> str:
    return " ".join(f"w{i}" for i in ids)


def save_tokenizer(folder: Path, *, pair_template: bool = False) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate([*SPECIALS, *CHAT_WORDS])}
    vocab.update({f"w{i}": i for i in range(len(vocab), VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if pair_template:  # BERT's [CLS] a [SEP] b [SEP], type ids 0 then 1
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 4), ("[SEP]", 5)]
        )
    fast = hf.transformers().PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        bos_token="<s>",
        eos_token="</s>",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)


#: BERT heads beside text classification: model class, task.
BERT_HEADS = {
    "bert_tokens": ("BertForTokenClassification", "token-classification"),
    "bert_mask": ("BertForMaskedLM", "fill-mask"),
    "bert_qa": ("BertForQuestionAnswering", "question-answering"),
    "bert_features": ("BertModel", "feature-extraction"),
}


def _bert_head(folder: Path, cls: str) -> None:
    tf = hf.transformers()
    cfg = hf.tiny_config(
        "BertConfig",
        num_labels=2 if cls == "BertForQuestionAnswering" else 3,  # QA splits its logits into start and end
        architectures=[cls],
    )
    hf._save(hf._init(getattr(tf, cls)(cfg)), folder)


def build(root: Path, name: str) -> tuple[Path, str]:
    """The folder of ``name``: llama, qwen2, gpt2 (decoders with a cache), bert (text classification) and
    the BERT heads of ``BERT_HEADS``."""
    folder = root / "src" / name
    if name == "bert":
        _, task = hf.bert(folder)
        save_tokenizer(folder, pair_template=True)
        return folder, task
    if name in BERT_HEADS:
        cls, task = BERT_HEADS[name]
        _bert_head(folder, cls)
        save_tokenizer(folder, pair_template=True)
        return folder, task
    builder = {"llama": hf.llama, "qwen2": hf.qwen2, "gpt2": hf.gpt2}[name]
    _, task = builder(folder, with_past=True)
    save_tokenizer(folder)
    return folder, task


def export(root: Path, names: list[str], formats: tuple[str, ...] = ("onnx",)) -> tuple[Path, dict[str, Path]]:
    """The repository (root/repo) with each model exported to ONNX, and the source folders by name.

    With other ``formats``, each is its own model named ``NAME-FORMAT`` (one format per version, so the
    server has no other format to prefer); the source folders are keyed by the model's plain name.
    """
    from fwx.exporter import ExportOptions
    from fwx.exporter.parts import export_all

    repo = root / "repo"
    folders = {}
    for name in names:
        folder, task = build(root, name)
        for fmt in formats:
            served = name if formats == ("onnx",) else f"{name}-{fmt}"
            results = export_all(str(folder), [fmt], ExportOptions(out=repo, task=task, name=served))
            assert all(r.ok for r in results), [r.failures for r in results]
        folders[name] = folder
    return repo, folders


def reference_text(folder: Path, prompt: str, max_new: int) -> tuple[str, int]:
    """transformers' greedy ``generate`` for ``prompt``: the decoded text and the number of new tokens."""
    import numpy as np
    import torch
    from tokenizers import Tokenizer

    tf = hf.transformers()
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    model = tf.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    ids = torch.from_numpy(np.array([tok.encode(prompt).ids], dtype=np.int64))
    pad = model.generation_config.pad_token_id
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new,
            do_sample=False,
            num_beams=1,
            pad_token_id=pad if pad is not None else 0,
        )
    new = [int(t) for t in out[0, ids.shape[1] :]]
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    if new and new[-1] in eos_ids:
        new = new[:-1]
    return tok.decode(new, skip_special_tokens=True), len(new)


def pipeline(folder: Path, task: str) -> Any:
    """transformers' own pipeline for the folder, on CPU."""
    return hf.transformers().pipeline(task, model=str(folder), tokenizer=str(folder), device="cpu")
