"""The second wall: with the scanners switched off on purpose, the Landlock sandbox alone stops a hostile model.

Each case runs the real ``fwx`` command line in its own process (the sandbox
applies only to a process that runs one command). The scanners are bypassed by
the test's own launcher script, which replaces ``fwx.safety``'s checks with
no-ops before calling ``fwx.cli.main``: no switch in fwx itself turns them off.
The hostile SavedModel writes a sentinel file and reads a secret file outside
everything the command may touch; both must fail inside the kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fwx.safety import landlock, snapshot

pytestmark = pytest.mark.skipif(landlock.abi_version() < 1, reason="the kernel offers no Landlock")
ROOT = Path(__file__).resolve().parents[2]
SECRET = "fwx-host-secret-7c1e"

#: The test's launcher: scanners off (the bypass under test), then the real CLI entry point.
LAUNCHER = textwrap.dedent(
    """
    import sys
    import fwx.safety  # light: no numpy, no framework, no thread (the sandbox needs a one-thread process)
    def nothing(*args, **kwargs):
        return None
    fwx.safety.check_model = nothing  # modules importing it later bind this one
    from fwx.cli import main
    sys.argv = ["fwx", *sys.argv[1:]]
    main()
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}


def _fwx(tmp: Path, *args: str, bypass: bool = True) -> subprocess.CompletedProcess[str]:
    launcher = tmp / "launch.py"
    launcher.write_text(LAUNCHER)
    cmd = [sys.executable, str(launcher), *args] if bypass else [sys.executable, "-m", "fwx", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=tmp, timeout=600, check=False)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A SavedModel whose serving signature writes ``sentinel/pwned`` and returns the secret file's bytes."""
    tf = pytest.importorskip("tensorflow")
    base = tmp_path_factory.mktemp("sandbox")
    secret = base / "host" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    sentinel = base / "sentinel"
    sentinel.mkdir()
    target, source = str(sentinel / "pwned"), str(secret)
    neighbour = base / "repo" / "neighbour"  # another model's folder in the repository the export writes to
    neighbour.mkdir(parents=True)
    beside = str(neighbour / "pwned")

    class Thief(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x: Any) -> Any:
            tf.io.write_file(beside, "pwned")
            tf.io.write_file(target, "pwned")
            stolen = tf.io.read_file(source)
            return {"y": x * 2.0, "leak": tf.strings.unicode_decode(stolen, "UTF-8")}

    model = base / "thief.savedmodel"
    mod = Thief()
    tf.saved_model.save(mod, str(model), signatures={"serving_default": mod.serve})
    twin = base / "twin" / "thief.savedmodel"
    shutil.copytree(model, twin)  # validate compares two artifacts
    return {"model": model, "twin": twin, "sentinel": sentinel, "secret": secret, "base": base, "repo": base / "repo"}


def _no_escape(h: dict[str, Path], *texts: str) -> None:
    assert list(h["sentinel"].iterdir()) == [], "the hostile model wrote a host file"
    assert list((h["repo"] / "neighbour").iterdir()) == [], "the hostile model wrote into another model's folder"
    for text in texts:
        assert SECRET not in text
        assert str([ord(c) for c in SECRET[:6]])[1:-1] not in text  # nor the secret as code points


def _artifacts_hold_no_secret(out: Path) -> None:
    for f in out.rglob("*") if out.exists() else ():
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f"{f} holds the host secret"


@pytest.mark.slow
def test_the_sandbox_alone_stops_export(hostile: dict[str, Path], tmp_path: Path) -> None:
    out = hostile["repo"]  # the export may write its own model's folder there, and nothing else
    proc = _fwx(tmp_path, "export", str(hostile["model"]), "--to", "savedmodel", "--out", str(out), "--require-sandbox")
    _no_escape(hostile, proc.stdout, proc.stderr)
    _artifacts_hold_no_secret(out)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "permissiondenied" in proc.stderr.lower().replace(" ", ""), proc.stderr  # the kernel's answer


@pytest.mark.slow
def test_the_sandbox_alone_stops_validate(hostile: dict[str, Path], tmp_path: Path) -> None:
    # validate runs the SavedModel itself: the signature's WriteFile and ReadFile execute, in the kernel's hands
    proc = _fwx(tmp_path, "validate", str(hostile["model"]), str(hostile["twin"]), "--require-sandbox")
    _no_escape(hostile, proc.stdout, proc.stderr)
    assert proc.returncode != 0
    assert "permissiondenied" in (proc.stdout + proc.stderr).lower().replace(" ", ""), proc.stdout + proc.stderr


