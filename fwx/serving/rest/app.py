"""The HTTP transport: KServe v2 and TF Serving REST on one Starlette app, plus /metrics.

Thin by design: each route hands the ``Authorization`` header and a decoder
(read the body under the size limit, translate with ``kserve`` or
``tf_serving``) to one data plane method, and encodes what it returns. Who
may call a route is decided by the data plane, not here.
``FwxError`` becomes ``{"error": "..."}`` with the error's HTTP status in one
handler. The app is a bare Starlette app: plain routes, no pydantic models or
dependency solving per request. FastAPI on top added nothing we used but
~0.2 s of imports (pydantic schemas, OpenTelemetry) to every cold start.
``GET /v2/openapi.json`` serves our own document (``openapi``), built from the
same route table and request schemas.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from fwx.errors import FwxError
from fwx.serving.rest import kserve, openapi, tf_serving
from fwx.serving.rest.body import read_body
from fwx.serving.rest.schema import check_index_request
from fwx.serving.types import InferRequest

if TYPE_CHECKING:
    from fwx.serving.config import ServerConfig
    from fwx.serving.dataplane import DataPlane

log = logging.getLogger("fwx.serving.rest")
JSON = "application/json"
Endpoint = Callable[[Request], Awaitable[Response]]


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), status, media_type=JSON)


def _flag(ok: bool) -> Response:
    """Health answers: 200 or 400 with an empty body, like Triton."""
    return Response(b"", 200 if ok else 400)


def error_response(exc: FwxError) -> Response:
    headers = {"Retry-After": str(getattr(exc, "retry_after_s", 1))} if exc.http_status == 503 else None
    return Response(orjson.dumps({"error": str(exc)}), exc.http_status, headers=headers, media_type=JSON)


class Routes:
    """The endpoint functions, closed over one data plane: decode, one data-plane call, encode."""

    def __init__(self, dp: DataPlane, config: ServerConfig) -> None:
        self.dp = dp
        self.limit = config.max_body_bytes
        self.openapi_doc = b"{}"  # set by create_app once the route table exists

    @staticmethod
    def _auth(request: Request) -> str | None:
        return request.headers.get("authorization")

    @staticmethod
    def _deadline(request: Request) -> float | None:
        return kserve.deadline_from_header(request.headers.get("inference-timeout"))

    @staticmethod
    def _mv(request: Request) -> tuple[str, str | None]:
        p = request.path_params
        return p["model"], p.get("version")

    async def live(self, request: Request) -> Response:
        return _flag(self.dp.live())

    async def ready(self, request: Request) -> Response:
        ok = self.dp.ready()
        if not ok and getattr(self.dp, "peers_not_ready", False):  # set by fwx.serving.workers
            return Response(b"", 503, headers={"Retry-After": "1"})  # a worker restarts: KServe's "retry"
        return _flag(ok)

    async def model_ready(self, request: Request) -> Response:
        return _flag(self.dp.model_ready(*self._mv(request), auth=self._auth(request)))

    async def server_metadata(self, request: Request) -> Response:
        return _json(self.dp.server_metadata())

    async def model_metadata(self, request: Request) -> Response:
        return _json(self.dp.model_metadata(*self._mv(request), auth=self._auth(request)))

    async def model_config(self, request: Request) -> Response:
        return _json(self.dp.model_config(*self._mv(request), auth=self._auth(request)))

    async def stats(self, request: Request) -> Response:
        p = request.path_params
        return _json(self.dp.model_statistics(p.get("model"), p.get("version"), auth=self._auth(request)))

    async def infer(self, request: Request) -> Response:
        model, version = self._mv(request)

        async def decode() -> tuple[InferRequest, bool]:
            body = await read_body(request, self.limit)
            deadline = self._deadline(request)
            return kserve.parse_infer(
                body,
                request.headers.get(kserve.HEADER_LEN),
                model,
                version,
                lambda: self.dp.signature(model, version),
                deadline,
            )

        req, binary, resp = await self.dp.handle_infer(decode, auth=self._auth(request))
        payload, head_len = kserve.encode_infer(resp, req, binary)
        if head_len is None:
            return Response(payload, media_type=JSON)
        return Response(
            payload, media_type="application/octet-stream", headers={"Inference-Header-Content-Length": str(head_len)}
        )

    async def repository_index(self, request: Request) -> Response:
        auth = self._auth(request)
        self.dp.authorize("repository_index", auth)  # before reading a body from an unknown caller
        body = await read_body(request, self.limit)
        doc = kserve.load_json(body) if body.strip() else {}
        check_index_request(doc)
        ready_only = doc.get("ready") is True
        return _json(self.dp.repository_index(ready_only=ready_only, auth=auth))

    async def load(self, request: Request) -> Response:
        await read_body(request, self.limit)
        await self.dp.load_model(request.path_params["model"], auth=self._auth(request))
        return Response(b"", 200)

    async def unload(self, request: Request) -> Response:
        await read_body(request, self.limit)
        await self.dp.unload_model(request.path_params["model"], auth=self._auth(request))
        return Response(b"", 200)

    async def openapi(self, request: Request) -> Response:
        return Response(self.openapi_doc, media_type=JSON)

    async def metrics(self, request: Request) -> Response:
        body, content_type = self.dp.metrics_text(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    # ------------------------------------------------------------ TF Serving
    async def tf_predict(self, request: Request) -> Response:
        model, version = self._mv(request)

        async def decode() -> tuple[InferRequest, str]:
            body = await read_body(request, self.limit)
            deadline = self._deadline(request)
            return tf_serving.parse_predict(body, model, version, self.dp.signature(model, version), deadline)

        _, style, resp = await self.dp.handle_infer(decode, auth=self._auth(request))
        return Response(tf_serving.encode_predict(resp, style), media_type=JSON)

    async def tf_status(self, request: Request) -> Response:
        """TF Serving's status, with OpenAI's ``Model`` fields beside it: the route is also OpenAI's retrieve."""
        name, version = self._mv(request)
        status = tf_serving.model_status(self.dp.model_status(name, version, auth=self._auth(request)))
        return _json(status | self.dp.tasks.openai_fields(name, version))

    async def tf_metadata(self, request: Request) -> Response:
        m = self.dp.served_model(*self._mv(request), auth=self._auth(request))
        return _json(tf_serving.model_metadata(m.name, str(m.version), m.signature))


