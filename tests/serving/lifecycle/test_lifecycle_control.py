"""Model control: off by default, admin token, request names that never escape the repository."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from lifecycle_helpers import publish

from fwx.errors import ForbiddenError, FwxError, InputError, NotFoundError, UnauthenticatedError, UsageError
from fwx.serving.control import bearer_token, check_admin, resolve_model_dir
from fwx.serving.models import ModelManager


def test_control_is_off_by_default(make_config: Any) -> None:
    with pytest.raises(ForbiddenError) as info:
        check_admin(make_config(), "anything")
    assert info.value.http_status == 403
    assert info.value.grpc_code == "PERMISSION_DENIED"


@pytest.mark.parametrize(
    "token",
    [None, "", "Bearer ", "wrong", "Bearer wrong", "s3cre", "s3cretX", "Basic s3cret", "s3cret", "Bearers3cret"],
)
def test_missing_or_wrong_token_is_401(make_config: Any, token: str | None) -> None:
    cfg = make_config(enable_model_control=True, admin_token="s3cret")
    with pytest.raises(UnauthenticatedError) as info:
        check_admin(cfg, token)
    assert info.value.http_status == 401
    assert info.value.grpc_code == "UNAUTHENTICATED"


@pytest.mark.parametrize("token", ["Bearer s3cret", "bearer  s3cret", "BEARER s3cret "])
def test_right_token_passes(make_config: Any, token: str) -> None:
    check_admin(make_config(enable_model_control=True, admin_token="s3cret"), token)


def test_control_without_a_configured_token_is_refused(make_config: Any) -> None:
    with pytest.raises(UsageError, match="needs a non-empty --admin-token"):
        make_config(enable_model_control=True)


def test_bearer_token() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("abc") is None  # the scheme is required
    assert bearer_token("Basic abc") is None
    assert bearer_token(None) is None


@pytest.mark.parametrize(
    "name",
    [
        "..",
        ".",
        "../etc",
        "%2e%2e",
        "%2e%2e%2fetc",
        "/etc/passwd",
        "a/b",
        "a\\b",
        ".hidden",
        ".fwx-tmp-x",
        "",
        "x" * 129,
        "nul\x00",
    ],
)
def test_bad_request_names_are_400(tmp_path: Path, name: str) -> None:
    with pytest.raises(UsageError) as info:
        resolve_model_dir(tmp_path, name)
    assert info.value.http_status == 400


def test_symlink_out_of_the_repository_is_400(tmp_path: Path) -> None:
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    os.symlink(outside, repo / "escape")
    with pytest.raises(InputError, match="outside the model repository"):
        resolve_model_dir(repo, "escape")


def test_good_name_resolves_and_missing_is_404(tmp_path: Path) -> None:
    (tmp_path / "lin").mkdir()
    assert resolve_model_dir(tmp_path, "lin") == tmp_path / "lin"
    with pytest.raises(NotFoundError):
        resolve_model_dir(tmp_path, "absent")


def test_manager_load_unload_cycle(make_config: Any) -> None:
    cfg = make_config(enable_model_control=True, admin_token="t")
    cfg.load_probe = False
    publish(cfg.repository, "lin", 1)

    async def main() -> None:
        mm = ModelManager(cfg.repository, cfg)
        await mm.start()
        try:
            await mm.unload("lin")
            assert mm.versions("lin") == []
            assert mm.ready
            assert mm.index()[0]["reason"] == "unloaded by request"
            await mm._reconcile_all()  # a poll does not bring it back
            assert mm.versions("lin") == []
            await mm.load("lin")
            assert mm.versions("lin") == [1]
            publish(cfg.repository, "lin", 2, kind="checksum")
            with pytest.raises(FwxError):
                await mm.load("../lin")
            with pytest.raises(NotFoundError):
                await mm.load("absent")
            await mm.load("lin")  # v2 fails, v1 stays: load succeeds as long as one version serves
            assert mm.versions("lin") == [1]
            publish(cfg.repository, "broken", 1, kind="checksum")
            with pytest.raises(InputError, match="failed to load.*checksum"):
                await mm.load("broken")
        finally:
            await mm.stop()

    asyncio.run(main())


def test_manager_refuses_control_when_disabled(make_config: Any) -> None:
    cfg = make_config()
    cfg.load_probe = False

    async def main() -> None:
        mm = ModelManager(cfg.repository, cfg)
        await mm.start()
        try:
            with pytest.raises(ForbiddenError):
                await mm.load("lin")
            with pytest.raises(ForbiddenError):
                await mm.unload("lin")
        finally:
            await mm.stop()

    asyncio.run(main())
