"""The file names a Hugging Face folder's loaders read: one list for what the boundary copies in
(``fwx.safety.hf_fileset``) and what an export copies beside the artifacts (``fwx.sources.hf_files``)."""

from __future__ import annotations

CONFIG = "config.json"
#: Files a client needs beside the artifacts (tokenizer, preprocessor and generation settings, labels):
#: copied into every version exported from a folder (``fwx.sources.hf_files``).
#: The tokenizer's own files (a folder holding any of them has a tokenizer to try).
TOKENIZER = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
)
ASSETS = (
    CONFIG,
    "generation_config.json",
    *TOKENIZER,
    "preprocessor_config.json",
    "processor_config.json",
    "chat_template.jinja",
)
#: Every file transformers' config, tokenizer, processor and generation loaders read by name.
KNOWN = frozenset(ASSETS) | {
    "spm.model",
    "sentencepiece.model",
    "source.spm",
    "target.spm",
    "bpe.codes",
    "video_preprocessor_config.json",
    "chat_template.json",
}

#: JSON files whose ``auto_map`` names modules of the folder (as ``fwx.sources.hf_files`` checks them).
CODE_MAPS = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")


def shard_names(index: object) -> list[str]:
    """The names a weight index's ``weight_map`` lists, sorted and unique (none when it holds no such map)."""
    found = index.get("weight_map") if isinstance(index, dict) else None
    return sorted({str(s) for s in found.values()}) if isinstance(found, dict) else []


def plain_name(name: str) -> bool:
    """A file directly in the folder: no folder part, not a dot file (what an index may name as a shard)."""
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")
