"""One error root for the whole project.

Every error a user can cause is an ``FwxError`` carrying a one-line message, a
hint saying what to do, a process exit code, and the HTTP/gRPC status the
server maps it to. The CLI prints ``message`` (+ hint) without a traceback
unless ``--debug``; REST and gRPC translate it in one place each.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-empty line of an exception message: what a user can read in one go."""
    for line in str(exc).strip().splitlines():
        if line.strip():
            return line.strip()[:limit]
    return type(exc).__name__


#: The hint for a model file whose structure cannot be read (the runtimes', the scanners' and the detector's).
CORRUPT_HINT = "the file is probably truncated or corrupt; export it again"


class FwxWarning(UserWarning):
    """The category of every Python warning fwx itself issues; the test suite turns it into an error."""


class FwxError(Exception):
    """Root of every error fwx raises on purpose."""

    exit_code: int = 1
    http_status: int = 500
    grpc_code: str = "INTERNAL"
    #: Structured facts for ``--json`` beside the message (e.g. what each target of a failed export did).
    detail: dict[str, Any] | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(FwxError):
    """The command line or request is malformed: bad flag, bad --input spec, bad tensor."""

    exit_code = 2
    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class InputError(UsageError):
    """An input file or tensor is unusable: missing, wrong format, corrupt, wrong shape or dtype."""


class StoppedError(FwxError):
    """fwx was told to stop (SIGTERM) while a step ran: nothing was published; exit 143, as the signal's own."""

    exit_code = 143


class NotFoundError(FwxError):
    exit_code = 2
    http_status = 404
    grpc_code = "NOT_FOUND"


class MissingDependencyError(FwxError):
    """A framework/runtime is not installed; the message names the extra to install."""

    exit_code = 2
    http_status = 501
    grpc_code = "UNIMPLEMENTED"

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs {package}, which is not installed",
            hint=f"run: pip install 'fwx-toolkit[{extra}]'",
        )
        self.package = package
        self.extra = extra


class UnsafeModelError(FwxError):
    """Loading this file would run code from it; refused unless --trust-model-code."""

    exit_code = 2
    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class ExportError(FwxError):
    """An export or conversion step failed."""


class UnsupportedOpsError(ExportError):
    """The target cannot express some ops of the model. Lists all of them at once."""

    def __init__(self, target: str, ops: Iterable[str], *, hint: str | None = None) -> None:
        self.ops = sorted(set(ops))
        super().__init__(f"{target} cannot express these ops: {', '.join(self.ops)}", hint=hint)


class SignatureMismatchError(ExportError):
    """An artifact read back does not have the signature that was pinned."""


class ValidationError(FwxError):
    """Numbers differ beyond the tolerance policy, or an artifact is inconsistent with its manifest."""


class ChecksumError(ValidationError):
    exit_code = 1
    http_status = 500


class ServingError(FwxError):
    """Base for errors that only the server raises."""


class UnavailableError(ServingError):
    exit_code = 1
    http_status = 503
    grpc_code = "UNAVAILABLE"


class DeadlineExceededError(ServingError):
    http_status = 504
    grpc_code = "DEADLINE_EXCEEDED"


class PayloadTooLargeError(ServingError):
    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class UnauthenticatedError(ServingError):
    http_status = 401
    grpc_code = "UNAUTHENTICATED"


class ForbiddenError(ServingError):
    http_status = 403
    grpc_code = "PERMISSION_DENIED"
