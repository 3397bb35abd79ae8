"""A Hugging Face ``save_pretrained`` folder as a source: ``fwx export ./my-model --task TASK``.

The folder is checked as data first (``fwx.sources.hf_files``), the model is
rebuilt from its config with transformers (``local_files_only``: never a
download) and the weights fwx read itself, then wrapped for the task
(``fwx.sources.hf_tasks``: Optimum's names and axes). The source also carries
what the task knows about its use (``SourceExtras``): token ids over the real
vocabulary, tokenized sentences when a tokenizer is there, the tokenizer and
config files to publish beside the artifacts, and for a decoder with a cache a
greedy-generation check.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwx import ui
from fwx.errors import InputError, first_line
from fwx.frameworks import require
from fwx.quiet import quiet
from fwx.safety import hf_names
from fwx.signature import TensorSpec
from fwx.sources import hf_files, hf_tasks
from fwx.sources.extras import SourceExtras

SENTENCES = (
    "Hello world, this is a test.",
    "The quick brown fox jumps over the lazy dog.",
    "fwx exports models.",
)


def import_transformers() -> Any:
    """``transformers``, imported so that a CUDA build of torchvision beside a CPU torch does not break it.

    Transformers imports torchvision when it is installed; PyPI's torchvision
    wheel registers fake kernels for its C++ ops at import, which fails against
    a ``+cpu`` torch ("operator torchvision::nms does not exist"). fwx uses no
    torchvision op, so that one registration module is stood in for.
    """
    torch = require("torch", "loading Hugging Face models")
    if "torchvision" not in sys.modules and importlib.util.find_spec("torchvision") is not None:
        try:
            vision = importlib.metadata.version("torchvision")
        except importlib.metadata.PackageNotFoundError:
            vision = ""
        if str(torch.__version__).endswith("+cpu") and not vision.endswith("+cpu"):
            sys.modules.setdefault(
                "torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations")
            )
    tf = require("transformers", "loading Hugging Face folders")
    tf.logging.set_verbosity_error()
    return tf


@dataclass(frozen=True)
class Built:
    """The task's module, its inputs, what the exporter needs beyond them, and how to describe it."""

    module: Any
    inputs: tuple[TensorSpec, ...]
    extras: SourceExtras
    sizes: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class HFSource:
    """What ``fwx.sources.load`` makes a ``LoadedSource`` of (this module does not import it: no cycle)."""

    kind: str
    module: Any
    inputs: tuple[TensorSpec, ...]
    sizes: dict[str, tuple[int, ...]]
    extras: SourceExtras


def load_hf(folder: Path, *, task: str | None, trust: bool) -> HFSource:
    """The folder's model for ``task`` (inferred from ``config.architectures`` when None, and printed)."""
    config_json = hf_files.check_folder(folder, trust=trust)
    from fwx.safety.config_budget import check as check_size  # before transformers builds what it describes

    check_size(config_json, folder)
    if task is None:
        task = hf_tasks.infer_task(config_json)
        ui.info(f"  task {task} (from the config's architectures; --task to choose another)")
    base, part = hf_tasks.split_part(task)
    model = _model(folder, hf_tasks.get_task(base), config_json, trust)
    built = _build(model, base, part, config_json)
    arch = hf_tasks.architecture(config_json) or type(model).__name__
    extras = SourceExtras(
        task=task,
        ranges=built.extras.ranges,
        samples=_in_vocabulary(_tokenized(folder, built.inputs), built.extras.ranges),
        assets=hf_files.assets(folder),
        check=built.extras.check,
    )
    return HFSource(
        f"Hugging Face folder ({arch}, task {task})", built.module.eval(), built.inputs, built.sizes, extras
    )


def _model(folder: Path, task: hf_tasks.Task, config_json: dict[str, Any], trust: bool) -> Any:
    tf = import_transformers()
    torch = require("torch", "loading Hugging Face models")
    state = hf_files.load_state(hf_files.weight_files(folder), trust=trust)
    try:
        with quiet():
            config = tf.AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=trust)
            cls = _model_class(tf, task, config, config_json)
            model, info = cls.from_pretrained(
                None,
                config=config,
                state_dict=state,
                local_files_only=True,
                output_loading_info=True,
                dtype=torch.float32,
            )
    except Exception as exc:  # noqa: BLE001 - transformers raises anything for a config it cannot build
        raise InputError(
            f"transformers cannot build {folder} for task {task.name}: {reason(exc)}",
            hint="check --task (a task the architecture has a head for) and the transformers version",
        ) from exc
    missing = list(info.get("missing_keys") or [])
    if missing:
        ui.warn(
            f"{folder.name}: {len(missing)} weight(s) of the {task.name} head are not in the folder and were "
            f"initialised at random ({', '.join(sorted(missing)[:3])}); the artifacts reproduce them as they are"
        )
    return model.eval()


