"""A size budget for models built from a config (a Hugging Face ``config.json``), checked before building.

A config is a few numbers, and transformers builds whatever they describe: a
16 KB folder claiming ``vocab_size`` 64 Mi builds gigabytes of random weights,
``num_hidden_layers`` 10^6 builds until the step limit. So the parameters are
estimated from the config first (embeddings, positions, per layer
4*hidden^2 + 2*hidden*intermediate, for the encoder and the decoder), and the
widest single activation of one example (attention scores heads*seq^2, the
feed-forward seq*intermediate). A real model's parameters are in its weight
files: the budget is one parameter per byte of those files (fp32, fp16 and
int8 fit) plus ``FREE_PARAMS`` for a head the folder does not hold, unless
``FWX_MAX_PARAMS`` sets it outright.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwx.errors import UnsafeModelError

ENV = "FWX_MAX_PARAMS"
#: Parameters a folder may build beyond what its weight files hold (a new head, random-initialised).
FREE_PARAMS = 100_000_000
#: Elements one activation tensor of one example may hold (4 GiB in float32).
MAX_ACTIVATION = 2**30
#: The sequence an example is traced at, at most (fwx's sample inputs are shorter).
SAMPLE_SEQ = 512
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt")
HINT = f"a config that describes a model far larger than its weight files is refused; set {ENV} if it is real"

# Each size by the names configs use for it (BERT/Llama, GPT-2, T5, BART, DistilBERT, ...).
_HIDDEN = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim")
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers")
_DECODER_LAYERS = ("num_decoder_layers", "decoder_layers")
_INTERMEDIATE = ("intermediate_size", "d_ff", "ffn_dim", "n_inner", "hidden_dim", "encoder_ffn_dim")
_HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads")
_POSITIONS = ("max_position_embeddings", "n_positions", "max_source_positions")
_VOCAB = ("vocab_size",)
#: What one label's two dict entries cost, counted in parameters (bytes here, as the budget counts them).
_LABEL_ENTRY = 256


@dataclass(frozen=True)
class Estimate:
    """Parameters and the widest activation a config describes, and the field that weighs most."""

    params: int
    activation: int
    heaviest: str
    widest: str = ""  # the field that makes the widest activation


def _size(config: Mapping[str, Any], names: Iterable[str], default: int = 0) -> tuple[int, str]:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return max(0, value), name
    return default, ""


def _sections(config: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    """The config and the sub-configs composite models nest (text_config, vision_config, encoder, ...)."""
    yield config
    for value in config.values():
        if isinstance(value, Mapping) and any(k in value for k in (*_HIDDEN, *_LAYERS)):
            yield value


def _one(config: Mapping[str, Any]) -> tuple[int, tuple[str, int], dict[str, int]]:
    hidden, h_name = _size(config, _HIDDEN)
    layers, l_name = _size(config, _LAYERS)
    decoder, d_name = _size(config, _DECODER_LAYERS)
    inter, i_name = _size(config, _INTERMEDIATE, 4 * hidden)
    heads, _ = _size(config, _HEADS, 1)
    positions, p_name = _size(config, _POSITIONS)
    vocab, v_name = _size(config, _VOCAB)
    labels = _labels(config)
    per_layer = 4 * hidden * hidden + 2 * hidden * inter
    parts = {
        f"{v_name}={vocab}": vocab * hidden,
        f"{p_name}={positions}": positions * hidden,
        f"{l_name}={layers}": layers * per_layer,
        f"{d_name}={decoder}": decoder * (per_layer + 4 * hidden * hidden),  # + cross-attention
        # a classification head, and before it id2label and label2id (a few hundred bytes a label)
        f"num_labels={labels}": labels * (hidden + _LABEL_ENTRY),
        f"{h_name}={hidden}": 0,
        f"{i_name}={inter}": 0,
    }
    parts = {k: v for k, v in parts.items() if not k.startswith("=")}  # sizes this config does not name
    seq = min(positions or SAMPLE_SEQ, SAMPLE_SEQ)
    widest = {"num_attention_heads": heads * seq * seq, i_name or "intermediate_size": seq * inter, v_name: seq * vocab}
    return sum(parts.values()), max(widest.items(), key=lambda kv: kv[1]), parts


def _labels(config: Mapping[str, Any]) -> int:
    """Labels a head is built for: ``num_labels``, else as many as ``id2label`` names (transformers builds
    ``id2label`` of ``num_labels`` entries before any weight: 3e8 of them filled the loader's memory)."""
    labels = config.get("num_labels")
    if isinstance(labels, int) and not isinstance(labels, bool):
        return max(0, labels)
    names = config.get("id2label")
    return len(names) if isinstance(names, Mapping | list) else 0


def estimate(config: Mapping[str, Any]) -> Estimate:
    """What building ``config`` costs, before anything is built."""
    params, activation, heaviest, weight, widest = 0, 0, "", -1, ""
    for section in _sections(config):
        p, (a_name, a), parts = _one(section)
        params += p
        if a > activation:
            activation, widest = a, a_name
        name, value = max(parts.items(), key=lambda kv: kv[1], default=("", 0))
        if value > weight:
            heaviest, weight = name, value
    return Estimate(params, activation, heaviest, widest)


def weight_bytes(folder: Path) -> int:
    """Bytes of the folder's weight files (links followed: a hub cache snapshot links to its blobs)."""
    total = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        if entry.name.endswith(_WEIGHT_SUFFIXES):
            try:
                total += entry.stat().st_size
            except OSError:
                continue
    return total


def _env_limit() -> int | None:
    env = os.environ.get(ENV, "").strip()
    if not env:
        return None
    try:
        return max(0, int(float(env)))
    except ValueError:
        raise UnsafeModelError(f"{ENV}={env!r} is not a number of parameters", hint="e.g. 8e9") from None


def limit(folder: Path) -> int:
    """Parameters ``folder``'s config may describe: ``FWX_MAX_PARAMS``, else its weight bytes + ``FREE_PARAMS``."""
    env = _env_limit()
    return env if env is not None else FREE_PARAMS + weight_bytes(folder)


def check(config: Mapping[str, Any], folder: Path) -> Estimate:
    """Refuse (one line naming the field) a config whose model would not fit the budget; else its estimate."""
    est = estimate(config)
    allowed = limit(folder)
    where = Path(folder) / "config.json"
    if est.params > allowed:
        raise UnsafeModelError(
            f"{where}: {est.heaviest or 'the config'} makes a model of about {est.params:.2g} parameters, "
            f"past the budget of {allowed:.2g} ({ENV} raises it)",
            hint=HINT,
        )
    widest = max(MAX_ACTIVATION, _env_limit() or 0)
    if est.activation > widest:
        raise UnsafeModelError(
            f"{where}: {est.widest} makes one example's activation of about {est.activation:.2g} values, "
            f"past {widest:.2g} ({ENV} raises it)",
            hint=HINT,
        )
    return est