@pytest.mark.slow
def test_without_the_bypass_the_scanner_refuses_first(hostile: dict[str, Path], tmp_path: Path) -> None:
    proc = _fwx(tmp_path, "export", str(hostile["model"]), "--to", "savedmodel", "--out", "a", bypass=False)
    _no_escape(hostile, proc.stdout, proc.stderr)
    assert proc.returncode != 0
    assert str(hostile["model"]) in proc.stderr
    assert "fwx-snapshot" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "WriteFile" in errors[0]


def test_landlock_denies_what_the_rules_do_not_name(tmp_path: Path) -> None:
    """The ctypes layer on this kernel: a denied read, a denied write, a denied connect; the granted ones work."""
    allowed, secret = tmp_path / "allowed", tmp_path / "secret.txt"
    allowed.mkdir()
    secret.write_text(SECRET)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        script = textwrap.dedent(
            f"""
            import json, socket, sys
            from pathlib import Path
            from fwx.safety import landlock, sandbox
            rules = landlock.Rules(read=tuple(sandbox.environment_reads()), write=(Path({str(allowed)!r}),))
            landlock.restrict(rules)
            out = {{}}
            for key, act in (
                ("read", lambda: open({str(secret)!r}).read()),
                ("write", lambda: open({str(tmp_path / "w.txt")!r}, "w").write("x")),
                ("granted", lambda: open({str(allowed / "ok.txt")!r}, "w").write("x")),
                ("connect", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=5)),
            ):
                try:
                    act()
                    out[key] = "ok"
                except OSError as exc:
                    out[key] = exc.errno
            print(json.dumps(out))
            """
        )
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=_env(), timeout=60, check=True
        )
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    import errno

    assert got == {"read": errno.EACCES, "write": errno.EACCES, "granted": "ok", "connect": errno.EACCES}
    assert not (tmp_path / "w.txt").exists()


def test_landlock_refuses_a_process_with_threads() -> None:
    """Below ABI 8 a restriction covers one thread: fwx refuses rather than leave the others outside."""
    script = textwrap.dedent(
        """
        import threading, time
        from fwx.safety import landlock
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
        try:
            landlock.restrict(landlock.Rules())
            print("restricted")
        except landlock.LandlockError as exc:
            print("refused", exc.errno)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(), check=True)
    if landlock.abi_version() < 8:
        assert proc.stdout.split()[0] == "refused"


def test_in_process_calls_fail_closed_with_require_sandbox(hostile: dict[str, Path], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fwx.cli import cli

    res = CliRunner().invoke(cli, ["inspect", str(hostile["model"]), "--require-sandbox"])
    assert res.exit_code != 0
    assert "cannot sandbox" in str(res.exception) + res.output


def test_snapshot_refuses_links_out_and_keeps_links_in(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(b"graph")
    (model / "alias.pb").symlink_to(model / "saved_model.pb")  # inside the folder: copied as a file
    snap = snapshot.take(model)
    try:
        assert (snap.path / "alias.pb").read_bytes() == b"graph"
        assert not (snap.path / "alias.pb").is_symlink()
        assert oct(snap.root.stat().st_mode & 0o777) == "0o700"
    finally:
        snap.discard()
    (model / "assets").mkdir()
    (model / "assets" / "vocab.txt").symlink_to("/etc/hostname")
    with pytest.raises(Exception, match="symbolic link"):
        snapshot.take(model)
    (model / "assets" / "vocab.txt").unlink()
    os.link(
        tmp_path / "outside.txt" if (tmp_path / "outside.txt").exists() else _touch(tmp_path / "outside.txt"),
        model / "assets" / "vocab.txt",
    )
    with pytest.raises(Exception, match="hard link"):
        snapshot.take(model)


def _touch(p: Path) -> Path:
    p.write_text("outside")
    return p


def test_the_loaded_bytes_are_the_checked_bytes(tmp_path: Path) -> None:
    """A swap after the check cannot reach the loader: every later read of that load is of its private copy;
    a new call admits the file afresh (an edited model is the new model), into a copy of its own."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    def model(scale: float) -> bytes:
        node = helper.make_node("Mul", ["x", "s"], ["y"])
        s = helper.make_tensor("s", TensorProto.FLOAT, [1], [scale])
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
        graph = helper.make_graph([node], "g", [x], [y], [s])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    path = tmp_path / "m.onnx"
    path.write_bytes(model(2.0))
    from fwx.sources.load import load_source

    first = load_source(path)
    path.write_bytes(model(-1.0))  # the swap, after fwx read and checked the file
    assert first.path != path
    assert onnx.load(str(first.path)).graph.initializer[0].float_data[0] == 2.0
    again = load_source(path)
    assert again.path != first.path
    assert onnx.load(str(first.path)).graph.initializer[0].float_data[0] == 2.0  # the first load's copy stands
    assert onnx.load(str(again.path)).graph.initializer[0].float_data[0] == -1.0
    snapshot.discard_all()
