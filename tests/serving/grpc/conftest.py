"""The real serving stack (ModelManager + DataPlane + gRPC transport) on an ephemeral 127.0.0.1 port.

Uses the shared ``make_repo`` / ``live_server`` fixtures of tests/serving/conftest.py: tiny ONNX
models, the server on its own event loop in a background thread (so the blocking tritonclient can
call it from the test thread), HTTP off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

MODELS = {"linear": "linear", "multi": "multi", "sleepy": "sleepy", "text": "text"}
MAX_MESSAGE = 1 << 20


@pytest.fixture(scope="module")
def server(
    live_server: Callable[..., Any], make_repo: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("grpc-repo"), MODELS)
    return live_server(repo, grpc_port=0, http_port=-1, grpc_max_message_bytes=MAX_MESSAGE)


@pytest.fixture(scope="module")
def client(server: Any) -> Iterator[Any]:
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()
