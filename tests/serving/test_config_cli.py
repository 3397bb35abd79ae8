"""ServerConfig validation, the `fwx serve` flags, version-drift warnings, and the usage examples."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import serving_models
from click.testing import CliRunner

from fwx.errors import UsageError
from fwx.formats import Format
from fwx.serving.config import ServerConfig, parse_prefer, parse_prefer_model


def test_defaults_are_safe(tmp_path: Path) -> None:
    cfg = ServerConfig(repository=tmp_path)
    assert (cfg.host, cfg.http_port, cfg.grpc_port) == ("127.0.0.1", 8000, 8001)
    assert cfg.prefer == [Format.ONNX, Format.TORCHSCRIPT, Format.PT2, Format.SAVEDMODEL, Format.TFLITE]
    assert not cfg.enable_model_control
    assert cfg.api_token is None
    assert not cfg.trust_model_code
    assert cfg.max_body_bytes == 64 * 2**20 == cfg.grpc_max_message_bytes


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"http_port": 70000}, "not a port"),
        ({"max_batch_size": 0}, "at least 1"),
        ({"max_queue_delay_ms": -1}, "must not be negative"),
        ({"device": "tpu"}, "unknown device"),
        ({"version_policy": "newest"}, "invalid version policy"),
        ({"prefer": ["keras"]}, "cannot serve keras"),
        ({"log_level": "loud"}, "unknown log level"),
        ({"enable_model_control": True}, "--enable-model-control needs a non-empty --admin-token"),
        ({"enable_model_control": True, "admin_token": "  "}, "--admin-token is empty"),
        ({"api_token": ""}, "--api-token is empty"),
        ({"api_token": "two words"}, "--api-token holds whitespace"),
        ({"admin_token": "t\u00f6ken"}, "--admin-token holds whitespace, control or non-ASCII"),
    ],
)
def test_bad_settings_are_usage_errors(tmp_path: Path, kw: dict[str, Any], fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        ServerConfig(repository=tmp_path, **kw)


def test_prefer_orders_and_only_formats_filters() -> None:
    cfg = ServerConfig(repository=Path("."), prefer=[Format.TFLITE, Format.PT2])
    assert cfg.prefer == [Format.TFLITE, Format.PT2, Format.ONNX, Format.TORCHSCRIPT, Format.SAVEDMODEL]
    cfg = ServerConfig(
        repository=Path("."),
        prefer=[Format.TFLITE],
        only_formats=[Format.ONNX, Format.TFLITE],
        prefer_per_model={"m": [Format.ONNX]},
    )
    assert cfg.prefer == [Format.TFLITE, Format.ONNX]
    assert cfg.prefer_for("m") == [Format.ONNX, Format.TFLITE]
    with pytest.raises(UsageError, match="cannot serve keras"):
        ServerConfig(repository=Path("."), only_formats=["keras"])  # type: ignore[list-item]


def test_only_formats_flag_reaches_the_config(tmp_path: Path) -> None:
    from fwx.cli import cli

    runner = CliRunner()
    res = runner.invoke(cli, ["serve", "--help"])
    assert "--only-formats" in res.output
    assert "not a filter" in res.output
    bad = runner.invoke(cli, ["serve", str(tmp_path), "--only-formats", "pytorch"], standalone_mode=False)
    assert isinstance(bad.exception, UsageError)


def test_prefer_parsing() -> None:
    assert parse_prefer("tflite, ONNX,tflite") == [Format.TFLITE, Format.ONNX]
    assert parse_prefer_model(["m=ts,onnx"]) == {"m": [Format.TORCHSCRIPT, Format.ONNX]}
    with pytest.raises(UsageError, match="NAME=VALUE"):
        parse_prefer_model(["m"])
    cfg = ServerConfig(repository=Path("."), prefer_per_model={"m": [Format.TFLITE]})
    assert cfg.prefer_for("m")[0] == Format.TFLITE
    assert cfg.prefer_for("other") == cfg.prefer


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--enable-model-control"], "--enable-model-control needs a non-empty --admin-token"),
        (["--enable-model-control", "--admin-token", ""], "--admin-token is empty"),
        (["--api-token", ""], "--api-token is empty"),
    ],
)
def test_serve_cli_token_mistakes_exit_2(
    tmp_path: Path, flags: list[str], fragment: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fwx.cli import main

    monkeypatch.delenv("FWX_API_TOKEN", raising=False)
    monkeypatch.delenv("FWX_ADMIN_TOKEN", raising=False)
    with pytest.raises(SystemExit) as info:
        main(["serve", str(tmp_path), *flags])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert "Traceback" not in err


def test_serve_cli_rejects_bad_flags(tmp_path: Path) -> None:
    from fwx.cli import cli

    runner = CliRunner()
    missing = runner.invoke(cli, ["serve", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert "does not exist" in missing.output
    bad = runner.invoke(cli, ["serve", str(tmp_path), "--prefer-model", "oops"], standalone_mode=False)
    assert isinstance(bad.exception, UsageError)
    help_text = runner.invoke(cli, ["serve", "--help"]).output
    for flag in ("--http-port", "--grpc-port", "--prefer-model", "--max-queue-delay-seconds", "--api-token"):
        assert flag in help_text


def test_version_drift_warns_once(tmp_path: Path, live_server: Any, caplog: pytest.LogCaptureFixture) -> None:
    from fwx.manifest import Manifest

    version = serving_models.publish(tmp_path / "repo", "linear", *serving_models.build_linear())
    manifest = Manifest.read(version)
    manifest.artifacts["onnx"].tool_versions = {"onnxruntime": "1.0.0"}
    manifest.write(version)
    with caplog.at_level(logging.WARNING, logger="fwx.serving"):
        live_server(tmp_path / "repo", load_probe=False)
    drift = [r.getMessage() for r in caplog.records if "recorded with onnxruntime 1.0.0" in r.getMessage()]
    assert len(drift) == 1, drift
    assert "served by onnxruntime" in drift[0]


def test_usage_examples_name_both_rest_styles_and_tritonclient(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    from fwx.serving.server import print_usage_examples

    repo = make_repo(tmp_path / "repo", {"multi": "multi"})
    text = print_usage_examples(ServerConfig(repository=repo, api_token="t"), http_port=9000, grpc_port=9001)
    assert "http://127.0.0.1:9000/v2/models/multi/infer" in text
    assert "http://127.0.0.1:9000/v1/models/multi:predict" in text
    assert "InferenceServerClient('127.0.0.1:9001')" in text
    assert "Authorization: Bearer" in text
    assert '"datatype": "INT64"' in text


def test_the_removed_grpc_server_sync_is_a_one_line_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One gRPC server (grpc.aio): ``--grpc-server sync`` says it was removed; ``aio``, the old default, still parses."""
    import dataclasses

    from fwx.cli import cli, main

    with pytest.raises(SystemExit) as info:
        main(["serve", str(tmp_path), "--grpc-server", "sync"])
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert "--grpc-server sync was removed" in err
    assert "Traceback" not in err
    assert "grpc_server" not in {f.name for f in dataclasses.fields(ServerConfig)}
    assert "--grpc-server" not in CliRunner().invoke(cli, ["serve", "--help"]).output
