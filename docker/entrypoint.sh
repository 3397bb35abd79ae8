#!/bin/sh
# fwx container entrypoint. Binds 0.0.0.0 because inside a container that is the
# only way to be reachable; publish ports on 127.0.0.1 on the host (see compose.yaml).
# `fwx-entrypoint healthcheck` is the HEALTHCHECK: exit 0 only when /v2/health/ready is 200.
# Any other arguments are passed to `fwx serve` (e.g. --device cuda --max-batch-size 64).
set -eu

repo="${FWX_MODEL_REPOSITORY:-/models}"
host="${FWX_HOST:-0.0.0.0}"
http_port="${FWX_HTTP_PORT:-8000}"
grpc_port="${FWX_GRPC_PORT:-8001}"
python_bin="${FWX_PYTHON:-python3}"

if [ "${1:-}" = "healthcheck" ]; then
    exec "$python_bin" -c "import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:${http_port}/v2/health/ready', timeout=2).status == 200 else 1)
except Exception:
    sys.exit(1)"
fi

exec fwx serve "$repo" --host "$host" --http-port "$http_port" --grpc-port "$grpc_port" "$@"
