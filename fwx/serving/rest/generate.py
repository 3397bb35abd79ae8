"""The generation routes: Triton's ``generate`` / ``generate_stream`` and OpenAI's completions and chat.

Thin like the rest of the transport: authorize, read the body under the size
limit, parse it into one ``GenerateCall`` (``fwx.serving.tasks.protocols``),
start it on the task plane (``TaskPlane.start``: lookup, access, chat
template, defaults; the gRPC route calls the same), and write the answer as JSON or as server-sent
events. A client that goes away mid-stream cancels its request: the stream's
generator is closed, which takes the request's row out of the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from fwx.errors import FwxError
from fwx.serving.failures import failure_reason
from fwx.serving.rest.body import read_body
from fwx.serving.rest.kserve import load_json
from fwx.serving.tasks import protocols
from fwx.serving.tasks.generate import ClientGoneError
from fwx.serving.tasks.protocols import GenerateCall, OpenAIEncoder, Usage

if TYPE_CHECKING:
    from fwx.serving.dataplane import DataPlane
    from fwx.serving.tasks.generate import Generation

JSON = "application/json"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _event(doc: Any) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


class GenerateRoutes:
    """Endpoint functions over one data plane's task plane."""

    def __init__(self, dp: DataPlane, limit: int) -> None:
        self.dp = dp
        self.limit = limit

    async def _call(self, request: Request, parse: Callable[[Any], GenerateCall]) -> GenerateCall:
        self.dp.authorize("infer", request.headers.get("authorization"))  # before reading an unknown caller's body
        try:
            return parse(load_json(await read_body(request, self.limit)))
        except FwxError:
            self.dp.metrics.count_failure("invalid")
            raise

    async def _start(self, request: Request, call: GenerateCall) -> Generation:
        return await self.dp.tasks.start(call, request.headers.get("authorization"))

    async def _run(self, request: Request, call: GenerateCall, body: Callable[[Generation, str, str], Any]) -> Response:
        t0 = time.perf_counter_ns()
        gen = await self._start(request, call)
        try:
            text, finish = await gen.text()
        except BaseException as exc:
            self.dp.tasks.record(gen, t0, failure_reason(exc))
            raise
        self.dp.tasks.record(gen, t0, None)
        return Response(orjson.dumps(body(gen, text, finish)), media_type=JSON)

    def _stream(
        self, request: Request, gen: Generation, events: AsyncGenerator[bytes, None], *, openai: bool = False
    ) -> Response:
        t0 = time.perf_counter_ns()

        async def watch() -> None:
            """Wait for the client to hang up: while no token is written, nothing else would notice."""
            while (await request.receive())["type"] != "http.disconnect":
                pass
            gen.abandon()

        async def guarded() -> AsyncIterator[bytes]:
            error: BaseException | None = None
            watcher = asyncio.ensure_future(watch())
            try:
                async for chunk in events:
                    yield chunk
            except FwxError as exc:  # the status line is sent: the error becomes the last event
                error = exc
                yield _event(protocols.openai_error(exc) if openai else {"error": str(exc)})
            except BaseException as exc:
                error = exc
                raise
            finally:
                watcher.cancel()
                await events.aclose()
                reason = "cancelled" if isinstance(error, ClientGoneError) else failure_reason(error) if error else None
                self.dp.tasks.record(gen, t0, reason)

        return StreamingResponse(guarded(), media_type="text/event-stream", headers=SSE_HEADERS)

    # ------------------------------------------------------------------ Triton
    async def generate(self, request: Request) -> Response:
        return await self._triton(request, stream=False)

    async def generate_stream(self, request: Request) -> Response:
        return await self._triton(request, stream=True)

    async def _triton(self, request: Request, *, stream: bool) -> Response:
        p = request.path_params
        name, version = p["model"], p.get("version")
        call = await self._call(request, lambda d: protocols.triton(d, name, version, stream=stream))
        if not stream:
            return await self._run(
                request,
                call,
                lambda g, text, finish: protocols.triton_body(
                    name, str(g.model.version), text, finish, Usage(g.prompt_tokens, g.completion_tokens)
                ),
            )
        gen = await self._start(request, call)

        async def events() -> AsyncGenerator[bytes, None]:
            async with contextlib.aclosing(gen.deltas()) as deltas:  # closing the stream closes the request
                async for delta in deltas:
                    usage = Usage(gen.prompt_tokens, gen.completion_tokens) if delta.finish_reason else None
                    body = protocols.triton_body(name, str(gen.model.version), delta.text, delta.finish_reason, usage)
                    yield _event(body)

        return self._stream(request, gen, events())

    # ------------------------------------------------------------------ OpenAI
    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: OpenAI's list of the models that generate (``TaskPlane.openai_models``)."""
        try:
            data = self.dp.tasks.openai_models(request.headers.get("authorization"))
        except FwxError as exc:
            return Response(orjson.dumps(protocols.openai_error(exc)), exc.http_status, media_type=JSON)
        return Response(orjson.dumps({"object": "list", "data": data}), media_type=JSON)

    async def completions(self, request: Request) -> Response:
        return await self._openai(request, protocols.completions, is_chat=False)

    async def chat(self, request: Request) -> Response:
        return await self._openai(request, protocols.chat, is_chat=True)

    async def _openai(self, request: Request, parse: Callable[[Any], GenerateCall], *, is_chat: bool) -> Response:
        try:
            return await self._openai_call(request, parse, is_chat=is_chat)
        except FwxError as exc:  # OpenAI's error shape, so its clients show the message
            headers = {"Retry-After": str(getattr(exc, "retry_after_s", 1))} if exc.http_status == 503 else None
            return Response(orjson.dumps(protocols.openai_error(exc)), exc.http_status, headers, media_type=JSON)

    async def _openai_call(self, request: Request, parse: Callable[[Any], GenerateCall], *, is_chat: bool) -> Response:
        call = await self._call(request, parse)
        enc = OpenAIEncoder(call.model, is_chat)
        if not call.stream:
            return await self._run(
                request,
                call,
                lambda g, text, finish: enc.body(text, finish, Usage(g.prompt_tokens, g.completion_tokens)),
            )
        gen = await self._start(request, call)

        async def events() -> AsyncGenerator[bytes, None]:
            if is_chat:  # the assistant's role comes first, with no content yet
                yield _event(enc.chunk("", None, first=True))
            async with contextlib.aclosing(gen.deltas()) as deltas:
                async for delta in deltas:
                    yield _event(enc.chunk(delta.text, delta.finish_reason))
            if call.include_usage:
                yield _event(enc.usage_chunk(Usage(gen.prompt_tokens, gen.completion_tokens)))
            yield b"data: [DONE]\n\n"

        return self._stream(request, gen, events(), openai=True)
