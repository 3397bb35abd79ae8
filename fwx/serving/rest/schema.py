"""JSON Schemas of the REST request bodies, and a compiled checker for them.

The schemas are the single source: the REST routes check every body against
them before reading a field, the OpenAPI document (``openapi``) embeds them,
and the tests check that the compiled checker agrees with the ``jsonschema``
library. Only the subset of JSON Schema used here is compiled (type,
properties, required, additionalProperties, items, minItems, enum,
maxLength); compiling to closures keeps a check at a few microseconds, where
a general validator costs ~80 us per request on the hot path. Tensor
``data`` is left to the tensor decoders, which check it against the shape.

A body that does not match is a 400 with one line naming the field, e.g.
``request body: outputs must be an array, got integer``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from fwx.errors import InputError
from fwx.signature import FROM_KSERVE


class Check(Protocol):
    def __call__(self, value: Any, where: str = "", /) -> None: ...


_Step = Callable[[Any, str], None]


DATATYPES = sorted(FROM_KSERVE)
_NAME = {"type": "string", "minLength": 1, "maxLength": 256}
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {"type": ["string", "number", "boolean"]},
    "description": "Extra parameters; each value a string, number or boolean (KServe v2).",
}
TENSOR: dict[str, Any] = {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": _NAME,
        "shape": {"type": "array", "items": {"type": "integer"}, "maxItems": 64},
        "datatype": {"type": "string", "enum": DATATYPES},
        "parameters": PARAMETERS,
        "data": {
            "type": ["array", "number", "string", "boolean"],
            "description": "Row-major values, flat or nested; omitted when parameters.binary_data_size is set.",
        },
    },
}
INFER_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["inputs"],
    "properties": {
        "id": {"type": "string", "maxLength": 1024},
        "parameters": PARAMETERS,
        "inputs": {"type": "array", "minItems": 1, "items": TENSOR},
        "outputs": {
            "type": "array",
            "items": {"type": "object", "required": ["name"], "properties": {"name": _NAME, "parameters": PARAMETERS}},
        },
    },
}
TF_PREDICT_REQUEST: dict[str, Any] = {
    "type": "object",
    "properties": {
        "signature_name": {"type": "string", "maxLength": 256},
        "instances": {
            "type": "array",
            "minItems": 1,
            "description": "Row format: one entry per example (a value, or an object keyed by input).",
        },
        "inputs": {
            "type": ["array", "object", "number", "string", "boolean"],
            "description": "Columnar format: one value, or an object keyed by input name.",
        },
    },
}
INDEX_REQUEST: dict[str, Any] = {
    "type": "object",
    "properties": {"ready": {"type": "boolean"}},
}

_JSON_TYPE = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "null": (type(None),),
}


def type_name(value: Any) -> str:
    return _JSON_TYPE.get(type(value), type(value).__name__)


def _is(value: Any, kinds: tuple[str, ...]) -> bool:
    for kind in kinds:
        if isinstance(value, _PY_TYPES[kind]) and (kind in ("boolean", "null") or not isinstance(value, bool)):
            return True
    return False


def _fail(where: str, what: str) -> InputError:
    return InputError(
        f"request body: {where} {what}" if where else f"request body {what}",
        hint="see GET /v2/openapi.json for the request schema",
    )


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _client_key(key: object) -> str:
    """A field name the client chose, escaped where it would break the one-line message (a newline)."""
    text = str(key)
    return text if text.isprintable() else repr(text)[1:-1]


def compile_schema(schema: dict[str, Any]) -> Check:
    """A checker ``check(value, where)`` that raises ``InputError`` at the first field that does not match."""
    checks: list[_Step] = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds_t = (kinds,) if isinstance(kinds, str) else tuple(kinds)
        want = " or ".join("an " + k if k[0] in "aeiou" else "a " + k for k in kinds_t)

        def check_type(value: Any, where: str) -> None:
            if not _is(value, kinds_t):
                raise _fail(where, f"must be {want}, got {type_name(value)}")

        checks.append(check_type)
    if "enum" in schema:
        allowed = schema["enum"]

        def check_enum(value: Any, where: str) -> None:
            if value not in allowed:
                shown = ", ".join(map(str, allowed))
                raise _fail(where, f"must be one of {shown}; got {str(value)[:40]!r}")

        checks.append(check_enum)
    checks += _string_checks(schema) + _array_checks(schema) + _object_checks(schema)

    def check(value: Any, where: str = "") -> None:
        for c in checks:
            c(value, where)

    return check


def _string_checks(schema: dict[str, Any]) -> list[_Step]:
    lo, hi = schema.get("minLength"), schema.get("maxLength")
    if lo is None and hi is None:
        return []

    def check(value: Any, where: str) -> None:
        if isinstance(value, str):
            if lo is not None and len(value) < lo:
                raise _fail(where, f"must have at least {lo} character{'s' if lo > 1 else ''}")
            if hi is not None and len(value) > hi:
                raise _fail(where, f"is longer than {hi} characters")

    return [check]


def _array_checks(schema: dict[str, Any]) -> list[_Step]:
    lo, hi = schema.get("minItems"), schema.get("maxItems")
    items = compile_schema(schema["items"]) if "items" in schema else None
    if lo is None and hi is None and items is None:
        return []

    def check(value: Any, where: str) -> None:
        if not isinstance(value, list):
            return
        if lo is not None and len(value) < lo:
            raise _fail(where, f"must have at least {lo} item{'s' if lo > 1 else ''}")
        if hi is not None and len(value) > hi:
            raise _fail(where, f"has more than {hi} items")
        if items is not None:
            for i, item in enumerate(value):
                items(item, f"{where}[{i}]")

    return [check]


def _object_checks(schema: dict[str, Any]) -> list[_Step]:
    required = tuple(schema.get("required", ()))
    props = {k: compile_schema(v) for k, v in schema.get("properties", {}).items()}
    extra = schema.get("additionalProperties", True)
    extra_check = compile_schema(extra) if isinstance(extra, dict) else None
    if not required and not props and extra is True:
        return []

    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            return
        for key in required:
            if key not in value:
                raise _fail(_join(where, key), "is required")
        for key, item in value.items():
            sub = props.get(key)
            if sub is not None:
                sub(item, _join(where, key))
            elif extra is False:
                raise _fail(_join(where, _client_key(key)), "is not a known field")
            elif extra_check is not None:
                extra_check(item, _join(where, _client_key(key)))

    return [check]


check_infer_request = compile_schema(INFER_REQUEST)
check_tf_predict_request = compile_schema(TF_PREDICT_REQUEST)
check_index_request = compile_schema(INDEX_REQUEST)
