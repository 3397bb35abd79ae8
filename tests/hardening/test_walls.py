"""The walls around the loader: code that runs inside it tries to get out, and each attempt fails in the kernel.

The attacker is the test's launcher (as in test_sandbox.py): it replaces
``fwx.safety.check_model`` with a payload before calling the real CLI, so the
payload runs exactly where a model's code would, inside the loader process,
after every wall is up. It tries each way out and prints what happened; the
test checks both sides: the payload's own record (the attempt ran and was
refused) and the host (the listener got nothing, no file appeared, no secret
was printed). ``--no-sandbox`` runs the same payload with the walls down, to
show that the attempts are real.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from fwx.safety import landlock, limits, walls

pytestmark = pytest.mark.skipif(landlock.abi_version() < 1, reason="the kernel offers no Landlock")
ROOT = Path(__file__).resolve().parents[2]
SECRET = "fwx-walls-secret-51d0"
MARK = "FWX-WALLS-PAYLOAD "

#: The attacks, run inside the loader where a model's code would run (fwx.safety.check_model's place).
PAYLOAD = textwrap.dedent(
    """
    import json, os, socket, sys
    PARENT = os.getppid()  # the fwx process that started this loader (read before the walls go up)
    CFG = json.loads({cfg!r})

    def attacks(*args, **kwargs):
        out = {{"pid": os.getpid(), "environ": dict(os.environ)}}
        out["self_environ"] = open("/proc/self/environ", "rb").read().decode(errors="replace")
        out["procs"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())

        def attempt(name, act):
            try:
                got = act()
                out[name] = "DONE " + (got if isinstance(got, str) else "")
            except OSError as exc:
                out[name] = f"refused {{exc.errno}} {{exc.strerror}}"

        def udp():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"leak", ("127.0.0.1", CFG["udp"]))

        def tcp():
            with socket.create_connection(("127.0.0.1", CFG["tcp"]), timeout=5) as s:
                s.sendall(b"leak")

        def unix():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(CFG["unix"])
                s.sendall(b"leak")

        attempt("read_home", lambda: open(CFG["home_secret"]).read())
        attempt("read_sibling", lambda: open(CFG["sibling_secret"]).read())
        attempt("read_parent_environ", lambda: open(f"/proc/{{PARENT}}/environ", "rb").read().decode(errors="replace"))
        attempt("write_home", lambda: open(CFG["home_write"], "w").write("pwned") and "")
        attempt("write_shm", lambda: open(CFG["shm_write"], "w").write("pwned") and "")
        attempt("udp", udp)
        attempt("tcp", tcp)
        attempt("unix", unix)
        attempt("signal_parent", lambda: os.kill(PARENT, 0))
        print({mark!r} + json.dumps(out), flush=True)
        if CFG["then"] == "allocate":
            print("allocating", flush=True)
            hog = bytearray(10 * 10**9)  # 10 GB
            print("allocated", len(hog), flush=True)
        elif CFG["then"] == "spin":
            print("spinning", flush=True)
            while True:
                pass
        elif CFG["then"] == "spin-in-c":
            import itertools
            print("spinning", flush=True)
            sum(itertools.repeat(1))  # never returns to the interpreter's signal check

    {prelude}
    import fwx.safety
    fwx.safety.check_model = attacks
    from fwx.cli import main
    sys.argv = ["fwx", *sys.argv[1:]]
    main()
    """
)


class Host:
    """Everything the payload aims at, on the host side, and the means to check it stayed untouched."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.home = base / "home"
        self.home.mkdir()
        (self.home / "secret.txt").write_text(SECRET)
        (base / "sibling").mkdir()
        (base / "sibling" / "secret.txt").write_text(SECRET)
        self.model = _tiny_onnx(base / "model" / "model.onnx")
        self.shm = Path("/dev/shm") / f"fwx-walls-{uuid.uuid4().hex}"
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen()
        self.unix_path = base / "s.sock"
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(str(self.unix_path))
        self.unix.listen()
        for s in (self.udp, self.tcp, self.unix):
            s.setblocking(False)

    def close(self) -> None:
        for s in (self.udp, self.tcp, self.unix):
            s.close()
        self.shm.unlink(missing_ok=True)

    def config(self, then: str) -> dict[str, Any]:
        return {
            "home_secret": str(self.home / "secret.txt"),
            "sibling_secret": str(self.base / "sibling" / "secret.txt"),
            "home_write": str(self.home / "pwned"),
            "shm_write": str(self.shm),
            "udp": self.udp.getsockname()[1],
            "tcp": self.tcp.getsockname()[1],
            "unix": str(self.unix_path),
            "then": then,
        }

    def fwx(self, *args: str, then: str = "", prelude: str = "") -> subprocess.CompletedProcess[str]:
        launcher = self.base / "launcher" / f"launch-{uuid.uuid4().hex[:8]}.py"  # not beside the secrets
        launcher.parent.mkdir(exist_ok=True)
        launcher.write_text(PAYLOAD.format(cfg=json.dumps(self.config(then)), mark=MARK, prelude=prelude))
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "HOME": str(self.home),
            "FWX_SERVE_TOKEN": SECRET,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "MY_API_KEY": SECRET,
        }
        cmd = [sys.executable, str(launcher), *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=self.home, timeout=300, check=False)

    def received(self) -> list[str]:
        """What reached the host's listeners (nothing may)."""
        got: list[str] = []
        with contextlib.suppress(BlockingIOError):
            got.append(f"udp {self.udp.recv(64)!r}")
        for server in (self.tcp, self.unix):
            try:
                conn, _ = server.accept()
                got.append(f"connection on {server.family.name}")
                conn.close()
            except BlockingIOError:
                pass
        return got


