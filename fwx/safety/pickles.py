"""Pickles read as data: list the globals a pickle would import, refuse those torch would not.

The gate is an allow-list, never a block-list (scanner bypasses live in
block-lists, picklescan#14/#74): a pickle may only name globals that
``torch.load(weights_only=True)`` accepts (torch's own allow-list plus
``torch.serialization.add_safe_globals``), and may only use the opcodes
torch's ``weights_only`` unpickler implements (``WEIGHTS_ONLY_OPCODES``), so a
pickle that passes here is one ``torch.load(weights_only=True)`` could read,
whichever unpickler torch then really uses. The walk uses ``pickletools`` and
never unpickles. A ``STACK_GLOBAL`` whose module/name strings cannot be traced
to literal strings (the memo-confusion trick) is refused as unresolvable.
"""

from __future__ import annotations

import io
import pickletools
from collections.abc import Iterator

#: Pickle protocols 2-5 start with PROTO (0x80) and the protocol byte.
_PROTO_HEADS = tuple(bytes([0x80, v]) for v in (2, 3, 4, 5))
_STRING_OPS = frozenset(
    {
        "SHORT_BINUNICODE",
        "BINUNICODE",
        "BINUNICODE8",
        "UNICODE",
        "SHORT_BINSTRING",
        "BINSTRING",
        "STRING",
        "SHORT_BINBYTES",
        "BINBYTES",
    }
)
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
#: Opcodes that fetch a callable from copyreg's extension registry: never in a tensor file.
_EXT_OPS = frozenset({"EXT1", "EXT2", "EXT4"})
UNRESOLVED = "<unresolvable STACK_GLOBAL>"
#: The opcodes ``torch._weights_only_unpickler.Unpickler.load`` implements (torch 2.13; a test reads
#: them back from torch's source). Protocol 4/5 framing (FRAME, MEMOIZE, SHORT_BINUNICODE,
#: STACK_GLOBAL) is not among them: torch's safe load refuses such pickles too.
WEIGHTS_ONLY_OPCODES = frozenset(
    {
        "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "MARK",
        "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE", "EMPTY_TUPLE",
        "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "BININT", "BININT1", "BININT2", "BINFLOAT",
        "BINUNICODE", "SHORT_BINSTRING", "BINPERSID", "BINGET", "LONG_BINGET", "BINPUT",
        "LONG_BINPUT", "LONG1", "PROTO", "STOP",
    }
)  # fmt: skip


class PickleScanError(ValueError):
    """The bytes are not a pickle this walk can follow (truncated, or not a pickle at all)."""


def looks_like_pickle(data: bytes) -> bool:
    return data[:2] in _PROTO_HEADS


def pickle_globals(data: bytes, *, max_pickles: int = 8) -> list[str]:
    """``module.name`` of every global the pickle(s) at the start of ``data`` would import.

    The first pickle is walked whatever its protocol (0 and 1 have no header);
    further protocol 2+ pickles are walked while they last (a legacy ``torch.save`` file).
    """
    buf = io.BytesIO(data)
    found: list[str] = []
    for i in range(max_pickles):
        start = buf.tell()
        if i and not looks_like_pickle(data[start : start + 2]):
            break
        found.extend(g for g in _walk(buf, set()))
        if buf.tell() >= len(data):
            break
    return found


#: Pickles a legacy (non-zip) ``torch.save`` file holds and ``torch.load`` unpickles, in order:
#: magic number, protocol version, sys info, the object, the storage keys (raw storages follow).
LEGACY_PICKLES = 5


def weights_only_problems(data: bytes, allowed: frozenset[str], *, count: int) -> list[str]:
    """Why the first ``count`` pickles of ``data`` are not what torch's ``weights_only`` load accepts.

    Exactly ``count`` pickles are walked whatever their protocol, since the
    unpickler reads that many whatever their header says; fewer is fine (the
    data ended). Each global outside ``allowed`` and each opcode outside
    ``WEIGHTS_ONLY_OPCODES`` is named once, globals first.
    """
    buf = io.BytesIO(data)
    names: list[str] = []
    ops: set[str] = set()
    for _ in range(count):
        if buf.tell() >= len(data):
            break
        for g in _walk(buf, ops):
            if g not in allowed and g not in names:
                names.append(g)
    return names + [f"opcode {op}" for op in sorted(ops - WEIGHTS_ONLY_OPCODES)]


def _walk(buf: io.BytesIO, opcodes: set[str]) -> Iterator[str]:
    strings: list[object] = []  # a shadow stack of the values that matter here: literal strings
    memo: dict[int, object] = {}
    try:
        for op, arg, _pos in pickletools.genops(buf):
            name = op.name
            opcodes.add(name)
            if name in _STRING_OPS:
                strings.append(arg if isinstance(arg, str) else None)
            elif name in _GET_OPS:
                strings.append(memo.get(int(arg)))  # type: ignore[arg-type]
            elif name in _PUT_OPS:
                memo[int(arg)] = strings[-1] if strings else None  # type: ignore[arg-type]
            elif name == "MEMOIZE":
                memo[len(memo)] = strings[-1] if strings else None
            elif name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                yield f"{module}.{attr}"
                strings.append(None)
            elif name == "STACK_GLOBAL":
                yield _stack_global(strings)
                strings.append(None)
            elif name in _EXT_OPS:
                yield f"<copyreg extension {arg}>"
            elif name != "FRAME":
                strings.append(None)  # anything else breaks a module/name string pair
            if name == "STOP":
                return
    except (ValueError, EOFError) as exc:  # pickletools raises ValueError on bad opcodes
        raise PickleScanError(str(exc).splitlines()[0] if str(exc) else "truncated pickle") from exc


def _stack_global(strings: list[object]) -> str:
    if len(strings) >= 2 and isinstance(strings[-1], str) and isinstance(strings[-2], str):
        attr, module = strings.pop(), strings.pop()
        return f"{module}.{attr}"
    return UNRESOLVED


def torch_safe_globals() -> frozenset[str]:
    """The names ``torch.load(weights_only=True)`` would accept, read from torch itself."""
    import torch
    from torch import _weights_only_unpickler as wou

    names = set(wou._get_allowed_globals())
    for obj in torch.serialization.get_safe_globals():
        target = obj[0] if isinstance(obj, tuple) else obj
        if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], str):
            names.add(obj[1])
        else:
            names.add(f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}")
    return frozenset(names)


def unsafe_globals(data: bytes, allowed: frozenset[str]) -> list[str]:
    """Globals in the pickle(s) of ``data`` outside ``allowed``, in first-seen order."""
    out: list[str] = []
    for g in pickle_globals(data):
        if g not in allowed and g not in out:
            out.append(g)
    return out
