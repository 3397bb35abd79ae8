"""tests/ci_skips.py: in CI (CI=true) an importorskip of a package the Makefile installs fails; elsewhere it skips."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
TESTS = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
sys.modules["yaml"] = None  # installed by the Makefile, made unimportable here
from ci_skips import pytest_make_collect_report, pytest_runtest_makereport
"""
TESTS_FILE = """
import pytest

def test_needs_yaml():
    pytest.importorskip("yaml")

def test_needs_an_optional_package():
    pytest.importorskip("a_package_the_makefile_does_not_install")
"""
MODULE_LEVEL = """
import pytest
pytest.importorskip("yaml")

def test_never_runs():
    pass
"""


@pytest.mark.parametrize(("ci", "failed", "skipped"), [("true", 1, 1), ("", 0, 2)])
def test_a_makefile_package_that_will_not_import_fails_only_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, failed: int, skipped: int
) -> None:
    monkeypatch.setenv("CI", ci)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_it=TESTS_FILE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=failed, skipped=skipped)
    if failed:
        result.stdout.fnmatch_lines(["*CI=true: skipped because 'yaml' does not import*"])


def test_a_module_level_importorskip_fails_collection_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_mod=MODULE_LEVEL)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*CI=true: skipped because 'yaml' does not import*"])
