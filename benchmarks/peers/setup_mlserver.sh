#!/usr/bin/env bash
# Create benchmarks/peers/.venv-mlserver with MLServer 1.7.1 and onnxruntime.
# Kept out of the main .venv on purpose: MLServer pins its own FastAPI/uvicorn/grpcio.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
"$python" -m venv "$here/.venv-mlserver"
"$here/.venv-mlserver/bin/pip" install -q --upgrade pip
# uvloop 0.22+ raises in asyncio.get_event_loop() without a running loop, which MLServer 1.7.1's
# inference workers call at start-up: pin the last release it was made with.
"$here/.venv-mlserver/bin/pip" install -q "mlserver==1.7.1" "uvloop==0.21.0" onnxruntime numpy
"$here/.venv-mlserver/bin/mlserver" --version
