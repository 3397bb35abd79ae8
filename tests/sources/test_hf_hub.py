"""``fwx export org/name``: the local Hugging Face cache as ``huggingface_hub`` lays it out, read offline.

The cache is built here the way the hub writes it: files in ``blobs/`` named by their hash, a snapshot
folder of relative links into ``../../blobs/``, and ``refs/main`` naming the snapshot's commit.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from fwx.errors import InputError, UnsafeModelError
from fwx.sources import hf_hub
from fwx.sources.hf_files import check_folder

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_model(hub: Path, repo: str, folder: Path, commit: str = COMMIT) -> Path:
    """``folder``'s files as the hub caches ``repo``: blobs by sha256, relative links, ``refs/main``."""
    model = hub / ("models--" + repo.replace("/", "--"))
    snapshot = model / "snapshots" / commit
    (model / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        blob = model / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(Path("..", "..", "blobs", blob.name), snapshot / path.name)
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text(commit)
    return snapshot


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    (folder / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    return folder


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "hf-home" / "hub"


def test_a_model_id_resolves_to_its_cached_snapshot_offline(tmp_path: Path, hub: Path) -> None:
    snapshot = cache_model(hub, "tiny-org/tiny-bert", _folder(tmp_path))
    assert hf_hub.repo_id("tiny-org/tiny-bert") == "tiny-org/tiny-bert"
    assert hf_hub.resolve("tiny-org/tiny-bert") == snapshot
    assert hf_hub.resolve(f"tiny-org/tiny-bert@{COMMIT}") == snapshot
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # nothing fwx calls afterwards may go to the network
    assert hf_hub.name_of("tiny-org/tiny-bert@main") == "tiny-bert"


def test_hf_hub_cache_wins_over_hf_home(tmp_path: Path, hub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hf_hub.cache_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("HF_HUB_CACHE")
    assert hf_hub.cache_dir() == hub


def test_a_model_that_is_not_cached_is_one_clear_line(tmp_path: Path, hub: Path) -> None:
    with pytest.raises(InputError) as err:
        hf_hub.resolve("tiny-org/absent")
    assert str(err.value).startswith("tiny-org/absent is not in the Hugging Face cache (")
    assert "fwx never downloads" in str(err.value)
    assert err.value.exit_code == 2
    cache_model(hub, "tiny-org/tiny-bert", _folder(tmp_path))
    with pytest.raises(InputError, match="in the Hugging Face cache .* but not at revision v2"):
        hf_hub.resolve("tiny-org/tiny-bert@v2")


def test_paths_and_factories_are_not_model_ids(tmp_path: Path, hub: Path) -> None:
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "here").mkdir()
    assert hf_hub.repo_id("org/here") is None  # a local folder wins
    assert hf_hub.repo_id("models/missing.onnx") is None  # a missing file, not a model id
    assert hf_hub.repo_id("pkg.mod:build") is None
    assert hf_hub.repo_id("./org/name") is None
    assert hf_hub.repo_id(Path("org/name")) is None


def test_a_snapshots_links_into_its_own_blobs_are_its_files(tmp_path: Path, hub: Path) -> None:
    """The snapshot's files are all links out of the folder, into the model's ``blobs/``: that is the layout."""
    snapshot = cache_model(hub, "tiny-org/tiny-bert", _folder(tmp_path))
    assert check_folder(snapshot, trust=False)["model_type"] == "bert"
    other = tmp_path / "secret.json"
    other.write_text("{}")
    os.symlink(other, snapshot / "tokenizer.json")
    with pytest.raises(UnsafeModelError, match="tokenizer.json is a link to .*outside the model folder"):
        check_folder(snapshot, trust=False)
