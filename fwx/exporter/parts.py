"""Exports of one source that writes several models: a Hugging Face ``text2text-generation`` folder becomes
``NAME-encoder`` and ``NAME-decoder``, each a model version of its own (its own signature, served alone),
as Optimum writes ``encoder_model.onnx`` and ``decoder_model.onnx``. A model id (``org/name``) is resolved
here to its snapshot in the local Hugging Face cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from fwx.exporter.options import ExportOptions
from fwx.exporter.pipeline import ExportResult, admitted_source, default_name, export
from fwx.formats import Format, is_hf_folder


def parts_of(source: str | Path, task: str | None) -> tuple[str, ...]:
    """The parts ``source`` exports for ``task`` (inferred from a folder's config without one); () for one model."""
    if not is_hf_folder(source):
        return ()
    from fwx.sources import hf_tasks  # a Hugging Face folder only: other sources never import it
    from fwx.sources.hf_files import CONFIG, read_json

    if task is None:
        config = read_json(Path(source) / CONFIG)
        task = hf_tasks.infer_task(config if isinstance(config, dict) else {})
    return hf_tasks.get_task(task).parts if ":" not in task else ()


def export_all(
    source: str | Path, targets: Sequence[str | Format], options: ExportOptions | None = None
) -> list[ExportResult]:
    """``export`` once per part of a multi-model task (``NAME-part`` each), else once."""
    eo = options or ExportOptions()
    from fwx.sources import hf_hub  # no framework: a model id is resolved in the local cache, as data

    repo = hf_hub.repo_id(source)
    if repo is not None:
        source = str(hf_hub.resolve(repo))
        eo = replace(eo, name=eo.name or hf_hub.name_of(repo))
    source = admitted_source(source, eo)  # one private copy for every part; the user's folder is never read again
    parts = parts_of(source, eo.task)
    if not parts:
        return [export(source, targets, eo)]
    from fwx.sources import hf_tasks
    from fwx.sources.hf_files import CONFIG, read_json

    base = eo.task or hf_tasks.infer_task(read_json(Path(source) / CONFIG))
    name = eo.name or default_name(source)
    return [export(source, targets, replace(eo, task=f"{base}:{part}", name=f"{name}-{part}")) for part in parts]