def reason(exc: BaseException) -> str:
    """An error's first line, and the next when the first only announces it: a config field that fails
    transformers' validation says which field on one line and what is wrong with it on the next."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {lines[1]}"[:300]
    return first_line(exc)


def _model_class(tf: Any, task: hf_tasks.Task, config: Any, config_json: dict[str, Any]) -> Any:
    """The concrete class behind the task's Auto class for this config (a CTC model for speech without mels)."""
    names = (task.auto_class, *task.fallbacks)
    if task.name == "automatic-speech-recognition" and "num_mel_bins" not in config_json:
        names = ("AutoModelForCTC",)
    for auto_name in names:
        auto = getattr(tf, auto_name, None)
        mapping = auto._model_mapping if auto is not None else {}
        if type(config) in mapping:
            cls = mapping[type(config)]
            return cls[0] if isinstance(cls, (list, tuple)) else cls
    raise InputError(
        f"{type(config).__name__} has no {task.name} model in transformers ({', '.join(names)})",
        hint=f"pick a task its architecture supports: {hf_tasks.task_names()}",
    )


def _build(model: Any, task: str, part: str | None, config_json: dict[str, Any]) -> Built:
    from fwx.sources import hf_modules as hm

    t = hf_tasks.get_task(task)
    if t.kind == "decoder-with-past":
        return _cached(model)
    if t.kind == "seq2seq":
        if t.name.endswith("-with-past") and part in ("decoder", "decoder-with-past"):
            return _seq2seq_split(model, part)
        return _seq2seq(model, part or "encoder")
    if t.kind == "image":
        specs = hf_tasks.image_inputs(config_json)
        sizes = dict(hf_tasks.IMAGE_SIZES) if hf_tasks.dynamic_image(config_json) else {}
        outputs = hf_tasks.task_outputs(task, type(model).__name__)
        return Built(hm.TaskModule(model, ("pixel_values",), outputs), specs, SourceExtras(), sizes)
    if t.kind == "audio":
        specs = hf_tasks.audio_inputs(config_json)
        if specs[0].name == "input_features":  # Whisper: the encoder alone
            module = hm.TaskModule(model.get_encoder(), ("input_features",), ("last_hidden_state",))
        else:
            module = hm.TaskModule(model, ("input_values",), ("logits",))
        return Built(module, specs, SourceExtras(), hf_tasks.audio_sizes(config_json))
    specs = hf_tasks.text_inputs(config_json, hm.forward_params(model))
    fixed = {"use_cache": False} if "use_cache" in hm.forward_params(model) else {}
    module = hm.TaskModule(model, tuple(s.name for s in specs), t.outputs, fixed=fixed)
    return Built(module, specs, SourceExtras(ranges=_ranges(model, specs, config_json)), {})


