"""A chunked body declaring an absurd chunk size is answered at once and the connection closed."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fwx.serving.rest.chunk_guard import ChunkScanner

LIMIT = 1 << 20
BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]}).encode()
HEAD = b"POST /v2/models/linear/infer HTTP/1.1\r\nHost: fwx\r\n"


def _chunked(body: bytes, trailers: bytes = b"") -> bytes:
    mid = len(body) // 2
    parts = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in (body[:mid], body[mid:]))
    return HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + parts + b"0\r\n" + trailers + b"\r\n"


def _sized(body: bytes) -> bytes:
    return HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, make_repo: Callable[..., Path], live_server: Any) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("chunks") / "repo", {"linear": "linear"})
    return live_server(repo, load_probe=False, max_body_bytes=LIMIT)


def _exchange(srv: Any, payload: bytes) -> tuple[bytes, bytes]:
    """Send ``payload`` and read until the server closes: (everything received, b"" once closed)."""
    with socket.create_connection(("127.0.0.1", srv.server.http_port), timeout=10) as s:
        s.sendall(payload)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        return got, chunk


@pytest.mark.parametrize(
    ("size", "status"), [(b"FFFFFFFFFFFFFFFF", 400), (b"1FFFFFFFFFFFFFFFF", 400), (b"%x" % (LIMIT + 1), 413)]
)
def test_absurd_chunk_size_is_answered_and_closed(srv: Any, size: bytes, status: int) -> None:
    got, tail = _exchange(srv, HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + size + b"\r\nabc")
    assert got.startswith(b"HTTP/1.1 %d" % status), got[:80]
    assert b"connection: close" in got.lower()
    assert b"chunk" in got.split(b"\r\n\r\n", 1)[1]
    assert tail == b""  # the server closed the connection


def test_keep_alive_mix_of_sized_and_chunked_requests_is_untouched(srv: Any) -> None:
    stream = _sized(BODY) + _chunked(BODY, b"X-Trailer: 1\r\n") + _chunked(BODY) + _sized(BODY)
    with socket.create_connection(("127.0.0.1", srv.server.http_port), timeout=10) as s:
        for i in range(0, len(stream), 7):  # odd-sized pieces cross every boundary
            s.sendall(stream[i : i + 7])
        got = b""
        while got.count(b'"data":[9.0]') < 4:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
    assert got.count(b"HTTP/1.1 200") == 4


def test_scanner_follows_framing_byte_by_byte() -> None:
    scanner = ChunkScanner(LIMIT)
    stream = _sized(BODY) + _chunked(BODY, b"A: b\r\n") + _sized(b"") + _chunked(BODY)
    for i in range(len(stream)):
        assert scanner.feed(stream[i : i + 1]) is None
    assert scanner.active
    verdict = None
    for byte in HEAD + b"Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFF\r\n":
        verdict = verdict or scanner.feed(bytes([byte]))
    assert verdict is not None
    assert verdict[0] == 400


def test_scanner_steps_aside_on_what_it_does_not_follow() -> None:
    scanner = ChunkScanner(LIMIT)
    assert scanner.feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n") is None
    assert not scanner.active
