import sys, tempfile, json, statistics
from pathlib import Path
sys.path.insert(0, "/work/wt/perf/benchmarks"); sys.path.insert(0, "/work/wt/perf")
import numpy as np
from serve import start_server
from serve_grpc_client import run_load
from serve_rest_client import run_load_rest
from serve_models import MODELS, publish
name = sys.argv[1] if len(sys.argv) > 1 else "small_cnn"
build, shape = MODELS[name]
work = Path(tempfile.mkdtemp())
publish(work / "repo", name, build()[0], shape)
x = {"x": np.random.default_rng(2).standard_normal((1, *shape)).astype(np.float32)}
servers = {v: start_server(work / "repo", ["--grpc-server", v]) for v in ("aio", "sync")}
res = {}
try:
    for rep in range(3):
        for v in (("aio", "sync") if rep % 2 == 0 else ("sync", "aio")):
            p, http, grpc_url = servers[v]
            for c in (1, 32):
                r = run_load(grpc_url, name, x, concurrency=c, duration_s=4, server_pid=p.pid)
                res.setdefault(f"grpc-{v}/c{c}", []).append((r["req_per_s"], r["server_cpu_us_per_req"], r["latency_ms"]["p50"]))
            if v == "aio":
                for c in (1, 32):
                    r = run_load_rest(http, name, x, concurrency=c, duration_s=4, server_pid=p.pid)
                    res.setdefault(f"rest/c{c}", []).append((r["req_per_s"], r["server_cpu_us_per_req"], r["latency_ms"]["p50"]))
        print(rep, flush=True)
finally:
    for p, _, _ in servers.values():
        p.terminate(); p.wait(30)
out = {}
for k, runs in res.items():
    med = [statistics.median(col) for col in zip(*runs)]
    out[k] = {"runs": runs, "median": {"req_per_s": med[0], "cpu_us": med[1], "p50_ms": med[2]}}
    print(f"{k:16s} req/s {med[0]:7.0f}  CPU/req {med[1]:6.0f} us (runs {[round(r[1]) for r in runs]})  p50 {med[2]:.2f} ms")
Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/perf/ab_grpc.json").write_text(json.dumps(out, indent=1))