def _tiny_onnx(path: Path) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("Mul", ["x", "s"], ["y"])
    s = helper.make_tensor("s", TensorProto.FLOAT, [1], [2.0])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([node], "g", [x], [y], [s])
    path.parent.mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture
def host(tmp_path: Path) -> Any:
    h = Host(tmp_path)
    yield h
    h.close()


def _payload(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    assert lines, f"the payload never ran:\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, Any] = json.loads(lines[-1][len(MARK) :])
    return result


ATTACKS = ("read_home", "read_sibling", "read_parent_environ", "write_home", "udp", "tcp", "unix", "signal_parent")


@pytest.mark.parametrize("trust", [False, True], ids=["untrusted", "trust-model-code"])
def test_nothing_gets_out_of_the_loader(host: Host, trust: bool) -> None:
    proc = host.fwx("inspect", str(host.model), "--json", *(["--trust-model-code"] if trust else []))
    got = _payload(proc)
    assert proc.returncode == 0, proc.stderr
    refused = {name: got[name] for name in ATTACKS if not got[name].startswith("refused")}
    assert not refused, f"got out: {refused}"
    assert host.received() == []
    assert not (host.home / "pwned").exists()
    assert not host.shm.exists(), "a file written in the loader's /dev/shm reached the host's"
    everything = proc.stdout + proc.stderr + got["self_environ"] + json.dumps(got["environ"])
    assert SECRET not in everything
    assert got["environ"].get("HOME") != str(host.home)
    doc = json.loads(proc.stdout[proc.stdout.index("{", proc.stdout.index("\n", proc.stdout.index(MARK))) :])
    report = doc["walls"]
    assert report["walls"]["landlock"]["up"]
    assert report["walls"]["memory"]["up"]
    assert report["walls"]["cpu-time"]["up"]
    if report["walls"]["proc"]["up"]:
        assert got["procs"] == [1, got["pid"]], got["procs"]  # only the namespace's init and the loader itself


#: What Docker's default seccomp profile does to fwx: ``unshare`` fails with EPERM (no namespaces).
LIKE_DOCKER = "from fwx.safety import seccomp; seccomp.install({'unshare': 1})"


def test_without_namespaces_the_other_walls_still_hold(host: Host) -> None:
    """As in a container: no namespaces, so seccomp keeps the network shut and Landlock the rest; the report
    names what is missing, and --require-sandbox refuses."""
    proc = host.fwx("inspect", str(host.model), "--json", prelude=LIKE_DOCKER)
    got = _payload(proc)
    assert proc.returncode == 0, proc.stderr
    refused = {name: got[name] for name in (*ATTACKS, "write_shm") if not got[name].startswith("refused")}
    assert not refused, f"got out: {refused}"
    assert host.received() == []
    assert not host.shm.exists()
    assert SECRET not in proc.stdout + proc.stderr + got["self_environ"] + json.dumps(got["environ"])
    assert len(got["procs"]) > 1  # the host's process table: the PID namespace really is missing
    doc = json.loads(proc.stdout[proc.stdout.index("{", proc.stdout.index("\n", proc.stdout.index(MARK))) :])
    report = doc["walls"]
    assert report["missing"] == ["proc"]
    assert "unshare" in report["walls"]["proc"]["detail"]
    assert report["walls"]["network"]["detail"] == "seccomp"
    strict = host.fwx("inspect", str(host.model), "--require-sandbox", prelude=LIKE_DOCKER)
    assert strict.returncode == 2
    assert "missing walls: proc" in _one_error(strict)
    assert MARK not in strict.stdout  # refused before anything was loaded


def test_the_attempts_are_real_without_the_walls(host: Host) -> None:
    """The same payload with --no-sandbox: the reads and writes succeed, so the test above can fail."""
    proc = host.fwx("inspect", str(host.model), "--no-sandbox")
    got = _payload(proc)
    assert "--no-sandbox" in proc.stderr
    assert "every wall down" in proc.stderr
    assert got["read_sibling"] == "DONE " + SECRET
    assert got["read_home"] == "DONE " + SECRET
    assert (host.home / "pwned").read_text() == "pwned"
    assert got["udp"].startswith("DONE")
    assert any(r.startswith("udp") for r in host.received())
    assert "walls: NONE (--no-sandbox)" in proc.stdout


def _one_error(proc: subprocess.CompletedProcess[str]) -> str:
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return errors[0]


def test_a_memory_bomb_ends_at_the_memory_limit(host: Host) -> None:
    proc = host.fwx("inspect", str(host.model), then="allocate")
    _payload(proc)
    assert "allocating" in proc.stdout
    assert "allocated" not in proc.stdout
    assert proc.returncode == 1
    line = _one_error(proc)
    assert "memory limit" in line
    assert limits.size_text(limits.default_memory()) in line
    assert limits.MEMORY_OPTION in proc.stderr  # the hint names the option that raises it


@pytest.mark.parametrize("where", ["spin", "spin-in-c"])
def test_an_endless_loop_ends_at_the_cpu_time_limit(host: Host, where: str) -> None:
    proc = host.fwx("inspect", str(host.model), "--cpu-time-limit", "2s", then=where)
    _payload(proc)
    assert "spinning" in proc.stdout
    assert proc.returncode == 1
    line = _one_error(proc)
    assert "CPU-time limit (2s" in line
    assert limits.CPU_OPTION in proc.stderr


def test_require_sandbox_holds_where_every_wall_is_up(host: Host) -> None:
    proc = host.fwx("inspect", str(host.model), "--require-sandbox")
    if proc.returncode != 0:  # a machine missing a wall must say which, in one line
        assert "missing walls" in _one_error(proc) or "cannot sandbox" in proc.stderr
        return
    assert "walls: landlock ABI" in proc.stdout


def test_no_sandbox_contradicts_require_sandbox(host: Host) -> None:
    proc = host.fwx("inspect", str(host.model), "--no-sandbox", "--require-sandbox")
    assert proc.returncode == 2
    assert "contradict" in _one_error(proc)


def test_exit_codes_are_the_commands_own(tmp_path: Path) -> None:
    """A missing model is a usage error (2) whether it is reported by the loader or in-process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    missing = str(tmp_path / "nope.onnx")
    walled = subprocess.run([sys.executable, "-m", "fwx", "inspect", missing], capture_output=True, text=True, env=env)
    bare = subprocess.run(
        [sys.executable, "-m", "fwx", "inspect", missing, "--no-sandbox"], capture_output=True, text=True, env=env
    )
    assert walled.returncode == bare.returncode != 0
    assert _one_error(walled) == _one_error(bare)


def test_the_environment_keeps_what_frameworks_need_and_no_secret() -> None:
    env = {
        "PATH": "/usr/bin",
        "LC_ALL": "C",
        "OMP_NUM_THREADS": "2",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "FWX_STEP_TIMEOUT_S": "60",
        "FWX_SERVE_TOKEN": "t",
        "AWS_ACCESS_KEY_ID": "a",
        "HF_TOKEN": "h",
        "TF_VAR_db_password": "p",
        "GITHUB_TOKEN": "g",
        "DB_PASSWORD": "p",
        "HOME": "/root",
        "SSH_AUTH_SOCK": "/tmp/agent",
    }
    kept = walls.clean_environment(env)
    assert set(kept) == {"PATH", "LC_ALL", "OMP_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL", "FWX_STEP_TIMEOUT_S"}


def test_limits_are_written_with_units() -> None:
    assert limits.parse_size("8GiB") == 8 << 30
    assert limits.parse_size("512MiB") == 512 << 20
    assert limits.parse_size("2G") == 2 * 10**9
    assert limits.parse_size("none") is None
    assert limits.parse_duration("30m") == 1800
    assert limits.parse_duration("90s") == 90
    assert limits.parse_duration("2h") == 7200
    assert limits.size_text(8 << 30) == "8GiB"
    assert limits.duration_text(1800) == "30m"
    for bad in ("8 parsecs", "-1GiB", "1KiB"):
        with pytest.raises(ValueError, match="size|too small"):
            limits.parse_size(bad)


def test_a_process_that_serves_keeps_its_network_and_every_other_wall(tmp_path: Path) -> None:
    """The walls as a server's worker takes them (``Walls(network=False)``): it may still bind its port and
    create TCP sockets, nothing else (seccomp), and the others stand."""
    script = textwrap.dedent(
        """
        import json, socket
        from fwx.safety import limits, sandbox, walls
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # the worker's own port, granted below
        want = walls.Walls(limits=limits.PROBE, network=False)
        iso = walls.enter(want)
        sandbox.enter(sandbox.Policy(bind_ports=(port,), shm=iso.shm), what="a test worker")
        report = walls.finish(iso, want, sandbox.status.abi, sandbox.status.reason)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen()
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        except PermissionError:
            pass
        else:
            raise SystemExit("a UDP socket was created")
        print(json.dumps(report.as_json()))
        """
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    network = report["walls"]["network"]
    assert network["up"] == (landlock.abi_version() >= 4), network
    assert network["detail"].startswith("serves its own TCP ports only (seccomp") or not network["up"]
    assert report["walls"]["environment"]["up"]
    assert report["walls"]["memory"]["detail"] == "2GiB"
