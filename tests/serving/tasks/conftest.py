"""One repository of tiny Hugging Face folders exported to ONNX (decoders with a cache, BERT), for the task tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serving.tasks import text_models


@pytest.fixture(scope="session")
def text_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """(repository, source folder by model name)."""
    names = ["bert", *text_models.BERT_HEADS, "llama", "qwen2", "gpt2"]
    return text_models.export(tmp_path_factory.mktemp("tasks"), names)
