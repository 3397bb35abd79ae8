"""The task is written into fwx.json once, by the export, and the server serves the version as that task;
a version whose fwx.json predates the field is still served, its task inferred from its config and
signature as before."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fwx.manifest import Manifest
from fwx.sources import hf_tasks
from tests.serving.tasks import text_models as tm

pytestmark = pytest.mark.slow


def test_the_export_records_the_task_in_fwx_json(text_repo: tuple[Path, dict[str, Path]]) -> None:
    repo = text_repo[0]
    for name, task in [
        ("bert", "text-classification"),
        ("bert_tokens", "token-classification"),
        ("llama", "text-generation-with-past"),
    ]:
        assert json.loads((repo / name / "1" / "fwx.json").read_text())["task"] == task
        assert Manifest.read(repo / name / "1").task == task


def test_the_server_reads_the_recorded_task_and_infers_it_only_for_older_manifests(
    tmp_path: Path,
    text_repo: tuple[Path, dict[str, Path]],
    live_server: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(text_repo[0] / "bert", repo / "bert")
    shutil.copytree(text_repo[0] / "bert", repo / "bert_old")
    old = Manifest.read(repo / "bert_old" / "1")
    old.name, old.task = "bert_old", ""  # as fwx.json was written before the field existed
    old.write(repo / "bert_old" / "1")
    assert "task" not in json.loads((repo / "bert_old" / "1" / "fwx.json").read_text())

    inferred: list[Any] = []
    real = hf_tasks.infer_task

    def counting(config: dict[str, Any]) -> str:
        inferred.append(config.get("architectures"))
        return real(config)

    monkeypatch.setattr(hf_tasks, "infer_task", counting)
    srv = live_server(repo, load_probe=False)
    body = {"inputs": [{"name": "args", "datatype": "BYTES", "shape": [1], "data": [tm.words(20, 21)]}]}
    answers = {}
    for name in ("bert", "bert_old"):
        r = srv.request("POST", f"/v2/models/{name}/infer", json=body)
        assert r.status_code == 200, r.text
        answers[name] = r.json()["outputs"][0]["data"]
        assert len(inferred) == (0 if name == "bert" else 1), name
    assert answers["bert"] == answers["bert_old"]
    r = srv.request("POST", "/v2/models/bert_old/infer", json=body)  # the inferred task is kept per version
    assert r.status_code == 200, r.text
    assert srv.request("GET", "/v1/models").status_code == 200  # lists by task: asks every model again
    assert len(inferred) == 1
