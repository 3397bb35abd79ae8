"""``fwx serve --model-name``: /mnt/models as KServe's storage initializer leaves it for a URI naming one
model's folder (``1/``, ``2/`` at the top) is served as that model; a repository is served as before."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import serving_models

from fwx.serving.config import ServerConfig
from fwx.serving.server import Server

BODY = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}


def _infer(root: Path, model_name: str | None, url_name: str) -> tuple[int, Any, list[str]]:
    async def run() -> tuple[int, Any, list[str]]:
        cfg = ServerConfig(
            repository=root, http_port=0, grpc_port=-1, poll_seconds=0, load_probe=False, model_name=model_name
        )
        server = Server(cfg)
        await server.start()
        try:
            transport = httpx.ASGITransport(app=server.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://fwx.test") as client:
                r = await client.post(f"/v2/models/{url_name}/infer", content=json.dumps(BODY))
                index = await client.post("/v2/repository/index", content="{}")
            return r.status_code, r.json(), sorted({m["name"] for m in index.json()})
        finally:
            await server.stop()

    return asyncio.run(run())


def test_one_models_folder_is_served_under_model_name(tmp_path: Path) -> None:
    serving_models.make_repo(tmp_path / "artifacts", {"linear": ["linear", "linear"]})
    model_folder = tmp_path / "artifacts" / "linear"  # what the initializer puts at /mnt/models
    status, doc, names = _infer(model_folder, "mnist", "mnist")
    assert status == 200, doc
    assert doc["outputs"][0]["data"] == [9.0]
    assert doc["model_name"] == "mnist"
    assert doc["model_version"] == "2"
    assert names == ["mnist"]


def test_a_repository_is_served_as_is_with_model_name(tmp_path: Path) -> None:
    repo = serving_models.make_repo(tmp_path / "artifacts", {"linear": "linear", "other": "linear"})
    status, doc, names = _infer(repo, "mnist", "linear")
    assert status == 200, doc
    assert names == ["linear", "other"]


def test_models_folder_without_model_name_is_a_usage_error(tmp_path: Path) -> None:
    serving_models.make_repo(tmp_path / "artifacts", {"linear": "linear"})
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "fwx",
            "serve",
            str(tmp_path / "artifacts" / "linear"),
            "--http-port",
            "0",
            "--grpc-port",
            "-1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert "one model's folder" in res.stderr
    assert "--model-name" in res.stderr
