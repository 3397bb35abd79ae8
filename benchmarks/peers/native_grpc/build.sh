#!/usr/bin/env bash
# Build the native gRPC measurement server (not part of fwx, `make test` or CI).
#   benchmarks/peers/native_grpc/build.sh   -> benchmarks/peers/native_grpc/build/native_grpc
#                                              and build/_fwx_native_grpc*.so (in-process prototype; PYTHON=...)
# Needs Debian's libgrpc++-dev, protobuf-compiler-grpc and protobuf-compiler (gRPC 1.51).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto="$here/../../../fwx/serving/proto"
out="$here/build"
if ! pkg-config --exists grpc++ protobuf || ! command -v protoc >/dev/null || ! command -v grpc_cpp_plugin >/dev/null \
    || ! command -v g++ >/dev/null; then
    echo "native_grpc: needs g++ and the Debian packages libgrpc++-dev protobuf-compiler protobuf-compiler-grpc" \
         "(apt-get install -y libgrpc++-dev protobuf-compiler protobuf-compiler-grpc)" >&2
    exit 3
fi
mkdir -p "$out"
if [[ ! ( "$out/native_grpc" -nt "$here/native_grpc.cc" && "$out/native_grpc" -nt "$proto/grpc_service.proto" ) ]]; then
    protoc -I "$proto" --cpp_out="$out" "$proto/grpc_service.proto" "$proto/model_config.proto"
    g++ -O2 -std=c++17 -I "$out" -o "$out/native_grpc.tmp" "$here/native_grpc.cc" "$out/grpc_service.pb.cc" \
        "$out/model_config.pb.cc" $(pkg-config --cflags --libs grpc++ protobuf) -lpthread
    mv "$out/native_grpc.tmp" "$out/native_grpc"
fi
# The in-process prototype: a Python extension (needs the interpreter's headers; skipped with one line if absent).
py="${PYTHON:-python3}"
inc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)"
suffix="$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null || true)"
ext="$out/_fwx_native_grpc$suffix"
if [[ -z "$inc" || ! -f "$inc/Python.h" ]]; then
    echo "native_grpc: no Python.h for $py: the in-process prototype is not built" >&2
elif [[ ! "$ext" -nt "$here/inproc_ext.cc" ]]; then
    g++ -O2 -std=c++17 -shared -fPIC -I "$inc" -o "$ext.tmp" "$here/inproc_ext.cc" \
        $(pkg-config --cflags --libs grpc++) -lpthread
    mv "$ext.tmp" "$ext"
fi
