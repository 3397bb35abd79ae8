#!/usr/bin/env bash
# Create benchmarks/peers/.venv-mlserver-hf with MLServer 1.7.1 and its Hugging Face runtime (CPU torch).
# Kept out of the main .venv: MLServer pins its own FastAPI/uvicorn/grpcio, and mlserver-huggingface 1.7.1
# needs transformers before 4.42 (it imports transformers.pipelines.Conversation) and an optimum that
# predates torch 2.13's ONNX exporter (optimum 1.27 imports private torch.onnx names that are gone).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
"$python" -m venv "$here/.venv-mlserver-hf"
pip="$here/.venv-mlserver-hf/bin/pip"
"$pip" install -q --upgrade pip
"$pip" install -q "mlserver==1.7.1" "mlserver-huggingface==1.7.1" "uvloop==0.21.0" "torch==2.13.0+cpu"
"$pip" install -q "transformers==4.41.2" "optimum==1.20.0"
"$here/.venv-mlserver-hf/bin/mlserver" --version