def _routes(r: Routes) -> list[tuple[str, Endpoint, str]]:
    from fwx.serving.rest.generate import GenerateRoutes

    g = GenerateRoutes(r.dp, r.limit)
    mv = ("/v2/models/{model}", "/v2/models/{model}/versions/{version}")
    tf = ("/v1/models/{model}", "/v1/models/{model}/versions/{version}")
    out: list[tuple[str, Endpoint, str]] = [
        ("/v2/health/live", r.live, "GET"),
        ("/v2/health/ready", r.ready, "GET"),
        ("/v2", r.server_metadata, "GET"),
        ("/v2/models/stats", r.stats, "GET"),
        ("/v2/repository/index", r.repository_index, "POST"),
        ("/v2/repository/models/{model}/load", r.load, "POST"),
        ("/v2/repository/models/{model}/unload", r.unload, "POST"),
        ("/metrics", r.metrics, "GET"),
        ("/v2/openapi.json", r.openapi, "GET"),
        ("/v1/models", g.models, "GET"),
        ("/v1/completions", g.completions, "POST"),
        ("/v1/chat/completions", g.chat, "POST"),
    ]
    for base in mv:
        out += [
            (base, r.model_metadata, "GET"),
            (f"{base}/ready", r.model_ready, "GET"),
            (f"{base}/infer", r.infer, "POST"),
            (f"{base}/stats", r.stats, "GET"),
            (f"{base}/config", r.model_config, "GET"),
            (f"{base}/generate", g.generate, "POST"),
            (f"{base}/generate_stream", g.generate_stream, "POST"),
        ]
    for base in tf:
        out += [
            (base, r.tf_status, "GET"),
            (f"{base}:predict", r.tf_predict, "POST"),
            (f"{base}/metadata", r.tf_metadata, "GET"),
        ]
    return out


def create_app(dp: DataPlane, config: ServerConfig) -> Starlette:
    """The ASGI app serving ``dp`` (uvicorn runs it; tests drive it in-process)."""
    app = Starlette()
    routes = Routes(dp, config)
    table = _routes(routes)
    for path, endpoint, method in table:
        app.router.add_route(path, endpoint, methods=[method], include_in_schema=False)
    routes.openapi_doc = orjson.dumps(openapi.document((p, m, e.__name__) for p, e, m in table))

    async def on_fwx_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, FwxError)
        if exc.http_status >= 500 and exc.http_status not in (503, 504):
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        return error_response(exc)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return Response(orjson.dumps({"error": str(exc.detail)}), exc.status_code, media_type=JSON)

    async def on_disconnect(request: Request, exc: Exception) -> Response:
        log.debug("%s %s: the client went away before its body arrived", request.method, request.url.path)
        return Response(b"", 400)  # nobody reads it

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        return Response(
            orjson.dumps({"error": f"internal error ({type(exc).__name__}); see the server log"}), 500, media_type=JSON
        )

    app.add_exception_handler(FwxError, on_fwx_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(ClientDisconnect, on_disconnect)
    app.add_exception_handler(Exception, on_unexpected)
    return app
