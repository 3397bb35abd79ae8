"""Fixtures: artifacts of tiny models, built once per test session (see models.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import models


@pytest.fixture(scope="session")
def torch_files() -> dict[str, Path]:
    return models.torch_artifacts()


@pytest.fixture(scope="session")
def keras_files() -> dict[str, Path]:
    return models.keras_artifacts()
