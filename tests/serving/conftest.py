"""Fixtures shared by every serving test (tests/serving/grpc and tests/serving/lifecycle use them too).

* ``make_repo(root, models={"linear": "linear", "cnn": "cnn"})`` writes an artifact repository of
  tiny ONNX models (kinds in ``serving_models``), checksummed fwx.json included.
* ``live_server(config)`` starts the real ``fwx.serving.server.Server`` (uvicorn on an ephemeral
  127.0.0.1 port, gRPC off unless asked) on an event loop in a background thread; its ``request``
  drives the same app in-process through httpx's ASGITransport.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import serving_models

from fwx.serving.config import ServerConfig


class LiveServer:
    """A started Server on its own loop thread; ``call`` runs a coroutine on that loop."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="fwx-test-loop")
        self.server: Any = None
        self._client: Any = None

    def start(self) -> LiveServer:
        from fwx.serving.server import Server

        self._thread.start()

        async def boot() -> None:
            import httpx

            self.server = Server(self.config)
            await self.server.start()
            self._client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=self.server.app), base_url="http://fwx.test", timeout=60
            )

        self.call(boot(), timeout=120)
        return self

    def call(self, coro: Awaitable[Any], timeout: float = 60) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]
        return fut.result(timeout)

    @property
    def dataplane(self) -> Any:
        return self.server.dataplane

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.server.grpc_port}"

    def request(self, method: str, path: str, **kw: Any) -> Any:
        """One in-process request through the ASGI app (httpx.AsyncClient + ASGITransport)."""
        return self.call(self._client.request(method, path, **kw))

    def gather(self, make: Callable[[Any], Awaitable[Any]], n: int) -> list[Any]:
        """Run ``make(client)`` n times concurrently on the server loop (in-process clients)."""

        async def run() -> list[Any]:
            return list(await asyncio.gather(*(make(self._client) for _ in range(n)), return_exceptions=True))

        return self.call(run())

    def stop(self) -> None:
        async def down() -> None:
            if self._client is not None:
                await self._client.aclose()
            if self.server is not None:
                await self.server.stop()

        try:
            self.call(down(), timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self.loop.close()  # else the loop is left to the garbage collector: ResourceWarning


@pytest.fixture(scope="session")
def make_repo() -> Callable[..., Path]:
    """``make_repo(root, models={name: kind or [kind per version]})`` -> root."""
    return serving_models.make_repo


def server_config(repo: Path, **kw: Any) -> ServerConfig:
    kw.setdefault("http_port", 0)
    kw.setdefault("grpc_port", -1)
    kw.setdefault("poll_seconds", 0)
    return ServerConfig(repository=repo, **kw)


@pytest.fixture(scope="module")
def live_server() -> Iterator[Callable[..., LiveServer]]:
    """Factory: ``live_server(repo, **config)`` -> started LiveServer, stopped at module end."""
    started: list[LiveServer] = []

    def start(repo: Path, **kw: Any) -> LiveServer:
        srv = LiveServer(server_config(repo, **kw)).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
