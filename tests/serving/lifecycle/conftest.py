"""Fixtures of the lifecycle tests: a repository of tiny ONNX versions and a config factory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fwx.serving.config import ServerConfig


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., ServerConfig]:
    """ServerConfig over ``tmp_path/repo``; polling off unless a test turns it on."""
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)

    def make(**kw: Any) -> ServerConfig:
        kw.setdefault("poll_seconds", 0)
        return ServerConfig(repository=repo, **kw)

    return make
