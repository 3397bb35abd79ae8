"""Hostile Hugging Face folders and hub caches: each is one clear refusal, before anything is built.

Found by building folders as an attacker (or a broken download) would leave them, not from the code:
a revision folder that is a link out of the cache, a snapshot whose weights never arrived, JSON nested
past Python's stack, an index whose ``weight_map`` is a list, ``architectures`` that is not a list, and a
config that asks for 3e8 labels (transformers builds their dicts before any weight).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from fwx.errors import InputError, UnsafeModelError, UsageError
from fwx.safety import config_budget, hf_fileset
from fwx.sources import hf_files, hf_hub, hf_tasks

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONFIG = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 32, "vocab_size": 96}


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(CONFIG))
    (path / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    return path


def _cache(hub: Path, folder: Path, *, skip: str = "") -> Path:
    """``folder`` cached as ``org/m`` the way the hub writes it (blobs, relative links, refs/main)."""
    model = hub / "models--org--m"
    snapshot = model / "snapshots" / COMMIT
    (model / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for path in sorted(folder.iterdir()):
        blob = model / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        blob.write_bytes(path.read_bytes())
        if path.name != skip:
            os.symlink(Path("..", "..", "blobs", blob.name), snapshot / path.name)
        else:
            blob.rename(f"{blob}.incomplete")  # the hub's name for a blob still downloading
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    return tmp_path / "hub"


def test_the_cached_control_resolves(tmp_path: Path, hub: Path) -> None:
    snapshot = _cache(hub, _folder(tmp_path / "saved"))
    assert hf_hub.resolve("org/m") == snapshot


def test_a_revision_folder_linked_out_of_the_cache_is_refused(tmp_path: Path, hub: Path) -> None:
    """The files of ``org/m`` came from any folder the link named (a plain folder has no blob links to check)."""
    snapshot = _cache(hub, _folder(tmp_path / "saved"))
    outside = _folder(tmp_path / "elsewhere")
    (outside / ".env").write_text("TOKEN=secret")
    for path in snapshot.iterdir():
        path.unlink()
    snapshot.rmdir()
    os.symlink(os.path.relpath(outside, snapshot.parent), snapshot)
    with pytest.raises(UnsafeModelError, match="a cached revision is a folder of the cache"):
        hf_hub.resolve("org/m")


def test_a_snapshot_whose_weights_never_arrived_says_the_download_is_incomplete(tmp_path: Path, hub: Path) -> None:
    """It was "cannot read .../snapshots/<rev>: Permission denied": the loader could not read the folder it
    took for a repository."""
    _cache(hub, _folder(tmp_path / "saved"), skip="model.safetensors")
    with pytest.raises(InputError, match="incomplete download") as info:
        hf_hub.resolve("org/m")
    assert "--revision main" in (info.value.hint or "")


def test_a_snapshot_link_to_a_device_is_no_weights(tmp_path: Path, hub: Path) -> None:
    snapshot = _cache(hub, _folder(tmp_path / "saved"))
    blob = snapshot.parent.parent / "blobs" / os.readlink(snapshot / "model.safetensors").rsplit("/", 1)[1]
    blob.unlink()
    os.symlink("/dev/zero", blob)
    with pytest.raises(InputError, match="incomplete download"):
        hf_hub.resolve("org/m")


def test_json_nested_past_the_stack_is_one_input_error(tmp_path: Path) -> None:
    """``RecursionError`` is not a ``ValueError``: it reached the user as "unexpected RecursionError"."""
    folder = _folder(tmp_path / "deep")
    (folder / "config.json").write_text('{"a":' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(InputError, match="is not valid JSON"):
        hf_files.check_folder(folder, trust=False)
    assert hf_fileset._json(folder / "config.json") is None


@pytest.mark.parametrize("weight_map", [["model-1.safetensors"], "model-1.safetensors", 5, None])
def test_an_index_whose_weight_map_is_no_object_names_no_shards(tmp_path: Path, weight_map: object) -> None:
    """A list ``weight_map`` raised AttributeError ("unexpected", exit 1) in the boundary's copy."""
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model-1.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    assert hf_fileset._shards(index) == []
    with pytest.raises(InputError, match="names no shards"):
        hf_files.weight_files(folder)


@pytest.mark.parametrize(("archs", "task"), [(5, None), ({"a": 1}, None), ("BertForMaskedLM", "fill-mask")])
def test_architectures_that_are_not_a_list_are_read_as_data(archs: object, task: str | None) -> None:
    """``architectures: 5`` raised TypeError ("unexpected", exit 1); a string was read as its first letter."""
    config = {**CONFIG, "architectures": archs}
    if task is None:
        with pytest.raises(UsageError, match="cannot tell the task"):
            hf_tasks.infer_task(config)
    else:
        assert hf_tasks.infer_task(config) == task


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"num_labels": 3 * 10**8}, "num_labels=300000000"),
        ({"hidden_size": 1024, "id2label": {str(i): "" for i in range(300_000)}}, "num_labels=300000"),
    ],
)
def test_a_head_of_absurd_labels_is_refused_before_it_is_built(tmp_path: Path, extra: dict, named: str) -> None:
    """The budget counted no head: 3e8 labels filled the loader's 8 GiB before any refusal."""
    folder = _folder(tmp_path / "labels")
    with pytest.raises(UnsafeModelError, match=named):
        config_budget.check({**CONFIG, **extra}, folder)


def test_a_real_label_set_fits(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "imagenet")
    config_budget.check({**CONFIG, "hidden_size": 768, "id2label": {str(i): f"c{i}" for i in range(1000)}}, folder)


def test_a_config_field_transformers_refuses_is_named_with_what_is_wrong() -> None:
    """transformers' message puts the field on one line and the fault on the next: the error said only
    "Validation error for field 'num_hidden_layers':"."""
    from fwx.sources.hf import reason

    exc = ValueError(
        "Validation error for field 'num_hidden_layers':\n    TypeError: expected int, got bool (value: True)"
    )
    assert (
        reason(exc) == "Validation error for field 'num_hidden_layers': TypeError: expected int, got bool (value: True)"
    )
    assert reason(ValueError("one line\nand more")) == "one line"
