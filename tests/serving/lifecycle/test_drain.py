"""SIGTERM drains: every request sent before the signal is answered 200, new connections are refused, exit 0.

Deterministic by construction: one model run at a time (``--max-batch-size 1``)
on a slow model, so the requests are provably still waiting when the signal
lands (the server's own queue gauge says so), and the second request of each
pipelined pair cannot even start before its first is answered, after the signal.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path
from typing import Any, BinaryIO

import pytest
import serving_models
from lifecycle_helpers import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ITERATIONS = 200_000  # ~0.2 s per run of the sleepy model


def _request(x: float) -> bytes:
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [x]}]}).encode()
    head = "POST /v2/models/sleepy/infer HTTP/1.1\r\nHost: fwx\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def _response(stream: BinaryIO) -> tuple[int | None, Any]:
    """One HTTP/1.1 response off a connection (status, JSON body), or (None, why) if the server closed it."""
    status_line = stream.readline()
    if not status_line:
        return None, "closed without a response"
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return int(status_line.split()[1]), json.loads(stream.read(length))


def _refused(port: int) -> bool:
    """New connections are refused soon after the signal (bounded loop; a connection that got in is closed)."""
    for _ in range(2000):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return True
        time.sleep(0.01)
    return False


def _grpc_calls(port: int, n: int) -> tuple[Any, list[Any]]:
    import grpc
    import numpy as np

    from fwx.serving.proto import grpc_service_pb2 as pb
    from fwx.serving.proto import grpc_service_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    futures = []
    for i in range(n):
        req = pb.ModelInferRequest(model_name="sleepy")
        req.inputs.add(name="x", datatype="FP32", shape=[1, 1])
        req.raw_input_contents.append(np.array([[100.0 + i]], np.float32).tobytes())
        futures.append(stub.ModelInfer.future(req, timeout=120))
    return channel, futures


def test_sigterm_answers_every_request_sent_before_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    serving_models.publish(repo, "sleepy", *serving_models.build_sleepy(ITERATIONS))
    args = ("--max-batch-size", "1", "--drain-seconds", "60", "--poll-seconds", "0", "--request-timeout-seconds", "0")
    server = ServerProcess(repo, tmp_path / "serve.log", *args, grpc=True)
    try:
        code, answers, grpc_answers, refused = _sigterm_under_load(server)
    finally:
        server.stop()
    bad = {x: a for x, a in answers.items() if a[0] != 200}
    assert bad == {}, bad
    assert all(a[1]["outputs"][0]["data"] == [x] for x, a in answers.items())  # y = x
    assert grpc_answers == [[100.0], [101.0]]
    assert refused, "the listener still accepted new connections during the drain"
    assert code == 0


def _sigterm_under_load(server: ServerProcess) -> tuple[int, dict[float, Any], list[Any], bool]:
    import numpy as np

    proc, http_port, grpc_port = server.proc, server.http_port, server.grpc_port
    server.wait_ready(120)
    url = f"http://127.0.0.1:{http_port}"
    idle = [socket.create_connection(("127.0.0.1", http_port)) for _ in range(3)]
    idle_streams = [s.makefile("rb") for s in idle]
    for i, (sock, stream) in enumerate(zip(idle, idle_streams, strict=True)):  # open keep-alive connections, idle now
        sock.sendall(_request(float(i)))
        assert _response(stream)[0] == 200
    pipelined = [socket.create_connection(("127.0.0.1", http_port)) for _ in range(4)]
    for i, sock in enumerate(pipelined):  # two requests back to back on each connection
        sock.sendall(_request(10.0 + i) + _request(20.0 + i))
    channel, futures = _grpc_calls(grpc_port, 2)
    serving_models.wait_queued(url, 5)  # 4 + 2 first requests: one running, five waiting
    for i, sock in enumerate(idle):  # a request on each idle connection, then at once the signal
        sock.sendall(_request(30.0 + i))
    proc.send_signal(signal.SIGTERM)
    refused = _refused(http_port)

    answers: dict[float, Any] = {}
    for i, sock in enumerate(pipelined):
        stream = sock.makefile("rb")
        for x in (10.0 + i, 20.0 + i):
            answers[x] = _response(stream)
    for i, stream in enumerate(idle_streams):
        answers[30.0 + i] = _response(stream)
    grpc_answers = [np.frombuffer(f.result().raw_output_contents[0], np.float32).tolist() for f in futures]
    code = proc.wait(120)
    channel.close()
    for sock in idle + pipelined:
        sock.close()
    return code, answers, grpc_answers, refused
