"""The input and output trees of a ``.pt2`` program, read as data.

A program records how its flat tensors nest (``in_spec``/``out_spec``: tuples,
dicts, and any container type registered with torch's pytree), and
``torch.export.load`` refuses a type this process has not registered. The
common case is a Hugging Face model exported directly: it returns a
``ModelOutput`` (``transformers.modeling_outputs.SequenceClassifierOutput``),
which only importing transformers registers. Importing the module a file names
is running code the file chose, so fwx does not; a type whose tree is recorded
as a dict's (its keys, in order, as ``ModelOutput`` records it) is rebuilt as a
plain dict type registered under that name, and the outputs keep their keys as
names. Any other unknown type is refused, naming it.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterator
from typing import Any

import torch.utils._pytree as pytree

# Where torch.export.save writes the serialised program(s) inside the archive.
_PROGRAM_JSON = re.compile(r"(^|/)models/[^/]+\.json$")


def unknown_types(data: bytes) -> dict[str, bool]:
    """Container types the archive's trees name that this process has not registered -> whether their
    recorded context is a dict's (a JSON list of string keys)."""
    found: dict[str, bool] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for name in zf.namelist():
                if _PROGRAM_JSON.search(name):
                    for node in _spec_nodes(json.loads(zf.read(name))):
                        typ = node.get("type")
                        if typ and typ not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
                            found[typ] = found.get(typ, True) and _dict_keys(node.get("context"))
    except (zipfile.BadZipFile, ValueError, KeyError, AttributeError):
        return {}  # not readable as expected: torch's own error stands
    return found


def register_dict_types(names: list[str]) -> None:
    """Register a plain dict type under each serialised name (a registered name is kept)."""
    for name in names:
        if name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            _register(type(name.rsplit(".", 1)[-1], (dict,), {"__module__": __name__}), name)


def _register(cls: type[dict[str, Any]], name: str) -> None:
    def flatten(d: dict[str, Any]) -> tuple[list[Any], list[str]]:
        return list(d.values()), list(d.keys())

    def unflatten(values: Any, keys: Any) -> dict[str, Any]:
        return cls(zip(keys, values, strict=True))

    def with_keys(d: dict[str, Any]) -> tuple[list[tuple[Any, Any]], list[str]]:
        return [(pytree.MappingKey(k), v) for k, v in d.items()], list(d.keys())

    pytree.register_pytree_node(
        cls,
        flatten,
        unflatten,
        serialized_type_name=name,
        to_dumpable_context=json.dumps,
        from_dumpable_context=json.loads,
        flatten_with_keys_fn=with_keys,
    )


def call_flat(module: Any, in_spec: Any, flat: tuple[Any, ...]) -> Any:
    """Call ``module`` with tensors given in the program's flat input order, nested as its ``in_spec`` says
    (a program exported with ``kwargs=`` takes them by name, not by position)."""
    if in_spec is not None and in_spec.num_leaves == len(flat):
        args, kwargs = pytree.tree_unflatten(list(flat), in_spec)
        return module(*args, **kwargs)
    return module(*flat)


def _spec_nodes(program: Any) -> Iterator[dict[str, Any]]:
    for entry in program["graph_module"]["module_call_graph"]:
        sig = entry.get("signature") or {}
        for key in ("in_spec", "out_spec"):
            if isinstance(sig.get(key), str):
                _, root = json.loads(sig[key])
                yield from _walk(root)


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("children_spec") or []:
        yield from _walk(child)


def _dict_keys(context: Any) -> bool:
    try:
        keys = json.loads(context)
    except (TypeError, ValueError):
        return False
    return isinstance(keys, list) and all(isinstance(k, str) for k in keys)
