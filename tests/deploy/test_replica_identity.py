"""``fwx_server_info{replica, version} 1``: one series naming the replica, from the environment."""

from __future__ import annotations

import pytest

from fwx import __version__
from fwx.serving.metrics import Metrics


def _info_lines() -> list[str]:
    return [line for line in Metrics().render().decode().splitlines() if line.startswith("fwx_server_info")]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"FWX_REPLICA": "r-7", "POD_NAME": "pod-1", "HOSTNAME": "host-1"}, "r-7"),
        ({"POD_NAME": "mnist-6d9f-x2x", "HOSTNAME": "host-1"}, "mnist-6d9f-x2x"),
        ({"HOSTNAME": "host-1"}, "host-1"),
    ],
)
def test_replica_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for var in ("FWX_REPLICA", "POD_NAME", "HOSTNAME"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert _info_lines() == [f'fwx_server_info{{replica="{expected}",version="{__version__}"}} 1.0']


def test_no_other_family_carries_a_replica_label(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "pod-1")
    text = Metrics().render().decode()
    assert [line for line in text.splitlines() if "pod-1" in line and not line.startswith("fwx_server_info")] == []
