"""Run several ``fwx`` command lines in ONE child process, each through ``fwx.cli.main``.

The hostile corpus needs ~30 command runs; paying the torch/TF import once
keeps the standing check near a minute on 2 cores. Each run gets its own
captured stdout/stderr and exit code, exactly as the CLI would give them.
Usage: ``python cli_batch.py commands.json results.json``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any


def run(argv: list[str]) -> dict[str, Any]:
    from fwx.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: int = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return {"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        commands = json.load(fh)
    results = [run(argv) for argv in commands]
    with open(sys.argv[2], "w", encoding="utf-8") as fh:
        json.dump(results, fh)
