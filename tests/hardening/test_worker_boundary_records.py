"""The run folder's records as untrusted input, the workers' environment, and the tokens' hiding places."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fwx.errors import UsageError
from fwx.formats import Format
from fwx.serving.config import ServerConfig
from fwx.serving.runstate import LoadMark, RunState, artifact_key, describe_key
from fwx.serving.secrets import read_token_file
from fwx.serving.spawn import worker_env
from fwx.serving.supervisor import Supervisor


@pytest.mark.parametrize(
    "raw",
    [
        b'{"key": "onnx:/r/m/1/model.onnx:1:2", "what": "x", "since": "not-a-number"}',
        b'{"key": 5, "seq": 1}',
        b'{"key": "k", "seq": -1}',
        b'{"key": "k", "seq": true}',
        b'{"key": "k\\n", "seq": 1}',
        b"[]",
        b"\xff\xfe",
        b"[" * 100_000,
    ],
)
def test_a_malformed_loading_mark_is_refused(raw: bytes) -> None:
    with pytest.raises((ValueError, RecursionError)):
        LoadMark.parse(raw)


def test_a_key_must_name_an_artifact_inside_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "lin" / "2").mkdir(parents=True)
    (repo / "lin" / "2" / "model.onnx").write_bytes(b"x")
    key = artifact_key(Format.ONNX, repo / "lin" / "2" / "model.onnx")
    assert describe_key(key, repo) == "lin v2 model.onnx (onnx)"
    assert describe_key(key.replace("onnx:", "nope:", 1), repo) is None
    assert describe_key(f"onnx:{tmp_path}/elsewhere/model.onnx:1:2", repo) is None
    assert describe_key(f"onnx:{repo}/../x/model.onnx:1:2", repo) is None


def test_the_supervisor_shrugs_off_what_a_worker_leaves_in_its_folder(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    run = tmp_path / "run"
    sup = Supervisor(ServerConfig(repository=repo), run)
    try:
        own = sup.state.slot_dir(0)
        (own / "loading").write_bytes(b'{"key": "k", "since": "not-a-number"}')
        assert sup.state.current_load(0) is None
        (own / "loading").unlink()
        os.symlink(run / "quarantine.json", own / "loading")  # a link is never followed
        assert sup.state.current_load(0) is None
        (own / "ready").unlink()
        os.symlink(run / "board", own / "ready")
        sup.state.set_all_ready(True)
        assert not sup.state.worker_ready(0)
        (own / "metrics.prom").write_bytes(b"x" * (9 * 2**20))  # past the cap: ignored, not read
        assert sup.state.metrics_of(0) is None
        sup.state.reset_slot(0)  # what a restart does: an empty folder, links gone, targets untouched
        assert sorted(p.name for p in own.iterdir()) == ["ready"]
        assert (run / "board").read_bytes() == b"\1"
        assert json.loads((run / "quarantine.json").read_text()) == {}
    finally:
        sup.close()


def test_the_supervisor_reads_a_quarantine_workers_cannot_extend(tmp_path: Path) -> None:
    state = RunState.create(tmp_path, 2)
    one = RunState.open(tmp_path, 2, 1)
    try:
        state.quarantine("onnx:/r/m/1/model.onnx:1:2", "loader crashed (SIGSEGV) on m v1 model.onnx (onnx)")
        assert one.quarantined("onnx:/r/m/1/model.onnx:1:2") == "loader crashed (SIGSEGV) on m v1 model.onnx (onnx)"
        assert one.quarantined("onnx:/r/m/2/model.onnx:1:2") is None
    finally:
        state.close()
        one.close()


def test_workers_get_an_allow_listed_environment_without_tokens() -> None:
    env = worker_env(
        1,
        {
            "PATH": "/usr/bin",
            "PYTHONPATH": "/x",
            "FWX_API_TOKEN": "a",
            "FWX_ADMIN_TOKEN": "b",
            "AWS_SECRET_ACCESS_KEY": "c",
            "HF_TOKEN": "d",
            "OMP_NUM_THREADS": "2",
            "FWX_REQUIRE_SANDBOX": "1",
        },
    )
    assert env == {"PATH": "/usr/bin", "PYTHONPATH": "/x", "OMP_NUM_THREADS": "2", "FWX_REQUIRE_SANDBOX": "1"}
    assert worker_env(1, {"PYTHONPATH": ":/a:.:rel/b:/c"})["PYTHONPATH"] == "/a:/c"  # never the start directory


def test_a_token_file_holds_one_line(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret-token\n")
    assert read_token_file(path, "--api-token-file") == "s3cret-token"
    path.write_text("one\ntwo\n")
    with pytest.raises(UsageError, match="one token on one line"):
        read_token_file(path, "--api-token-file")
    with pytest.raises(UsageError, match="cannot read"):
        read_token_file(tmp_path / "missing", "--api-token-file")


def test_the_token_leaves_no_trace_in_proc() -> None:
    code = (
        "import os,sys\n"
        "from fwx.serving.secrets import forget\n"
        "forget(('FWX_API_TOKEN',), ['tok-from-env-31', 'tok-from-argv-47'])\n"
        "env = open('/proc/self/environ','rb').read(); cmd = open('/proc/self/cmdline','rb').read()\n"
        "print(b'tok-from-env-31' in env, b'tok-from-argv-47' in cmd, 'FWX_API_TOKEN' in os.environ, sys.argv[-1])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "--api-token=tok-from-argv-47"],
        env={**os.environ, "FWX_API_TOKEN": "tok-from-env-31"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.split() == ["False", "False", "False", "--api-token=****************"]


@pytest.mark.parametrize(
    "hostile",
    [
        b'# TYPE \x1e his8ogram\nx_bucket{ls="\xabbc"} 1\n',
        b'x{a="1",\x0b="2"}\xaa1\xaa',
        b"\xff\xfe{{{\n" * 100,
        b"{" * 1000,
    ],
)
def test_a_peers_hostile_metrics_never_fail_the_scrape(hostile: bytes) -> None:
    from fwx.serving.metrics_merge import merge

    own = b'# TYPE fwx_request_success counter\nfwx_request_success_total{model="m"} 3.0\n'
    assert b'fwx_request_success_total{model="m"} 3.0' in merge([(own, True), (hostile, True)])
