#!/usr/bin/env bash
# make gpu-check: GPU validation + GPU serving smoke on a machine with CUDA, in under 8 minutes.
#   1. pytest -m gpu              (runtimes on cuda, EP choice for int8, validate_runtimes on cuda)
#   2. fwx validate --device cuda (the sample CNN as ONNX/TorchScript/.pt2 vs the eager module; JSON+HTML report)
#   3. serving smoke              (fwx serve --device cuda on an exported sample; one KServe v2 REST request)
# Results go to $OUT (if set) or bench-results/gpu/. Exit 0 only if every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
RESULTS=${OUT:-bench-results/gpu}
mkdir -p "$RESULTS"
WORK=$(mktemp -d)
SERVER_PID=""
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
export TF_CPP_MIN_LOG_LEVEL=3 KERAS_BACKEND=tensorflow

declare -a NAMES RCS SECS
step() {  # step NAME TIMEOUT_S CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "== $name"
  timeout "$limit" "$@" 2>&1 | tee "$RESULTS/$name.log" | tail -25
  local rc=${PIPESTATUS[0]}
  NAMES+=("$name"); RCS+=("$rc"); SECS+=($((SECONDS - t0)))
}

if ! command -v nvidia-smi >/dev/null; then
  echo "gpu_check: no nvidia-smi here; run this on a machine with an NVIDIA GPU" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$RESULTS/gpu.txt"
"$PY" - <<'PY' | tee -a "$RESULTS/gpu.txt"
import importlib.util as u
if u.find_spec("torch"):
    import torch; print("torch", torch.__version__, "cuda:", torch.cuda.is_available())
if u.find_spec("onnxruntime"):
    import onnxruntime as ort; print("onnxruntime", ort.__version__, ort.get_available_providers())
PY

step gpu-tests 240 "$PY" -m pytest -m gpu -q -p no:cacheprovider tests --junitxml="$RESULTS/gpu-tests.xml"

cat > "$WORK/build.py" <<'PY'
import sys, torch
sys.path.insert(0, ".")
from samples.models import build_torch_cnn
d = sys.argv[1]; m = build_torch_cnn(); x = torch.randn(2, 3, 32, 32)
torch.onnx.export(m, (x,), f"{d}/model.onnx", input_names=["image"], output_names=["logits"],
                  dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}}, dynamo=False, opset_version=17)
torch.export.save(torch.export.export(m, (x,), dynamic_shapes=({0: torch.export.Dim("N", min=1, max=1024)},)),
                  f"{d}/model.pt2")
PY
step build-sample 120 "$PY" "$WORK/build.py" "$WORK"
step validate-cuda 120 "$PY" -m fwx validate "$WORK/model.onnx" "$WORK/model.pt2" --device cuda \
  --report "$RESULTS/validate-cuda.json" --report "$RESULTS/validate-cuda.html"

cat > "$WORK/serve_smoke.py" <<'PY'
"""Export the sample with fwx, serve it on cuda, send one KServe v2 request."""
import json, os, subprocess, sys, time, urllib.request
sys.path.insert(0, ".")
import numpy as np
from fwx import ui
from fwx.exporter import export
work, py = sys.argv[1], sys.argv[2]
ui.state.quiet = True
export("samples.models:build_torch_cnn", ["onnx"], out=f"{work}/repo", name="cnn",
       inputs=["image:float32[N,3,32,32]"], device="cuda")
port = 18123
srv = subprocess.Popen([py, "-m", "fwx", "serve", f"{work}/repo", "--device", "cuda", "--http-port", str(port),
                        "--grpc-port", "-1", "--poll-seconds", "0"])
open(f"{work}/server.pid", "w").write(str(srv.pid))
try:
    for _ in range(120):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2).status == 200:
                break
        except OSError:
            time.sleep(0.5)
    else:
        sys.exit("server never became ready")
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    body = json.dumps({"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()
    t0 = time.perf_counter()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/cnn/infer", body,
                                 {"Content-Type": "application/json"})
    out = json.load(urllib.request.urlopen(req, timeout=30))
    ms = (time.perf_counter() - t0) * 1000
    shape = out["outputs"][0]["shape"]
    print(json.dumps({"ok": shape == [2, 10], "shape": shape, "first_request_ms": round(ms, 1)}))
    sys.exit(0 if shape == [2, 10] else 1)
finally:
    srv.terminate()
    srv.wait(timeout=30)
PY
step serve-cuda 180 "$PY" "$WORK/serve_smoke.py" "$WORK" "$PY"

echo
printf '%-16s %-6s %s\n' step rc seconds | tee "$RESULTS/summary.txt"
fail=0
for i in "${!NAMES[@]}"; do
  printf '%-16s %-6s %s\n' "${NAMES[$i]}" "${RCS[$i]}" "${SECS[$i]}" | tee -a "$RESULTS/summary.txt"
  [ "${RCS[$i]}" = 0 ] || fail=1
done
echo "results in $RESULTS"
exit $fail
