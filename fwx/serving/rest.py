"""The HTTP transport: KServe v2 and TF Serving REST on one FastAPI app, plus /metrics.

Thin by design: each route reads the body under the size limit, translates
(``rest_kserve``, ``tf_serving``), awaits one data plane method and encodes.
``FwxError`` becomes ``{"error": "..."}`` with the error's HTTP status in one
handler. Routes are plain Starlette routes on the FastAPI app (no pydantic
models or dependency solving per request); the OpenAPI pages are off.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from fwx.errors import FwxError
from fwx.serving import rest_kserve, tf_serving
from fwx.serving.dataplane import failure_reason
from fwx.serving.http_body import read_body

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
    """The endpoint functions, closed over one data plane."""

    def __init__(self, dp: DataPlane, config: ServerConfig) -> None:
        self.dp = dp
        self.limit = config.max_body_bytes
        self.api_token = bool(config.api_token)

    def _auth(self, request: Request) -> None:
        if self.api_token:
            self.dp.check_api_token(request.headers.get("authorization"))

    @staticmethod
    def _mv(request: Request) -> tuple[str, str | None]:
        p = request.path_params
        return p["model"], p.get("version")

    async def live(self, request: Request) -> Response:
        return _flag(self.dp.live())

    async def ready(self, request: Request) -> Response:
        return _flag(self.dp.ready())

    async def model_ready(self, request: Request) -> Response:
        self._auth(request)
        return _flag(self.dp.model_ready(*self._mv(request)))

    async def server_metadata(self, request: Request) -> Response:
        return _json(self.dp.server_metadata())

    async def model_metadata(self, request: Request) -> Response:
        self._auth(request)
        return _json(self.dp.model_metadata(*self._mv(request)))

    async def model_config(self, request: Request) -> Response:
        self._auth(request)
        return _json(self.dp.model_config(*self._mv(request)))

    async def stats(self, request: Request) -> Response:
        self._auth(request)
        p = request.path_params
        return _json(self.dp.model_statistics(p.get("model"), p.get("version")))

    async def infer(self, request: Request) -> Response:
        self._auth(request)
        model, version = self._mv(request)
        body = await read_body(request, self.limit)
        headers = request.headers
        deadline = rest_kserve.deadline_from_header(headers.get("inference-timeout"))
        try:
            req, binary = rest_kserve.parse_infer(body, headers.get(rest_kserve.HEADER_LEN), model, version,
                                                  lambda: self.dp.signature(model, version), deadline)
        except FwxError as exc:
            self.dp.metrics.count_failure(failure_reason(exc))
            raise
        resp = await self.dp.infer(req)
        payload, head_len = rest_kserve.encode_infer(resp, req, binary)
        if head_len is None:
            return Response(payload, media_type=JSON)
        return Response(payload, media_type="application/octet-stream",
                        headers={"Inference-Header-Content-Length": str(head_len)})

    async def repository_index(self, request: Request) -> Response:
        self._auth(request)
        body = await read_body(request, self.limit)
        doc = rest_kserve.load_json(body) if body.strip() else {}
        entries = self.dp.repository_index()
        if isinstance(doc, dict) and doc.get("ready") is True:
            entries = [e for e in entries if e.get("state") == "READY"]
        return _json(entries)

    async def load(self, request: Request) -> Response:
        await read_body(request, self.limit)
        await self.dp.load_model(request.path_params["model"], request.headers.get("authorization"))
        return Response(b"", 200)

    async def unload(self, request: Request) -> Response:
        await read_body(request, self.limit)
        await self.dp.unload_model(request.path_params["model"], request.headers.get("authorization"))
        return Response(b"", 200)

    async def metrics(self, request: Request) -> Response:
        self.dp.ready()  # refresh the readiness gauge
        body, content_type = self.dp.metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    # ------------------------------------------------------------ TF Serving
    async def tf_predict(self, request: Request) -> Response:
        self._auth(request)
        model, version = self._mv(request)
        body = await read_body(request, self.limit)
        deadline = rest_kserve.deadline_from_header(request.headers.get("inference-timeout"))
        try:
            req, style = tf_serving.parse_predict(body, model, version, self.dp.signature(model, version), deadline)
        except FwxError as exc:
            self.dp.metrics.count_failure(failure_reason(exc))
            raise
        resp = await self.dp.infer(req)
        return Response(tf_serving.encode_predict(resp, style), media_type=JSON)

    async def tf_status(self, request: Request) -> Response:
        self._auth(request)
        model, version = self._mv(request)
        entries = [e for e in self.dp.repository_index()
                   if e["name"] == model and (version is None or str(e["version"]) == version)]
        if not entries:
            self.dp.manager.get(model, version)  # raises NotFoundError naming what is missing
        return _json(tf_serving.model_status(entries))

    async def tf_metadata(self, request: Request) -> Response:
        self._auth(request)
        model, version = self._mv(request)
        m = self.dp.manager.get(model, version)
        return _json(tf_serving.model_metadata(m.name, str(m.version), m.signature))


def _routes(r: Routes) -> list[tuple[str, Endpoint, str]]:
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
    ]
    for base in mv:
        out += [(base, r.model_metadata, "GET"), (f"{base}/ready", r.model_ready, "GET"),
                (f"{base}/infer", r.infer, "POST"), (f"{base}/stats", r.stats, "GET"),
                (f"{base}/config", r.model_config, "GET")]
    for base in tf:
        out += [(base, r.tf_status, "GET"), (f"{base}:predict", r.tf_predict, "POST"),
                (f"{base}/metadata", r.tf_metadata, "GET")]
    return out


def create_app(dp: DataPlane, config: ServerConfig) -> FastAPI:
    """The ASGI app serving ``dp`` (uvicorn runs it; tests drive it in-process)."""
    app = FastAPI(title="fwx", docs_url=None, redoc_url=None, openapi_url=None)
    for path, endpoint, method in _routes(Routes(dp, config)):
        app.router.add_route(path, endpoint, methods=[method], include_in_schema=False)

    async def on_fwx_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, FwxError)
        if exc.http_status >= 500 and exc.http_status not in (503, 504):
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        return error_response(exc)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return Response(orjson.dumps({"error": str(exc.detail)}), exc.status_code, media_type=JSON)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        return Response(orjson.dumps({"error": f"internal error ({type(exc).__name__}); see the server log"}), 500,
                        media_type=JSON)

    app.add_exception_handler(FwxError, on_fwx_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)
    return app
