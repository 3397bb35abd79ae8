"""WAV bytes in, the audio classifier's labels or the CTC transcript out (KServe v2 ``BYTES``, one clip each).

The stdlib ``wave`` module reads the clip (PCM16 mono only; the header's frame
count is checked before any sample is read), the samples become float32 in
[-1, 1) (divided by 32768), and the version's Wav2Vec2 feature extractor from
``preprocessor_config.json`` is applied as transformers applies it: the clip
at the extractor's sampling rate, else a 400 (fwx does not resample), then
zero mean and unit variance over the clip when ``do_normalize``. Each clip runs
as its own row, unpadded, as the pipeline runs it; clips of equal length share
a batch in the version's batcher. A CTC transcript is decoded from the
version's ``vocab.json`` as ``Wav2Vec2CTCTokenizer`` decodes: argmax per frame,
repeats collapsed, the pad token dropped, the word delimiter made a space.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import wave
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fwx.errors import InputError
from fwx.serving.tasks.assets import json_asset
from fwx.serving.tasks.media import Cached, files
from fwx.serving.tasks.postprocess import top_labels
from fwx.serving.tasks.textinfer import jsonlist

if TYPE_CHECKING:
    from fwx.serving.batching.hooks import ModelSlot
    from fwx.serving.models import LoadedModel
    from fwx.serving.types import InferRequest, InferResponse, InferTensor

MAX_SECONDS = 60.0  # per clip
MAX_REQUEST_SECONDS = 300.0
TOP_K = 5  # the audio classification pipeline's default
EXTRACTORS = frozenset({"Wav2Vec2FeatureExtractor"})
TOKENIZERS = frozenset({"Wav2Vec2CTCTokenizer"})
#: transformers' ``clean_up_tokenization`` when the tokenizer asks for it.
_CLEAN_UP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (
        " 's",
        "'s",
    ),
    (" 've", "'ve"),
    (" 're", "'re"),
)


@dataclass(frozen=True)
class CtcVocab:
    """What ``Wav2Vec2CTCTokenizer.decode(ids, skip_special_tokens=False)`` needs, as the ASR pipeline calls it."""

    tokens: dict[int, str]
    unk: str
    pad: str
    delimiter: str
    replacement: str
    lower: bool
    clean_up: bool

    def decode(self, ids: np.ndarray) -> str:
        chars = [t for t, _ in itertools.groupby(self.tokens.get(int(i), self.unk) for i in ids)]
        text = "".join(self.replacement if c == self.delimiter else c for c in chars if c != self.pad).strip()
        text = text.lower() if self.lower else text
        if self.clean_up:
            for a, b in _CLEAN_UP:
                text = text.replace(a, b)
        return text


@dataclass(frozen=True)
class AudioAssets:
    task: str
    config: dict[str, Any]
    rate: int
    normalize: bool
    min_samples: int
    input_name: str
    mask_name: str | None
    vocab: CtcVocab | None


_CACHE = Cached()


def audio_assets(model: LoadedModel, task: str) -> AudioAssets:
    """The version's feature extractor (and CTC vocabulary), read once; a 400 naming what is not supported."""
    return _CACHE.get(model, lambda: _load(model, task), AudioAssets)


def _refuse(model: str, why: str) -> InputError:
    return InputError(f"model {model}: {why}", hint="send the input_values tensor instead; the tensor interface works")


def _load(model: LoadedModel, task: str) -> AudioAssets:
    names = model.signature.input_names
    if "input_values" not in names or set(names) - {"input_values", "attention_mask"}:
        raise InputError(f"model {model.name} takes tensors, not audio: its inputs are {list(names)}")
    doc = json_asset(model, "preprocessor_config.json")
    kind = doc.get("feature_extractor_type")
    rate = doc.get("sampling_rate")
    if kind not in EXTRACTORS or doc.get("feature_size", 1) != 1:
        raise _refuse(
            model.name, f"feature extractor {kind!r} is not one fwx applies ({', '.join(sorted(EXTRACTORS))})"
        )
    if not isinstance(rate, int) or not 0 < rate <= 384_000:
        raise _refuse(model.name, f"sampling_rate {rate!r} is not a positive integer")
    config = json_asset(model, "config.json") if "config.json" in model.manifest.assets else {}
    vocab = _vocab(model) if task == "automatic-speech-recognition" else None
    mask = "attention_mask" if "attention_mask" in names else None
    normalize = doc.get("do_normalize", True) is True
    return AudioAssets(task, config, rate, normalize, _min_samples(config), "input_values", mask, vocab)


