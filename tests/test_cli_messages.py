"""Messages that used to mislead a new user: each now says what is wrong and what to do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from exporter.fixtures import CNN_CLASS, CNN_INPUT, _reset_ui, _samples_importable, assert_refused, cli
from exporter.fixtures import torch_files as torch_files

__all__ = ["_reset_ui", "_samples_importable", "cli", "torch_files"]
ROOT = Path(__file__).resolve().parents[1]


def test_validate_state_dict_asks_for_the_model_class(cli, torch_files) -> None:
    res = cli("validate", torch_files["state_dict"])
    assert res.code == 2, res.err
    assert len(res.error_lines) == 1, res.err
    assert "only weights (a state_dict)" in res.error_lines[0]
    assert "run code" not in res.err
    assert "--model-class" in res.err


def test_validate_pickled_module_still_says_it_would_run_code(cli, torch_files) -> None:
    res = cli("validate", torch_files["pickled_custom"])
    assert res.code == 2, res.err
    assert "run code" in res.err


@pytest.mark.parametrize("target", ["pytorch", "keras", "pyt"])
def test_unknown_to_hint_lists_only_targets(cli, torch_files, tmp_path: Path, target: str) -> None:
    res = cli("export", torch_files["state_dict"], "--to", target, "--out", tmp_path)
    assert_refused(res, tmp_path, 2, repr(target) if target == "pyt" else target)
    hint = next(line for line in res.err.splitlines() if "hint:" in line)
    assert "pytorch" not in hint
    assert "keras" not in hint
    assert "onnx" in hint


@pytest.mark.parametrize("out", ["/proc/nope", "/proc/nope/deeper"])
def test_unwritable_out_is_a_usage_error(cli, torch_files, out: str) -> None:
    res = cli(
        "export",
        torch_files["state_dict"],
        "--model-class",
        CNN_CLASS,
        "--input",
        CNN_INPUT,
        "--to",
        "onnx",
        "--out",
        out,
    )
    assert res.code == 2, res.err
    assert len(res.error_lines) == 1, res.err
    assert f"--out {out}" in res.error_lines[0]
    assert "unexpected" not in res.err
    assert "• load" not in res.err  # refused before loading the model


def test_out_under_a_file_is_a_usage_error(cli, torch_files, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    res = cli(
        "export",
        torch_files["state_dict"],
        "--model-class",
        CNN_CLASS,
        "--input",
        CNN_INPUT,
        "--to",
        "onnx",
        "--out",
        tmp_path / "file" / "repo",
    )
    assert res.code == 2, res.err
    assert "Not a directory" in res.error_lines[0]


def test_every_flag_named_by_the_server_exists() -> None:
    """Hints in fwx/serving name `fwx serve` flags; each must be a real one (the 413 hint once said --max-body-bytes)."""
    from fwx.commands.export import export
    from fwx.commands.serve import serve

    # serve's own flags, and export's (a hint may say "fwx export MODEL --out REPO")
    flags = {opt for cmd in (serve, export) for p in cmd.params for opt in (*p.opts, *getattr(p, "secondary_opts", []))}
    # the probe child's own flags, and Triton's name for the body limit
    not_serve = {"--signature", "--sizes", "--memory-mb", "--cpu-s", "--spare", "--manifest", "--sandbox-read"}
    not_serve |= {"--http-max-input-size"}
    named = {
        m
        for f in (ROOT / "fwx" / "serving").rglob("*.py")
        if "proto" not in f.parts
        for m in re.findall(r"--[a-z][a-z0-9-]+", f.read_text())
    }
    assert named - flags - not_serve == set()
    from fwx.serving.rest.body import _too_large

    assert "--max-body-mb" in (_too_large(10).hint or "")
