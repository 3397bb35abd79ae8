"""The exporter fixtures live in ``fixtures.py`` so ``tests/test_cli_*.py`` can share them."""

from __future__ import annotations

from .fixtures import _reset_ui, _samples_importable, cli, keras_files, torch_files

__all__ = ["_reset_ui", "_samples_importable", "cli", "keras_files", "torch_files"]