def _vocab(model: LoadedModel) -> CtcVocab:
    tcfg = json_asset(model, "tokenizer_config.json") if "tokenizer_config.json" in model.manifest.assets else {}
    kind = tcfg.get("tokenizer_class")
    if kind not in TOKENIZERS:
        raise _refuse(model.name, f"tokenizer {kind!r} is not one fwx decodes ({', '.join(sorted(TOKENIZERS))})")
    table = json_asset(model, "vocab.json")
    if not all(isinstance(k, str) and isinstance(v, int) for k, v in table.items()):
        raise _refuse(model.name, "vocab.json is not one token -> id table (a multilingual vocabulary is not decoded)")

    def text(key: str, default: str) -> str:
        value = tcfg.get(key, default)
        value = value.get("content", default) if isinstance(value, dict) else value
        return value if isinstance(value, str) else default

    return CtcVocab(
        {v: k for k, v in table.items()},
        text("unk_token", "<unk>"),
        text("pad_token", "<pad>"),
        text("word_delimiter_token", "|"),
        text("replace_word_delimiter_char", " "),
        tcfg.get("do_lower_case") is True,
        tcfg.get("clean_up_tokenization_spaces") is True,
    )


def _min_samples(config: dict[str, Any]) -> int:
    """The shortest clip the feature encoder's convolutions turn into one frame."""
    kernels, strides = config.get("conv_kernel") or [], config.get("conv_stride") or []
    need = 1
    for k, s in reversed(list(zip(kernels, strides, strict=False))):
        if isinstance(k, int) and isinstance(s, int):
            need = (need - 1) * s + k
    return need


def read_wav(raw: bytes, index: int, rate: int, budget: list[int]) -> np.ndarray:
    """One element as float32 samples; ``budget`` holds the request's samples left."""
    try:
        with wave.open(io.BytesIO(raw), "rb") as w:
            channels, width, got, frames = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            if channels != 1 or width != 2:
                raise InputError(
                    f"clip {index} has {channels} channel(s) of {8 * width}-bit samples; fwx reads PCM16 mono",
                    hint="send 16-bit mono WAV",
                )
            if got != rate:
                raise InputError(f"clip {index} is sampled at {got} Hz; the model takes {rate} Hz", hint="resample it")
            if frames > MAX_SECONDS * rate:
                raise InputError(f"clip {index} is over {MAX_SECONDS:.0f} s", hint="send shorter clips")
            budget[0] -= frames
            if budget[0] < 0:
                raise InputError(f"the request's clips are over {MAX_REQUEST_SECONDS:.0f} s in all", hint="send fewer")
            data = w.readframes(frames)
    except (wave.Error, EOFError, ValueError) as exc:
        raise InputError(
            f"clip {index} is not a PCM WAV file ({exc or 'empty'})", hint="send 16-bit mono WAV"
        ) from None
    if len(data) != 2 * frames:
        raise InputError(f"clip {index} is truncated: {len(data) // 2} of {frames} samples", hint="send the whole file")
    return (np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768.0)).astype(np.float32)


def features(assets: AudioAssets, tensor: InferTensor) -> list[np.ndarray]:
    """Every element of a BYTES tensor as the model's ``input_values`` row, normalized as the extractor does."""
    budget = [int(MAX_REQUEST_SECONDS * assets.rate)]
    rows = []
    for i, raw in enumerate(files(tensor, "clip")):
        x = read_wav(raw, i, assets.rate, budget)
        if len(x) < assets.min_samples:
            raise InputError(f"clip {i} has {len(x)} samples; the model needs at least {assets.min_samples}")
        if assets.normalize:
            x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
        rows.append(np.asarray(x, dtype=np.float32)[None])
    return rows


async def run_audio_task(
    model: LoadedModel, slot: ModelSlot, request: InferRequest, deadline: float | None, task: str
) -> InferResponse:
    """Each clip's answer: the top labels (audio classification) or ``{"text"}`` (CTC speech recognition)."""
    assets = await asyncio.to_thread(audio_assets, model, task)
    if len(request.inputs) != 1:
        raise InputError(f"{task} takes one BYTES input of WAV clips, not {len(request.inputs)}")
    k = request.parameters.get("top_k", TOP_K)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InputError("parameter top_k must be a positive integer")
    rows = await asyncio.to_thread(features, assets, request.inputs[0])

    async def one(x: np.ndarray) -> np.ndarray:
        feeds = {assets.input_name: x}
        if assets.mask_name:
            feeds[assets.mask_name] = np.ones(x.shape, dtype=np.int64)
        out = await slot.batcher.submit(feeds, 1, deadline)
        return np.asarray(dict(out)["logits"])

    logits = await asyncio.gather(*(one(x) for x in rows))
    if assets.vocab is not None:
        vocab = assets.vocab
        return jsonlist(model, request, [{"text": vocab.decode(z[0].argmax(axis=-1))} for z in logits])
    config = assets.config
    return jsonlist(model, request, [top_labels(config, z, k, one_label_sigmoid=False)[0] for z in logits])
