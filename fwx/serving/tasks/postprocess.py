"""The model's outputs as the task's answer, in the shape transformers' pipelines return.

One answer per text, each what ``pipeline(task)(text)`` returns for it:
``{"label", "score"}``; a list of ``{"entity", "score", "index", "word",
"start", "end"}``; ``{"score", "start", "end", "answer"}``; a list of
``{"score", "token", "token_str", "sequence"}``; a mean-pooled embedding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fwx.serving.tasks.assets import TextAssets

FILL_MASK_TOP_K = 5
MAX_ANSWER_TOKENS = 15


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return np.asarray(e / e.sum(axis=axis, keepdims=True))


def _label(assets: TextAssets, index: int) -> str:
    return label_of(assets.config, index)


def label_of(config: dict[str, Any], index: int) -> str:
    table = config.get("id2label") or {}
    return str(table.get(str(index), table.get(index, f"LABEL_{index}")))


def top_labels(
    config: dict[str, Any], logits: np.ndarray, k: int, *, one_label_sigmoid: bool = True
) -> list[list[dict[str, Any]]]:
    """The ``k`` best labels per row, best first, scored as the image and audio classification pipelines score
    (sigmoid for multi-label problems, and for one label where the image pipeline does so; the raw logits for
    regression; else softmax)."""
    problem = config.get("problem_type")
    x = logits.astype(np.float64)
    if problem == "regression":
        scores = x
    elif problem == "multi_label_classification" or (one_label_sigmoid and logits.shape[-1] == 1):
        scores = 1.0 / (1.0 + np.exp(-x))
    else:
        scores = softmax(x)
    out = []
    for row in scores:
        order = np.argsort(-row, kind="stable")[: max(1, min(k, row.shape[-1]))]
        out.append([{"label": label_of(config, int(i)), "score": float(row[i])} for i in order])
    return out


def classify(assets: TextAssets, logits: np.ndarray) -> list[dict[str, Any]]:
    """Softmax over labels (sigmoid for one label or multi-label problems), as the pipeline's default."""
    multi = assets.config.get("problem_type") == "multi_label_classification" or logits.shape[-1] == 1
    scores = 1.0 / (1.0 + np.exp(-logits)) if multi else softmax(logits.astype(np.float64))
    best = scores.argmax(axis=-1)
    return [{"label": _label(assets, int(b)), "score": float(s[b])} for b, s in zip(best, scores, strict=True)]


def entities(assets: TextAssets, logits: np.ndarray, encodings: Sequence[Any]) -> list[list[dict[str, Any]]]:
    """Per token (special tokens and ``O`` left out), the pipeline's ``aggregation_strategy="none"``."""
    out = []
    for row, enc in zip(logits, encodings, strict=False):
        probs = softmax(row[: len(enc.ids)].astype(np.float64))
        found = []
        for i, (special, (start, end)) in enumerate(zip(enc.special_tokens_mask, enc.offsets, strict=True)):
            label = _label(assets, int(probs[i].argmax()))
            if special or label == "O":
                continue
            found.append(
                {
                    "entity": label,
                    "score": float(probs[i].max()),
                    "index": i,
                    "word": enc.tokens[i],
                    "start": start,
                    "end": end,
                }
            )
        out.append(found)
    return out


def fill_mask(assets: TextAssets, logits: np.ndarray, encodings: Sequence[Any]) -> list[Any]:
    """The top tokens at each mask position (a list per mask when a text has several)."""
    tok = assets.tokenizer
    mask_id = tok.token_to_id(_special(assets, "mask_token") or "[MASK]")
    out: list[Any] = []
    for row, enc in zip(logits, encodings, strict=False):
        ids = list(enc.ids)
        per_mask = []
        for pos in [i for i, t in enumerate(ids) if t == mask_id]:
            probs = softmax(row[pos].astype(np.float64))
            top = np.argsort(-probs, kind="stable")[:FILL_MASK_TOP_K]
            per_mask.append(
                [
                    {
                        "score": float(probs[t]),
                        "token": int(t),
                        "token_str": tok.decode([int(t)]),
                        "sequence": tok.decode([*ids[:pos], int(t), *ids[pos + 1 :]], skip_special_tokens=True),
                    }
                    for t in top
                ]
            )
        out.append(per_mask[0] if len(per_mask) == 1 else per_mask)
    return out


def _special(assets: TextAssets, key: str) -> str | None:
    value = assets.tokenizer_config.get(key)
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def answers(
    start_logits: np.ndarray, end_logits: np.ndarray, encodings: Sequence[Any], contexts: Sequence[str]
) -> list[dict[str, Any]]:
    """The most likely span of the context (at most 15 tokens), scored as start x end probability."""
    out = []
    for s_row, e_row, enc, context in zip(start_logits, end_logits, encodings, contexts, strict=False):
        n = len(enc.ids)
        in_context = np.array([sid == 1 for sid in enc.sequence_ids], dtype=bool)
        if not in_context.any():
            out.append({"score": 0.0, "start": 0, "end": 0, "answer": ""})
            continue
        start = softmax(np.where(in_context, s_row[:n], -1e4).astype(np.float64))
        end = softmax(np.where(in_context, e_row[:n], -1e4).astype(np.float64))
        scores = np.triu(np.tril(np.outer(start, end), MAX_ANSWER_TOKENS - 1))
        scores[~in_context, :] = 0
        scores[:, ~in_context] = 0
        i, j = np.unravel_index(int(scores.argmax()), scores.shape)
        a, b = enc.offsets[int(i)][0], enc.offsets[int(j)][1]
        out.append({"score": float(scores[i, j]), "start": int(a), "end": int(b), "answer": context[a:b]})
    return out


def embeddings(hidden: np.ndarray, mask: np.ndarray) -> list[list[float]]:
    """Mean of the hidden states over the real tokens (sentence-transformers' default pooling)."""
    m = mask[..., None].astype(np.float64)
    pooled = (hidden.astype(np.float64) * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
    return [[float(v) for v in row] for row in pooled]
