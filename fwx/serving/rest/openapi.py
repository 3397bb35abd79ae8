"""The OpenAPI 3.1 document of the REST API, built from the route table and the request schemas.

Served at ``GET /v2/openapi.json``. Every route of ``app._routes`` must have an
entry in ``OPERATIONS`` (a missing one fails at start-up and in the tests), and
request bodies use the same schemas the routes check (``schema``), so the
document cannot drift from what the server accepts. The binary tensor
extension (``Inference-Header-Content-Length``) is described in text only:
OpenAPI has no way to say "JSON header, then raw bytes".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from fwx import __version__
from fwx.serving.dataplane import ACCESS, Access
from fwx.serving.rest import schema

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
_OPENAI_ERROR = {  # OpenAI's own shape on its routes, which its clients read
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type"]}},
}
_OBJECT: dict[str, Any] = {"type": "object"}
_ARRAY: dict[str, Any] = {"type": "array", "items": {"type": "object"}}
_TEXT = "text"
_EMPTY = "empty"
_SSE = "sse"
_GENERATE = {
    "type": "object",
    "required": ["text_input"],
    "properties": {"text_input": {"type": "string"}, "parameters": {"type": "object"}},
}
_COMPLETION = {
    "type": "object",
    "required": ["model", "prompt"],
    "properties": {"model": {"type": "string"}, "max_tokens": {"type": "integer"}, "stream": {"type": "boolean"}},
}
_CHAT = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {"model": {"type": "string"}, "messages": {"type": "array", "items": {"type": "object"}}},
}
#: Routes documented without a token: the data plane's public operations (their route names are the same).
_PUBLIC = frozenset(op for op, access in ACCESS.items() if access is Access.PUBLIC)

#: endpoint name -> (summary, request body schema or None, 200 answer: a JSON schema, _TEXT or _EMPTY).
OPERATIONS: dict[str, tuple[str, dict[str, Any] | None, Any]] = {
    "live": ("Liveness: 200 while the process runs", None, _EMPTY),
    "ready": ("Readiness: 200 once every model is loaded and warmed, 400 otherwise", None, _EMPTY),
    "server_metadata": ("Server metadata: name, version, extensions", None, _OBJECT),
    "stats": ("Triton-style inference statistics", None, _OBJECT),
    "repository_index": ("Every model version the server knows, with its state", schema.INDEX_REQUEST, _ARRAY),
    "load": ("Load (or reload) a model; needs --enable-model-control and the admin token", None, _EMPTY),
    "unload": ("Drain and unload a model; needs --enable-model-control and the admin token", None, _EMPTY),
    "metrics": ("Prometheus metrics", None, _TEXT),
    "model_metadata": ("Model metadata: versions, platform, input and output tensors", None, _OBJECT),
    "model_ready": ("Model readiness: 200 when the version serves, 400 otherwise", None, _EMPTY),
    "infer": ("KServe v2 inference (JSON; the binary tensor extension is accepted too)", schema.INFER_REQUEST, _OBJECT),
    "model_config": ("Triton-style model configuration", None, _OBJECT),
    "tf_status": ("TF Serving model version status", None, _OBJECT),
    "tf_predict": ("TF Serving predict: 'instances' (rows) or 'inputs' (columns)", schema.TF_PREDICT_REQUEST, _OBJECT),
    "tf_metadata": ("TF Serving signature metadata", None, _OBJECT),
    "openapi": ("This document", None, _OBJECT),
    "generate": ("Triton generate: text_input in, text_output out (text-generation-with-past)", _GENERATE, _OBJECT),
    "generate_stream": ("Triton generate_stream: text_output deltas as server-sent events", _GENERATE, _SSE),
    "models": ("OpenAI-compatible model list: the models that generate", None, _OBJECT),
    "completions": ("OpenAI-compatible completions (stream: true for server-sent events)", _COMPLETION, _OBJECT),
    "chat": ("OpenAI-compatible chat completions (stream: true for server-sent events)", _CHAT, _OBJECT),
}
_ERRORS = {
    "400": "Malformed request or bad input (the message names the field or tensor)",
    "401": "Missing or wrong token",
    "403": "Model control is disabled",
    "404": "Unknown model or version",
    "413": "Body over the size limit",
    "503": "Not ready, queue full or shutting down",
    "504": "Deadline exceeded",
}


def _response(answer: Any) -> dict[str, Any]:
    if answer == _EMPTY:
        return {"description": "OK (empty body)"}
    if answer == _SSE:
        return {"description": "OK", "content": {"text/event-stream": {"schema": {"type": "string"}}}}
    if answer == _TEXT:
        return {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    return {"description": "OK", "content": {"application/json": {"schema": answer}}}


def _error_schema(name: str) -> dict[str, Any]:
    return _OPENAI_ERROR if name in ("completions", "chat", "models") else _ERROR


def _operation(path: str, method: str, name: str) -> dict[str, Any]:
    summary, body, answer = OPERATIONS[name]
    params = [
        {"name": p, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
        for p in re.findall(r"{(\w+)}", path)
    ]
    op: dict[str, Any] = {
        "operationId": f"{name}_{method.lower()}_{re.sub(r'[^A-Za-z0-9]+', '_', path).strip('_')}",
        "summary": summary,
        "responses": {
            "200": _response(answer),
            **{
                code: {"description": text, "content": {"application/json": {"schema": _error_schema(name)}}}
                for code, text in _ERRORS.items()
            },
        },
    }
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": name != "repository_index", "content": {"application/json": {"schema": body}}}
    if name not in _PUBLIC:
        op["security"] = [{"bearer": []}, {}]
    return op


def document(routes: Iterable[tuple[str, str, str]]) -> dict[str, Any]:
    """The document for ``(path, method, endpoint name)`` routes."""
    paths: dict[str, dict[str, Any]] = {}
    for path, method, name in routes:
        paths.setdefault(path, {})[method.lower()] = _operation(path, method, name)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "fwx serve",
            "version": __version__,
            "description": "KServe v2 / Open Inference Protocol and TF Serving REST. Errors are "
            '{"error": "one line"}. Send \'Authorization: Bearer TOKEN\' where the '
            "server runs with --api-token (model routes) or --admin-token (load/unload).",
        },
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
