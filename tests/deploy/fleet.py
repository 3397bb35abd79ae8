"""Real processes for the rolling-update test: ``fwx serve`` replicas and an nginx in front of them.

nginx plays the Kubernetes Service + ingress: its upstream list is the
endpoint list, rewritten and reloaded (``nginx -s reload``, graceful) when a
replica joins or leaves, and it retries the next upstream on connect errors,
timeouts and 503, POST included (``non_idempotent``), like an ingress does.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)


@dataclass
class Replica:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/v2/health/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            if self.ready():
                return
            time.sleep(0.05)
        raise AssertionError(f"{self.name} not ready after {timeout}s: {self.log.read_text()[-2000:]}")


@dataclass
class Fleet:
    repo: Path
    workdir: Path
    serve_args: list[str]
    replicas: list[Replica] = field(default_factory=list)
    _count: int = 0

    def start(self) -> Replica:
        self._count += 1
        name = f"replica-{self._count}"
        port = free_port()
        log = self.workdir / f"{name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "POD_NAME": name}
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fwx",
                    "serve",
                    str(self.repo),
                    "--http-port",
                    str(port),
                    "--grpc-port",
                    "-1",
                    *self.serve_args,
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
            )
        replica = Replica(name, port, proc, log)
        self.replicas.append(replica)
        return replica

    def stop_all(self) -> None:
        for r in self.replicas:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait(10)


class Nginx:
    """nginx -p DIR with its own config, on 127.0.0.1; ``set_upstreams`` rewrites and reloads it."""

    def __init__(self, workdir: Path, binary: str) -> None:
        self.dir = workdir / "nginx"
        for sub in ("logs", "tmp"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.binary = binary
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _write(self, ports: list[int]) -> None:
        d = self.dir
        servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;" for p in ports)
        user = "user root;\n" if os.geteuid() == 0 else ""  # as root, workers would drop to nobody
        (d / "nginx.conf").write_text(f"""{user}worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/logs/error.log warn;
events {{ worker_connections 512; }}
http {{
    log_format up '$status $request_time "$upstream_addr" "$upstream_status"';
    access_log {d}/logs/access.log up;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    upstream fwx {{
{servers}
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
            proxy_pass http://fwx;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_connect_timeout 1s;
            proxy_read_timeout 30s;
            proxy_next_upstream error timeout http_503 non_idempotent;
            proxy_next_upstream_tries 8;
            proxy_next_upstream_timeout 15s;
        }}
    }}
}}
""")

    def start(self, ports: list[int]) -> None:
        self._write(ports)
        self.proc = subprocess.Popen(
            [self.binary, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("nginx did not start: " + (self.dir / "logs" / "error.log").read_text())

    def set_upstreams(self, ports: list[int]) -> None:
        """Like an endpoints update: graceful reload, old workers finish what they proxy."""
        self._write(ports)
        assert self.proc is not None
        self.proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def retried(self) -> int:
        """Requests nginx sent to more than one upstream (its access log lists each try)."""
        log = self.dir / "logs" / "access.log"
        return sum(1 for line in log.read_text().splitlines() if "," in line.split('"')[1])
