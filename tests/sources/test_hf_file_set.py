"""A Hugging Face folder crosses the boundary as its own file set: what its config and index name.

A ``save_pretrained`` folder that is also someone's working folder (a ``.env``,
a ``.git/``, notes, other runs' checkpoints) must not bring those into the
private copy, where a loader, or model code trusted to run, could read them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fwx.errors import UnsafeModelError
from fwx.formats import Format
from fwx.safety import snapshot
from fwx.sources import boundary

from .test_hf_hub import cache_model

SAFETENSORS = b"\x02\x00\x00\x00\x00\x00\x00\x00{}"


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    yield
    snapshot.discard_all()


def _working_folder(tmp_path: Path) -> Path:
    """A sharded save_pretrained folder with a tokenizer and chat templates, inside a working folder."""
    folder = tmp_path / "bert"
    (folder / ".git").mkdir(parents=True)
    (folder / ".git" / "config").write_text("[remote] url = https://token@example.invalid\n")
    (folder / ".env").write_text("AWS_SECRET_ACCESS_KEY=hunter2\n")
    (folder / "secret.txt").write_text("hunter2\n")
    (folder / "runs" / "old").mkdir(parents=True)
    (folder / "runs" / "old" / "model.safetensors").write_bytes(SAFETENSORS)
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    shards = {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": shards}))
    for shard in set(shards.values()) | {"model-00003-of-00002.safetensors"}:  # one shard the index never names
        (folder / shard).write_bytes(SAFETENSORS)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        (folder / name).write_text("{}")
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tools.jinja").write_text("{{ messages }}")
    (folder / "additional_chat_templates" / "notes.md").write_text("not a template")
    return folder


MODEL_FILES = (
    "additional_chat_templates/tools.jinja",
    "chat_template.jinja",
    "config.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors.index.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
LEFT_OUT = (".env", ".git/", "model-00003-of-00002.safetensors", "runs/", "secret.txt")


def test_only_the_files_the_folder_names_are_copied_and_the_rest_is_listed(tmp_path: Path) -> None:
    folder = _working_folder(tmp_path)
    got = boundary.admit(folder)
    assert got.format is Format.PYTORCH
    assert got.files == MODEL_FILES
    assert got.left_out == LEFT_OUT
    copied = {p.relative_to(got.path).as_posix() for p in got.path.rglob("*")}
    assert not {name for name in copied if "secret" in name or name.startswith((".", "runs"))}


def test_a_hub_cache_revision_is_narrowed_the_same_way(tmp_path: Path) -> None:
    rev = cache_model(tmp_path / "hub", "org/bert", _plain(tmp_path))
    got = boundary.admit(rev)
    assert got.files == ("config.json", "model.safetensors", "tokenizer.json")
    assert got.left_out == ("notes.txt",)
    assert (got.path / "model.safetensors").read_bytes() == SAFETENSORS  # the blob's bytes, not a link
    assert not any(p.is_symlink() for p in got.path.iterdir())


def _plain(tmp_path: Path) -> Path:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    (folder / "model.safetensors").write_bytes(SAFETENSORS)
    (folder / "tokenizer.json").write_text("{}")
    (folder / "notes.txt").write_text("hunter2")
    return folder


def test_safetensors_win_over_a_bin_and_code_comes_only_with_an_auto_map(tmp_path: Path) -> None:
    folder = _plain(tmp_path)
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    (folder / "modeling_x.py").write_text("raise SystemExit('imported')\n")
    got = boundary.admit(folder)
    assert "pytorch_model.bin" in got.left_out  # hf_files.weight_files reads the safetensors
    assert "modeling_x.py" in got.left_out  # no auto_map names it: never imported, never copied
    snapshot.discard_all()
    config = {"architectures": ["XModel"], "auto_map": {"AutoModel": "modeling_x.XModel"}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_x.py").write_text("")  # the modules of an auto_map import each other
    got = boundary.admit(folder)
    assert {"modeling_x.py", "configuration_x.py"} <= set(got.files)  # copied; imported only when trusted


def test_an_index_naming_a_path_outside_the_folder_copies_no_such_shard(tmp_path: Path) -> None:
    folder = _plain(tmp_path)
    (folder / "model.safetensors").unlink()
    shards = {"a": "../../.ssh/id_rsa", "b": ".env", "c": "sub/x.safetensors", "d": "model-1.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))
    (folder / "model-1.safetensors").write_bytes(SAFETENSORS)
    (folder / ".env").write_text("hunter2")
    got = boundary.admit(folder)
    assert got.files == ("config.json", "model-1.safetensors", "model.safetensors.index.json", "tokenizer.json")
    assert ".env" in got.left_out


def test_a_named_file_linked_outside_or_hard_linked_is_still_refused(tmp_path: Path) -> None:
    folder = _plain(tmp_path)
    outside = tmp_path / "id_rsa"
    outside.write_text("-----BEGIN OPENSSH PRIVATE KEY-----")
    (folder / "tokenizer.json").unlink()
    os.symlink(outside, folder / "tokenizer.json")
    with pytest.raises(UnsafeModelError, match="symbolic link"):
        boundary.admit(folder)
    (folder / "tokenizer.json").unlink()
    os.link(outside, folder / "tokenizer.json")
    with pytest.raises(UnsafeModelError, match="hard links"):
        boundary.admit(folder)
    (folder / "tokenizer.json").unlink()
    os.symlink(outside, folder / "notes.txt.link")  # a link the file set never names is left out, not followed
    assert "notes.txt.link" in boundary.admit(folder).left_out


def test_the_file_set_holds_every_file_the_hugging_face_path_reads_by_name() -> None:
    from fwx.safety import hf_fileset
    from fwx.sources import hf_files

    assert set(hf_files.ASSET_NAMES) <= hf_fileset.KNOWN  # copied beside the artifacts, so copied in first
    assert tuple(single for single, _ in hf_fileset.WEIGHTS) == (hf_files.SAFETENSORS, hf_files.BIN)


@pytest.mark.slow
def test_an_export_of_a_working_folder_names_what_it_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real save_pretrained folder with a ``.env`` and a ``.git/`` beside its files: exported, and the summary
    says in one line what was not copied."""
    pytest.importorskip("transformers")
    from fwx import ui
    from fwx.cli import main
    from tests.exporter import hf_folders

    folder, _ = hf_folders.bert(tmp_path / "bert")
    (folder / ".env").write_text("AWS_SECRET_ACCESS_KEY=hunter2\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "config").write_text("[core]\n")
    ui.state.json = ui.state.debug = False
    capsys.readouterr()
    main(["export", str(folder), "--to", "onnx", "--out", str(tmp_path / "repo")])  # returns when it succeeded
    shown = capsys.readouterr()
    lines = [line for line in (shown.out + shown.err).splitlines() if line.startswith("left out of the copy")]
    assert lines == ["left out of the copy (not the model's files): .env, .git/"]
    assert (tmp_path / "repo" / "bert" / "1" / "fwx.json").is_file()
