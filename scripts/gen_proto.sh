#!/usr/bin/env bash
# Regenerate fwx/serving/proto/*_pb2*.py from the .proto files next to them.
#
# Why not plain `python -m grpc_tools.protoc`:
#  * grpcio-tools bundles its own protoc; the release matching grpcio 1.85
#    emits protobuf-7 gencode whose runtime check fails on the protobuf 6.x
#    the project pins (TensorFlow and tritonclient need <7). We use
#    grpcio-tools 1.74 (protoc 31.1 -> protobuf 6.31 gencode) in a throwaway
#    venv and strip the runtime/version checks so the modules load on 5.x-7.x.
#  * tritonclient registers the same `inference.*` names in protobuf's default
#    descriptor pool; ours go into a private pool (fwx/serving/proto/_pool.py)
#    so either can be imported first, and messages are built without the
#    default symbol database (see _pool.py).
#  * imports between the generated modules are made package-relative.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PROTO_DIR="$ROOT/fwx/serving/proto"
TOOLS_VENV="${FWX_PROTOC_VENV:-/tmp/fwx-protoc-venv}"
TOOLS_VERSION="1.74.0"

if ! "$TOOLS_VENV/bin/python" -c "import grpc_tools" 2>/dev/null; then
  python3 -m venv "$TOOLS_VENV"
  "$TOOLS_VENV/bin/pip" install -q "grpcio-tools==$TOOLS_VERSION"
fi

cd "$PROTO_DIR"
rm -f ./*_pb2.py ./*_pb2.pyi ./*_pb2_grpc.py
"$TOOLS_VENV/bin/python" -m grpc_tools.protoc -I . \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  grpc_service.proto model_config.proto health.proto
rm -f model_config_pb2_grpc.py  # no services in that file

"$TOOLS_VENV/bin/python" - <<'PY'
import pathlib
import re

for path in sorted(pathlib.Path(".").glob("*_pb2*.py*")):
    text = path.read_text()
    # protobuf runtime-version check (gencode 6.31 would refuse 5.x and warn on 7.x)
    text = re.sub(r"_runtime_version\.ValidateProtobufRuntimeVersion\(\n(?:.*\n)*?\)\n", "", text)
    text = text.replace("from google.protobuf import runtime_version as _runtime_version\n", "")
    # grpcio version check (the stubs only need grpcio >= 1.63)
    text = re.sub(r"\nGRPC_GENERATED_VERSION = .*?\n    \)\n", "\n", text, flags=re.S)
    text = text.replace("import warnings\n", "")
    # private descriptor pool, package-relative imports
    text = text.replace(
        "from google.protobuf.internal import builder as _builder\n",
        "from google.protobuf.internal import builder as _builder\n"
        "from ._pool import POOL as _POOL, build_top_descriptors_and_messages as _build_top\n",
    )
    text = text.replace("_builder.BuildTopDescriptorsAndMessages(", "_build_top(")
    text = text.replace("_descriptor_pool.Default().AddSerializedFile", "_POOL.AddSerializedFile")
    text = re.sub(r"^import (\w+_pb2) as ", r"from . import \1 as ", text, flags=re.M)
    if path.suffix == ".pyi" and not text.startswith("# ruff: noqa"):
        text = "# ruff: noqa\n" + text  # generated stubs keep protoc's style
    if any(s in text for s in ("_descriptor_pool.Default()", "ValidateProtobufRuntimeVersion", "_builder.BuildTop")):
        raise SystemExit(f"{path}: post-processing failed")
    path.write_text(text)
PY
echo "regenerated: $(ls "$PROTO_DIR"/*_pb2*.py* | xargs -n1 basename | tr '\n' ' ')"
