"""What the gRPC transport needs of a data plane: ``fwx.serving.dataplane.DataPlane`` fits, as do benchmark fakes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fwx.serving.types import InferRequest, InferResponse

Decode = Callable[[], Awaitable[tuple[InferRequest, Any]]]


class DataPlane(Protocol):
    """The data-plane calls the gRPC servicers translate to; every access check happens behind them."""

    def authorize(self, operation: str, auth: str | None) -> None: ...

    def live(self) -> bool: ...

    def ready(self) -> bool: ...

    def model_ready(self, name: str, version: str | None, *, auth: str | None = None) -> bool: ...

    def server_metadata(self) -> dict[str, Any]: ...

    def model_metadata(self, name: str, version: str | None, *, auth: str | None = None) -> dict[str, Any]: ...

    def model_config(self, name: str, version: str | None, *, auth: str | None = None) -> dict[str, Any]: ...

    def model_statistics(self, name: str | None, version: str | None, *, auth: str | None = None) -> dict[str, Any]: ...

    def repository_index(self, *, ready_only: bool = False, auth: str | None = None) -> list[dict[str, Any]]: ...

    async def load_model(self, name: str, *, auth: str | None = None) -> None: ...

    async def unload_model(self, name: str, *, auth: str | None = None) -> None: ...

    async def handle_infer(
        self, decode: Decode, *, auth: str | None = None
    ) -> tuple[InferRequest, Any, InferResponse]: ...
