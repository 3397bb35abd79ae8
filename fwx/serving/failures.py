"""The failure label of a request for metrics, shared by the data plane and the task plane (which the data
plane imports, so it cannot import the data plane back)."""

from __future__ import annotations

import asyncio

from fwx.errors import DeadlineExceededError, UnavailableError, UsageError
from fwx.serving.batching.batcher import QueueFullError


def failure_reason(exc: BaseException) -> str:
    """A short, bounded label for metrics (never user text: label cardinality stays fixed)."""
    if isinstance(exc, QueueFullError):
        return "rejected"
    if isinstance(exc, DeadlineExceededError):
        return "timeout"
    if isinstance(exc, UsageError):
        return "invalid"
    if isinstance(exc, UnavailableError):
        return "unavailable"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return "not_found" if getattr(exc, "http_status", 0) == 404 else "error"
