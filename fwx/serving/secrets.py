"""``fwx serve``'s tokens: read once from the environment or a file, then gone from every place others can read.

Another process of the same user (a compromised worker among them) can read
this process's ``/proc/<pid>/cmdline``, and (unless this process is made
non-dumpable, which ``seal`` does) its ``/proc/<pid>/environ``. Both show the memory the process started with, not
Python's ``os.environ`` or ``sys.argv``: deleting the variable does not erase
the bytes. So once the token is in the ServerConfig, its bytes are overwritten
in place in those two regions (their bounds are in ``/proc/self/stat``) and the
variable is removed; workers and probe children get the token over their
job pipe, never in argv or environ (``fwx.serving.spawn``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from pathlib import Path

from fwx.errors import UsageError

#: Where the argument and environment strings lie in memory: fields 48-51 of /proc/self/stat (Linux 3.5+).
_ARG_START, _ENV_END = 48, 51
_PR_SET_DUMPABLE = 4


def read_token_file(path: Path, flag: str) -> str:
    """The token in ``path`` (one line; surrounding whitespace dropped), or a one-line usage error."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {flag} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    token = text.strip()
    if not token or "\n" in token:
        raise UsageError(f"{flag} {path} must hold one token on one line", hint="e.g. openssl rand -hex 32 > FILE")
    return token


def _regions() -> list[tuple[int, int]]:
    """(start, end) of this process's original argv and environ strings."""
    text = Path("/proc/self/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # field 3 onwards; the command name may hold spaces
    values = [int(fields[n - 3]) for n in range(_ARG_START, _ENV_END + 1)]
    return [(values[0], values[1]), (values[2], values[3])]


def erase(secrets: list[str]) -> int:
    """Overwrite every occurrence of each secret in this process's original argv and environ; how many."""
    wanted = [s.encode() for s in secrets if s]
    if not wanted or not sys.platform.startswith("linux"):
        return 0
    count = 0
    try:
        regions = _regions()
    except (OSError, ValueError, IndexError):
        return 0
    for start, end in regions:
        if not 0 < start < end:
            continue
        memory = ctypes.string_at(start, end - start)
        for secret in wanted:
            at = memory.find(secret)
            while at >= 0:
                ctypes.memset(start + at, ord("*"), len(secret))
                count += 1
                at = memory.find(secret, at + len(secret))
    return count


def seal() -> bool:
    """Make this process's /proc entries (environ, maps, mem) root-only: prctl(PR_SET_DUMPABLE, 0).

    Without it, a worker running as the same user reads the supervisor's whole environment (cloud keys
    included) through /proc, sandbox or not. Children start dumpable again (it is reset on exec).
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0


def forget(env_names: tuple[str, ...], secrets: list[str]) -> None:
    """Drop the secrets from ``os.environ``, ``sys.argv`` and this process's /proc cmdline and environ."""
    seal()
    erase(secrets)
    for name in env_names:
        with contextlib.suppress(KeyError):
            del os.environ[name]
    for i, arg in enumerate(sys.argv):
        for secret in secrets:
            if secret:
                arg = arg.replace(secret, "*" * len(secret))
        sys.argv[i] = arg
