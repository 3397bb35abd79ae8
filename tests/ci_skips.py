"""In CI a test that skips because a package the Makefile installs will not import is a failure.

``pytest.importorskip("onnxruntime")`` is right on a laptop with a partial install, and wrong in CI:
there the Makefile installed the package, so "could not import" means the environment is broken,
and a silent skip would hide every test behind it. With ``CI=true`` (GitHub Actions, GitLab and
most runners set it) such a skip becomes a failure naming the package. Packages the Makefile does
not install may still skip. The set comes from pyproject.toml: the dependencies and the extras
``make install`` asks for (all, dev, zoo), plus torchvision, which the Makefile installs apart.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE_EXTRAS = ("all", "dev", "zoo")
#: Distribution -> import name where they differ (the rest: lower-case, '-' -> '_').
IMPORT_NAMES = {
    "grpcio": "grpc",
    "protobuf": "google",
    "pyyaml": "yaml",
    "pillow": "PIL",
    "scikit-learn": "sklearn",
    "fwx-toolkit": "fwx",
    "py-spy": "py_spy",
}
SKIPPED_IMPORT = re.compile(r"could not import '([\w.]+)'")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _dist(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower()


@cache
def make_installed() -> frozenset[str]:
    """Top-level import names of everything ``make install`` installs."""
    import tomllib  # Python 3.11+, what CI runs (constraints.txt); 3.10 has no CI of its own

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    todo, seen, dists = list(MAKE_EXTRAS), set(), {_dist(r) for r in project["dependencies"]}
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in extras.get(extra, []):
            if _dist(req) == "fwx-toolkit":  # fwx-toolkit[torch,tf,...]: the extras it names
                todo += re.findall(r"[\w-]+", req.split("[", 1)[1]) if "[" in req else []
            else:
                dists.add(_dist(req))
    dists |= {"torchvision", "fwx-toolkit"}
    return frozenset(IMPORT_NAMES.get(d, d.replace("-", "_")) for d in dists)


def _must_not_skip(longrepr: Any) -> str | None:
    """The package a skip report blames, when it is one the Makefile installs; else None."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    m = SKIPPED_IMPORT.search(text)
    if m and m.group(1).split(".")[0] in make_installed():
        return m.group(1)
    return None


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    module = _must_not_skip(report.longrepr) if report.skipped and in_ci() else None
    if module:
        report.outcome = "failed"
        report.longrepr = (
            f"CI=true: skipped because {module!r} does not import, but the Makefile installs it "
            f"(tests/ci_skips.py); the environment is broken: {report.longrepr}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    _fail(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _fail(outcome.get_result())
