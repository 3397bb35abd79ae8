"""`import fwx` and `fwx --help` must not import torch or TensorFlow (they cost seconds)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "tensorflow", "keras", "onnxruntime", "onnx", "ai_edge_litert", "grpc", "fastapi", "starlette")


def _loaded_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json; print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    import json

    return set(json.loads(out.strip().splitlines()[-1]))


def test_import_fwx_is_light() -> None:
    loaded = _loaded_after(
        "import fwx, fwx.formats, fwx.signature, fwx.manifest, fwx.repository, fwx.runtimes, fwx.converters.plan"
    )
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_help_is_light() -> None:
    code = (
        "import sys\nfrom fwx.cli import cli\n"
        "try:\n    cli.main(args=['--help'], prog_name='fwx', standalone_mode=False)\nexcept SystemExit:\n    pass"
    )
    loaded = _loaded_after(code)
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_every_command_help_is_light() -> None:
    from fwx.cli import COMMANDS

    for name in COMMANDS:
        code = (
            "from fwx.cli import cli\n"
            f"try:\n    cli.main(args=['{name}', '--help'], prog_name='fwx', standalone_mode=False)\n"
            "except SystemExit:\n    pass"
        )
        loaded = _loaded_after(code)
        assert not loaded & set(HEAVY), (name, loaded & set(HEAVY))


def test_help_lists_commands() -> None:
    out = subprocess.run([sys.executable, "-m", "fwx", "--help"], capture_output=True, text=True, check=True).stdout
    for name in ("export", "validate", "inspect", "serve", "dockerize"):
        assert name in out
