"""Guards of the model-control API: admin token and request-supplied model names.

The transports call these before ``DataPlane.load_model``/``unload_model``
reach the manager. A model name from a request is the only thing from a request
that ever becomes a path, and only after it matches ``MODEL_NAME_RE`` and its
realpath stays inside the repository (no ``..``, no absolute path, no symlink
out): Triton's CVE-2023-31036 was a load API that followed relative paths.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Any

from fwx.errors import ForbiddenError, InputError, NotFoundError, UnauthenticatedError, UsageError
from fwx.repository import check_model_name

_ENABLE_HINT = "start fwx serve with --enable-model-control --admin-token TOKEN"


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer X`` header, else None (a bare token or another scheme is no token).

    RFC 6750: the scheme is case-insensitive; the token is everything after it.
    """
    if not header:
        return None
    value = header.strip()
    if value[:7].lower() != "bearer ":
        return None
    return value[7:].strip() or None


def check_tokens(config: Any) -> None:
    """Start-up checks of the token flags: each mistake here used to mean silently no authentication."""
    for flag, token in (("--admin-token", config.admin_token), ("--api-token", config.api_token)):
        if token is None:
            continue
        if not token.strip():
            raise UsageError(f"{flag} is empty", hint=f"pass a secret (e.g. openssl rand -hex 32), or leave {flag} out")
        if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
            raise UsageError(
                f"{flag} holds whitespace, control or non-ASCII characters",
                hint="clients send it in an HTTP header as 'Authorization: Bearer TOKEN'; "
                "use letters, digits and punctuation",
            )
    if config.enable_model_control and not config.admin_token:
        raise UsageError(
            "--enable-model-control needs a non-empty --admin-token",
            hint="pass --admin-token TOKEN (or FWX_ADMIN_TOKEN); load/unload then need 'Authorization: Bearer TOKEN'",
        )


def check_admin(config: Any, token: str | None) -> None:
    """Refuse model control unless it is enabled and ``token`` is the admin token.

    Disabled -> 403 / PERMISSION_DENIED; missing or wrong token -> 401 / UNAUTHENTICATED.
    Compared in constant time.
    """
    if not getattr(config, "enable_model_control", False):
        raise ForbiddenError("model control is disabled on this server", hint=_ENABLE_HINT)
    expected = getattr(config, "admin_token", None)
    if not expected:
        raise ForbiddenError("model control has no admin token configured", hint=_ENABLE_HINT)
    given = bearer_token(token)
    if given is None:
        raise UnauthenticatedError(
            "model control needs the admin token",
            hint="send 'Authorization: Bearer TOKEN' (REST) or 'authorization' metadata 'Bearer TOKEN' (gRPC)",
        )
    if not hmac.compare_digest(given.encode(), str(expected).encode()):
        raise UnauthenticatedError("invalid admin token", hint="send the token given to --admin-token")


def check_request_model_name(name: str) -> str:
    """A model name from a request: the repository's name rule, and no hidden folders."""
    if not isinstance(name, str):
        raise InputError("model name must be a string")
    check_model_name(name)
    if name.startswith("."):
        raise InputError(f"invalid model name {name!r}", hint="model names do not start with '.'")
    return name


def inside(root: Path, path: Path) -> bool:
    """True when ``path``'s realpath (symlinks resolved) lies strictly inside ``root``'s realpath."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real != real_root and real.startswith(real_root.rstrip(os.sep) + os.sep)


def resolve_model_dir(repository: Path, name: str, *, must_exist: bool = True) -> Path:
    """The folder of model ``name`` inside ``repository``; 400 for a bad name, 404 if absent."""
    check_request_model_name(name)
    path = Path(repository) / name
    if not inside(Path(repository), path):
        raise InputError(
            f"model {name!r} resolves outside the model repository",
            hint="model folders (and symlinks) must stay inside the repository",
        )
    if must_exist and not path.is_dir():
        raise NotFoundError(f"model {name!r} is not in the repository", hint="publish it first with fwx export")
    return path
