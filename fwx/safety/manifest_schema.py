"""Check a parsed ``fwx.json`` against ``fwx/manifest.schema.json`` (the one definition of the manifest).

The schema bounds what a hostile or corrupt manifest can make the server do:
name pattern, ``version >= 1``, artifact sizes, counts of artifacts, inputs,
outputs and dims, relative artifact paths. The first violation becomes one
line naming the file and the field (``artifacts/onnx/size_bytes: ...``).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from fwx.errors import InputError

SCHEMA_FILE = "manifest.schema.json"


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files("fwx").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))
    return data


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    cls = jsonschema.validators.validator_for(schema())
    cls.check_schema(schema())
    return cls(schema())


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= limit else text[:limit] + "…"


def _describe(err: Any) -> str:
    """A short reason; jsonschema's own messages repeat the whole offending value."""
    kind, limit, value = err.validator, err.validator_value, err.instance
    if kind == "type":
        return f"is {_short(value)}, expected {' or '.join(limit) if isinstance(limit, list) else limit}"
    if kind in ("maxItems", "maxProperties"):
        return f"has {len(value)} entries (at most {limit})"
    if kind in ("maximum", "minimum"):
        return f"is {_short(value)} (must be {'<=' if kind == 'maximum' else '>='} {limit})"
    if kind in ("maxLength", "minLength"):
        return f"has length {len(value)} (must be {'<=' if kind == 'maxLength' else '>='} {limit})"
    if kind == "pattern":
        return f"is {_short(value)}, which is not allowed here"
    if kind == "enum":
        return f"is {_short(value)}, expected one of {', '.join(map(str, limit))}"
    if kind == "additionalProperties":
        return (
            "has unknown field(s): "
            + ", ".join(sorted(k for k in value if k not in err.schema.get("properties", {})))[:120]
        )
    if kind == "oneOf":
        return f"is {_short(value)}, expected a dimension (an integer >= -1 or a symbol name)"
    return str(err.message)[:160]


def check(data: Any, where: str) -> None:
    """Raise ``InputError`` naming ``where`` and the field when ``data`` breaks the schema."""
    import jsonschema

    err = jsonschema.exceptions.best_match(_validator().iter_errors(data))
    if err is None:
        return
    field = "/".join(str(p) for p in err.absolute_path) or "(top level)"
    raise InputError(
        f"{where}: field {field} {_describe(err)}",
        hint="the manifest is corrupt or was edited by hand; re-export the model",
    )
