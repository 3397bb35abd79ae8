"""Tiny files that describe huge models: each ends with one line, nothing built, nothing published.

A 65 KB ``.keras`` whose ``config.json`` inflates to 64 MiB (inside the inflate
budget, but JSON parsing costs tens of times that), and Hugging Face folders of
a few KB whose ``config.json`` claims ``vocab_size`` 64 Mi or a million layers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fwx.errors import UnsafeModelError
from fwx.safety import config_budget
from fwx.safety.zipbounds import ZipBoundsError, open_bounded

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20
BERT = {
    "architectures": ["BertForMaskedLM"],
    "model_type": "bert",
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}


def _keras_bomb(path: Path) -> Path:
    config = b'{"class_name": "Sequential", "pad": "' + b" " * (64 * MiB) + b'"}'
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("metadata.json", json.dumps({"keras_version": "3.0.0"}))
        zf.writestr("config.json", config)
        zf.writestr("model.weights.h5", b"\0" * 64)
    return path


def _hf_folder(path: Path, **claims: int) -> Path:
    """A config and a few bytes of weights: what a 16 KB download can hold."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({**BERT, **claims}))
    header = json.dumps({"bert.pooler.dense.bias": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(16))
    return path


def _export(source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fwx", "export", str(source), "--to", "onnx", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )


def test_a_keras_config_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    bomb = _keras_bomb(tmp_path / "bomb.keras")
    assert bomb.stat().st_size < 200_000
    zf = open_bounded(bomb.read_bytes())  # the archive itself fits the inflate budget ...
    with pytest.raises(ZipBoundsError, match="FWX_MAX_CONFIG_MB"):
        zf.read_config("config.json")  # ... its config does not fit the config limit


def test_the_config_budget_names_the_field_and_the_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert config_budget.estimate(BERT).params < 1_000_000
    for field, value in (("vocab_size", 64 * MiB), ("num_hidden_layers", 10**6)):
        folder = _hf_folder(tmp_path / field, **{field: value})
        with pytest.raises(UnsafeModelError) as err:
            config_budget.check(json.loads((folder / "config.json").read_text()), folder)
        assert f"{field}={value}" in err.value.message
        assert "FWX_MAX_PARAMS" in err.value.message
    folder = tmp_path / "vocab_size"
    monkeypatch.setenv(config_budget.ENV, "1e12")
    config_budget.check({**BERT, "vocab_size": 64 * MiB}, folder)  # the knob raises it


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["keras", "vocab", "layers"])
def test_bombs_end_with_one_line_and_nothing_published(tmp_path: Path, kind: str) -> None:
    if kind == "keras":
        source, needle = _keras_bomb(tmp_path / "bomb.keras"), "config"
    elif kind == "vocab":
        source, needle = _hf_folder(tmp_path / "hf", vocab_size=64 * MiB), "vocab_size=67108864"
    else:
        source, needle = _hf_folder(tmp_path / "hf", num_hidden_layers=10**6), "num_hidden_layers=1000000"
    out = tmp_path / "out"
    proc = _export(source, out)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert needle in errors[0], errors[0]
    assert "Traceback" not in proc.stderr
    assert [p for p in out.rglob("*") if not p.is_dir()] == []  # no version, no artifact, no temp file


def test_a_torch_zip_keeps_the_inflate_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fwx.safety.zipbounds import held_members, hold_zip_file

    path = tmp_path / "weights.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        zf.writestr("archive/data/0", b"\0" * (2 * MiB))
    hold_zip_file(path)  # within the default budget
    assert held_members(path.read_bytes(), path, ".pkl") == [b"\x80\x02}q\x00."]
    monkeypatch.setenv("FWX_MAX_INFLATE_MB", "1")
    for check in (lambda: hold_zip_file(path), lambda: held_members(path.read_bytes(), path, ".pkl")):
        with pytest.raises(UnsafeModelError, match="inflate budget"):
            check()
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(b"\x80\x02}q\x00.")
    hold_zip_file(legacy)  # not a zip: torch's legacy reader and the pickle scan judge it
