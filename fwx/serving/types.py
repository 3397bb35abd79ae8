"""The serving vocabulary shared by the data plane and both transports.

REST and gRPC decode into these types and encode from them, so the data plane
never sees a transport-specific object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class InferTensor:
    """One input or output tensor, already decoded (object array of bytes for BYTES)."""

    name: str
    datatype: str
    shape: list[int]
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class RequestedOutput:
    """An output the client asked for; `binary` selects the binary tensor extension."""

    name: str
    binary: bool = False
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class InferRequest:
    """A decoded inference request; `outputs` empty means every output."""

    model_name: str
    model_version: str | None
    inputs: list[InferTensor]
    outputs: list[RequestedOutput] = field(default_factory=list)
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    deadline: float | None = None  # time.monotonic() deadline


@dataclass
class InferResponse:
    """The data plane's answer, before a transport encodes it."""

    model_name: str
    model_version: str
    outputs: list[InferTensor]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
