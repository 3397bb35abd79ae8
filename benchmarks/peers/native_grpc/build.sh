#!/usr/bin/env bash
# Build the native gRPC measurement server (not part of fwx, `make test` or CI).
#   benchmarks/peers/native_grpc/build.sh   -> benchmarks/peers/native_grpc/build/native_grpc
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
if [[ "$out/native_grpc" -nt "$here/native_grpc.cc" && "$out/native_grpc" -nt "$proto/grpc_service.proto" ]]; then
    exit 0  # up to date
fi
protoc -I "$proto" --cpp_out="$out" "$proto/grpc_service.proto" "$proto/model_config.proto"
g++ -O2 -std=c++17 -I "$out" -o "$out/native_grpc.tmp" "$here/native_grpc.cc" "$out/grpc_service.pb.cc" \
    "$out/model_config.pb.cc" $(pkg-config --cflags --libs grpc++ protobuf) -lpthread
mv "$out/native_grpc.tmp" "$out/native_grpc"