def _ranges(model: Any, specs: tuple[TensorSpec, ...], config_json: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Token ids over the whole embedding (not the smallest table's rows), type ids over the type table,
    positions below the position table's size."""
    names = {s.name for s in specs}
    out: dict[str, tuple[int, int]] = {}
    if "input_ids" in names:
        out["input_ids"] = (0, int(model.get_input_embeddings().num_embeddings))
    if "token_type_ids" in names:
        out["token_type_ids"] = (0, int(config_json.get("type_vocab_size") or 1))
    if "position_ids" in names:
        limit = config_json.get("max_position_embeddings") or config_json.get("n_positions") or 512
        out["position_ids"] = (0, int(limit))
    return out


def _cached(model: Any) -> Built:
    from fwx.sources import hf_cache
    from fwx.sources.hf_modules import forward_params

    shape = hf_cache.CacheShape.of(model.config, forward_params(model))
    config_json = model.config.to_dict()
    specs = hf_tasks.cache_inputs(shape.layers, shape.kv_heads, shape.head_dim, positions=shape.positions)
    vocab = int(model.get_input_embeddings().num_embeddings)
    extras = SourceExtras(
        ranges=_ranges(model, specs, config_json),
        check=hf_cache.greedy_check(model, shape, vocab),
    )
    return Built(hf_cache.CachedDecoder(model, shape), specs, extras, dict(hf_tasks.CACHE_SIZES))


def _seq2seq(model: Any, part: str) -> Built:
    from fwx.sources import hf_modules as hm

    config_json = model.config.to_dict()
    if part == "decoder-merged":
        return _seq2seq_cached(model)
    if part == "encoder" and "num_mel_bins" in config_json:  # Whisper: mel features -> hidden states
        specs = hf_tasks.audio_inputs(config_json)
        module = hm.TaskModule(model.get_encoder(), ("input_features",), ("last_hidden_state",))
        return Built(module, specs, SourceExtras(), {})
    if part == "encoder":
        specs = hf_tasks.text_inputs({}, frozenset())  # input_ids, attention_mask
        module = hm.TaskModule(model.get_encoder(), ("input_ids", "attention_mask"), ("last_hidden_state",))
        return Built(module, specs, SourceExtras(ranges=_ranges(model, specs, config_json)), {})
    hidden = int(getattr(model.config, "d_model", None) or model.config.hidden_size)
    specs = hf_tasks.decoder_part_inputs(hidden)
    vocab = int(model.get_input_embeddings().num_embeddings)
    return Built(hm.Seq2SeqDecoder(model), specs, SourceExtras(ranges={"input_ids": (0, vocab)}), {})


def _seq2seq_cached(model: Any) -> Built:
    from fwx.sources import hf_seq2seq

    shape = hf_seq2seq.DecoderShape.of(model.config)
    specs = hf_tasks.seq2seq_cache_inputs(shape.layers, shape.heads, shape.head_dim, shape.hidden, shape.frames)
    vocab = int(model.get_input_embeddings().num_embeddings)
    extras = SourceExtras(
        ranges={"input_ids": (0, vocab)},
        check=hf_seq2seq.greedy_check(model, shape, vocab),
    )
    module = hf_seq2seq.CachedSeq2SeqDecoder(model, shape)
    return Built(module, specs, extras, dict(hf_tasks.SEQ2SEQ_CACHE_SIZES))


def _seq2seq_split(model: Any, part: str) -> Built:
    """Optimum's ``decoder_model`` (first step, the whole cache out) or ``decoder_with_past_model``."""
    from fwx.sources import hf_seq2seq, hf_seq2seq_split

    shape = hf_seq2seq.DecoderShape.of(model.config)
    specs = {
        "decoder": hf_tasks.seq2seq_first_inputs(shape.hidden, shape.frames),
        "decoder-with-past": hf_tasks.seq2seq_past_inputs(shape.layers, shape.heads, shape.head_dim, shape.frames),
    }
    vocab = int(model.get_input_embeddings().num_embeddings)
    extras = SourceExtras(
        ranges={"input_ids": (0, vocab)},
        check=hf_seq2seq_split.greedy_check(model, shape, vocab, part, specs),
    )
    if part == "decoder":
        module: Any = hf_seq2seq_split.FirstDecoder(model, shape)
        sizes = hf_tasks.SEQ2SEQ_FIRST_SIZES
    else:
        module = hf_seq2seq_split.PastDecoder(model, shape)
        sizes = hf_tasks.SEQ2SEQ_CACHE_SIZES
    return Built(module, specs[part], extras, {k: v for k, v in sizes.items() if _uses(specs[part], k)})


def _uses(specs: tuple[TensorSpec, ...], dim: str) -> bool:
    return any(dim in s.shape for s in specs)


def _in_vocabulary(
    samples: tuple[dict[str, Any], ...], ranges: Mapping[str, tuple[int, int]]
) -> tuple[dict[str, Any], ...]:
    """The samples whose ids the model's tables hold (a tokenizer may know more tokens than the model)."""
    return tuple(s for s in samples if all(int(v.max(initial=0)) < ranges.get(n, (0, 2**62))[1] for n, v in s.items()))


def _tokenized(folder: Path, specs: tuple[TensorSpec, ...]) -> tuple[dict[str, Any], ...]:
    """A few sentences through the folder's own tokenizer, padded (a batch of three and one alone), for
    text inputs; nothing when there is no tokenizer or the inputs are not the tokenizer's."""
    names = [s.name for s in specs]
    if not names or names[0] != "input_ids" or not any((folder / n).is_file() for n in hf_names.TOKENIZER):
        return ()
    tf = import_transformers()
    try:
        with quiet():
            tok = tf.AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token or tok.unk_token
            batches = [
                tok(list(SENTENCES), padding=True, return_tensors="np"),
                tok([SENTENCES[0]], return_tensors="np"),
            ]
    except Exception as exc:  # noqa: BLE001 - a tokenizer fwx cannot read leaves the generated samples
        ui.warn(f"{folder.name}: the tokenizer could not be read ({first_line(exc)}); validating on drawn ids")
        return ()
    out = []
    for enc in batches:
        sample = {n: enc[n].astype("int64") for n in names if n in enc}
        if "token_type_ids" in names and "token_type_ids" not in sample:  # one segment, as the model defaults
            sample["token_type_ids"] = 0 * sample["input_ids"]
        if len(sample) == len(names):
            out.append(sample)
    return tuple(out)
