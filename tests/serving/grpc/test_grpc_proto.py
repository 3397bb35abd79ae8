"""Our .proto is wire-compatible with Triton's, and coexists with tritonclient in one process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor as d

import fwx.serving.proto as proto_pkg
from fwx.serving.proto import grpc_service_pb2, health_pb2, model_config_pb2

PROTO_DIR = Path(proto_pkg.__file__).parent


def _type_name(f: d.FieldDescriptor) -> str:
    if f.message_type is not None:
        return f.message_type.full_name
    if f.enum_type is not None:
        return f.enum_type.full_name
    return str(f.type)


def _walk(msg: d.Descriptor) -> list[d.Descriptor]:
    out = [msg]
    for nested in msg.nested_types:
        out.extend(_walk(nested))
    return out


def _our_messages() -> list[d.Descriptor]:
    out: list[d.Descriptor] = []
    for fd in (grpc_service_pb2.DESCRIPTOR, model_config_pb2.DESCRIPTOR):
        for msg in fd.message_types_by_name.values():
            out.extend(_walk(msg))
    return out


def test_every_field_matches_triton() -> None:
    from google.protobuf import descriptor_pool
    from tritonclient.grpc import service_pb2  # noqa: F401  (registers Triton's messages)

    theirs = descriptor_pool.Default()
    checked = 0
    for msg in _our_messages():
        ref = theirs.FindMessageTypeByName(msg.full_name)
        for f in msg.fields:
            g = ref.fields_by_name.get(f.name)
            assert g is not None, f"{msg.full_name}.{f.name} is not in Triton's proto"
            assert (f.number, f.type, f.is_repeated, _type_name(f)) == (
                g.number,
                g.type,
                g.is_repeated,
                _type_name(g),
            ), f"{msg.full_name}.{f.name}"
            checked += 1
        for enum in msg.enum_types:
            ref_enum = ref.enum_types_by_name[enum.name]
            assert {v.name: v.number for v in enum.values}.items() <= {
                v.name: v.number for v in ref_enum.values
            }.items()
    assert checked > 150
    dtype = theirs.FindEnumTypeByName("inference.DataType")
    assert [(v.name, v.number) for v in model_config_pb2.DESCRIPTOR.enum_types_by_name["DataType"].values] == [
        (v.name, v.number) for v in dtype.values
    ]


def test_service_methods_match_triton() -> None:
    from tritonclient.grpc import service_pb2

    ours = grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    ref = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert ours.full_name == "inference.GRPCInferenceService"
    for m in ours.methods:
        r = ref.methods_by_name[m.name]
        assert (m.input_type.full_name, m.output_type.full_name, m.client_streaming, m.server_streaming) == (
            r.input_type.full_name,
            r.output_type.full_name,
            r.client_streaming,
            r.server_streaming,
        )
    assert len(ours.methods) == 12


def test_health_service_shape() -> None:
    svc = health_pb2.DESCRIPTOR.services_by_name["Health"]
    assert svc.full_name == "grpc.health.v1.Health"
    assert [m.name for m in svc.methods] == ["Check", "Watch"]
    values = health_pb2.HealthCheckResponse.ServingStatus
    assert (values.Value("SERVING"), values.Value("NOT_SERVING"), values.Value("SERVICE_UNKNOWN")) == (1, 2, 3)


def test_generated_code_is_patched() -> None:
    """No protobuf/grpc version gate, private pool, package-relative imports (see scripts/gen_proto.sh)."""
    for path in PROTO_DIR.glob("*_pb2*.py"):
        text = path.read_text()
        assert "ValidateProtobufRuntimeVersion" not in text, path.name
        assert "GRPC_GENERATED_VERSION" not in text, path.name
        assert "_descriptor_pool.Default()" not in text, path.name
        assert "\nimport grpc_service_pb2" not in text
        assert "\nimport model_config_pb2" not in text
    for name in ("grpc_service", "model_config", "health"):
        assert (PROTO_DIR / f"{name}.proto").is_file()
        assert (PROTO_DIR / f"{name}_pb2.py").is_file()


_ORDER_PROBE = """
import sys
def ours():
    from fwx.serving.proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc, health_pb2  # noqa
    return pb
def theirs():
    import tritonclient.grpc
    from tritonclient.grpc import service_pb2
    return service_pb2
first, second = (ours, theirs) if sys.argv[1] == "ours" else (theirs, ours)
a, b = first(), second()
pb, tpb = (a, b) if sys.argv[1] == "ours" else (b, a)
req = pb.ModelInferRequest(model_name="m", raw_input_contents=[b"\\x00\\x00\\x80\\x40"])
req.inputs.add(name="x", datatype="FP32", shape=[1, 1]).parameters["k"].int64_param = 3
back = tpb.ModelInferRequest.FromString(req.SerializeToString())
assert back.inputs[0].parameters["k"].int64_param == 3 and back.raw_input_contents[0] == b"\\x00\\x00\\x80\\x40"
cfg = tpb.ModelConfigResponse()
cfg.config.input.add(name="x", data_type=11, dims=[-1, 2])
mine = pb.ModelConfigResponse.FromString(cfg.SerializeToString())
assert mine.config.input[0].data_type == 11 and list(mine.config.input[0].dims) == [-1, 2]
print("ok")
"""


@pytest.mark.parametrize("impl", ["upb", "python"])
@pytest.mark.parametrize("first", ["ours", "theirs"])
def test_coexists_with_tritonclient(first: str, impl: str) -> None:
    env = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": impl, "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", _ORDER_PROBE, first],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(PROTO_DIR.parents[2]),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
