"""Request deadline parameters: Triton's ``timeout`` in microseconds, fwx's ``timeout_ms`` in ms.

tritonclient users pass ``timeout=`` in µs (it becomes the request parameter
``timeout``), so fwx reads that parameter the way Triton does. Milliseconds,
the unit of fwx's ``Inference-Timeout`` header, are accepted under their own
name, ``timeout_ms``, so a number never silently means two things.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fwx.errors import InputError

#: parameter name -> seconds per unit
TIMEOUT_PARAMETERS = {"timeout": 1e-6, "timeout_ms": 1e-3}


def timeout_seconds(parameters: Mapping[str, Any]) -> float | None:
    """The shortest timeout the request's parameters ask for, in seconds (None when none)."""
    found: list[float] = []
    for name, unit in TIMEOUT_PARAMETERS.items():
        value = parameters.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            what = "microseconds, as in Triton" if name == "timeout" else "milliseconds"
            raise InputError(
                f"parameter {name!r} must be a non-negative number of {what}, got {value!r}",
                hint='e.g. "timeout": 500000 (µs) or "timeout_ms": 500',
            )
        found.append(value * unit)
    return min(found) if found else None
