"""The private descriptor pool that holds fwx's generated protocol messages.

tritonclient (and any other KServe client) registers messages with the same
full names (``inference.ModelInferRequest``...) in protobuf's default pool, and
two different files defining one name there fail at import. Keeping ours in a
pool of their own lets both live in one process, imported in either order; the
wire format depends only on field numbers, so nothing else changes.

``build_top_descriptors_and_messages`` replaces protobuf's builder function of
the same name in the generated modules: the original also registers each class
in the default symbol database, which under the pure-Python protobuf backend
writes our descriptors into the default pool and breaks tritonclient's import.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor, descriptor_pool, message, reflection
from google.protobuf.internal import enum_type_wrapper

POOL = descriptor_pool.DescriptorPool()


def _message_class(msg: descriptor.Descriptor, module_name: str, prefix: str) -> type:
    attrs: dict[str, Any] = {
        name: _message_class(nested, module_name, f"{prefix}{msg.name}.")
        for name, nested in msg.nested_types_by_name.items()
    }
    attrs.update(DESCRIPTOR=msg, __module__=module_name, __qualname__=prefix + msg.name)
    return reflection.GeneratedProtocolMessageType(msg.name, (message.Message,), attrs)  # type: ignore[no-any-return]


def build_top_descriptors_and_messages(
    file: descriptor.FileDescriptor, module_name: str, module: dict[str, Any]
) -> None:
    """Fill a generated module's globals with enums, services and message classes."""
    for name, enum in file.enum_types_by_name.items():
        module["_" + name.upper()] = enum
        module[name] = enum_type_wrapper.EnumTypeWrapper(enum)
        for value in enum.values:
            module[value.name] = value.number
    for name, service in file.services_by_name.items():
        module["_" + name.upper()] = service
    for name, msg in file.message_types_by_name.items():
        module[name] = _message_class(msg, module_name, "")
