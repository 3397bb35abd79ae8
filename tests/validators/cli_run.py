"""``fwx`` run in process for the validator tests: (exit code, what it printed on stdout and stderr)."""

from __future__ import annotations

import pytest

from fwx.cli import main


def fwx_cli(args: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out + err
