"""Every command receives the ``Admitted`` value from the one boundary, and works on its private copy.

Each command is run through ``fwx.cli.main`` in this process (the loader's own
path, less the walls an in-process call cannot take): the value the command's
function receives is the ``Admitted`` that ``boundary.admit`` returned for the
path on the command line, and what it hands the library is that value's copy,
never the path the user typed.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from fwx.safety import snapshot
from fwx.sources import boundary
from fwx.sources.boundary import Admitted

onnx = pytest.importorskip("onnx")


def _linear(path: Path) -> Path:
    """y = 2x + 1 as ONNX."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
        "lin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [
            numpy_helper.from_array(np.array([2.0], np.float32), "w"),
            numpy_helper.from_array(np.array([1.0], np.float32), "b"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@contextmanager
def _arguments(**watched: tuple[Callable[..., Any] | None, str]) -> Iterator[dict[str, list[Any]]]:
    """The value of one named argument at every call of each watched function, by the label given."""
    codes = {inspect.unwrap(fn).__code__: (label, arg) for label, (fn, arg) in watched.items() if fn}
    seen: dict[str, list[Any]] = {label: [] for label in watched}

    def profile(frame: FrameType, event: str, _: object) -> None:
        if event == "call" and frame.f_code in codes:
            name, arg = codes[frame.f_code]
            seen[name].append(frame.f_locals[arg])

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def _main(*args: object) -> int:
    from fwx import ui
    from fwx.cli import main

    ui.state.json = ui.state.debug = False
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    return 0


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    yield
    snapshot.discard_all()


def _is_copy_of(value: Any, named: Path) -> Admitted:
    assert isinstance(value, Admitted), value
    assert value.original == named
    assert value.path != named
    assert value.path.is_relative_to(value.root)
    assert boundary.admit(value.path) is value  # the copy handed on is the same value, never copied again
    assert boundary.admitted(named) is value
    return value


def test_export_receives_the_admitted_source_and_loads_its_copy(tmp_path: Path) -> None:
    from fwx.commands.export import export
    from fwx.manifest import Manifest
    from fwx.sources.load import load_source

    src = _linear(tmp_path / "m.onnx")
    with _arguments(command=(export.callback, "source"), library=(load_source, "source")) as seen:
        assert _main("export", src, "--to", "onnx", "--out", tmp_path / "repo") == 0
    got = _is_copy_of(seen["command"][0], src)
    assert [str(s) for s in seen["library"]] == [str(got.path)]
    assert Manifest.read(tmp_path / "repo" / "m" / "1").source.sha256 == got.sha256


def test_validate_receives_every_admitted_path_and_validates_the_copies(tmp_path: Path) -> None:
    from fwx.commands.validate import validate
    from fwx.validators.pipeline import validate as run_validate

    a, b = _linear(tmp_path / "a.onnx"), _linear(tmp_path / "b.onnx")
    with _arguments(command=(validate.callback, "paths"), library=(run_validate, "paths")) as seen:
        assert _main("validate", a, b) == 0
    got = [_is_copy_of(v, p) for v, p in zip(seen["command"][0], (a, b), strict=True)]
    assert [Path(p) for p in seen["library"][0]] == [g.path for g in got]


def test_inspect_receives_the_admitted_path_and_reads_its_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fwx.commands.inspect import inspect as inspect_cmd
    from fwx.sources.inspection import inspect_path

    src = _linear(tmp_path / "m.onnx")
    capsys.readouterr()
    with _arguments(command=(inspect_cmd.callback, "path"), library=(inspect_path, "path")) as seen:
        assert _main("inspect", src, "--json") == 0
    got = _is_copy_of(seen["command"][0], src)
    assert [str(p) for p in seen["library"]] == [str(got.path)]
    assert json.loads(capsys.readouterr().out)["format"] == "onnx"


def test_a_library_call_trusted_or_not_loads_one_admitted_copy(tmp_path: Path) -> None:
    """``fwx.export(..., trust_model_code=True)`` reads a copy too: the hashed bytes are the loaded bytes."""
    from fwx.converters.base import ConvertOptions
    from fwx.exporter import ExportOptions, export
    from fwx.sources.load import load_source

    src = _linear(tmp_path / "m.onnx")
    with _arguments(library=(load_source, "source")) as seen:
        res = export(src, ["onnx"], ExportOptions(out=tmp_path / "repo", convert=ConvertOptions(trust_model_code=True)))
    got = boundary.admitted(src)
    assert got is not None
    assert got.original == src
    assert [Path(s) for s in seen["library"]] == [got.path]
    assert res.manifest is not None
    assert res.manifest.source.sha256 == got.sha256


def test_a_library_validate_loads_only_admitted_copies(tmp_path: Path) -> None:
    from fwx.runtimes.base import load_runtime
    from fwx.validators.pipeline import validate as run_validate

    a, b = _linear(tmp_path / "a.onnx"), _linear(tmp_path / "b.onnx")
    with _arguments(runtime=(load_runtime, "path")) as seen:
        assert run_validate([a, b]).passed
    copies = [boundary.admitted(p) for p in (a, b)]
    assert all(c is not None for c in copies)
    assert sorted(Path(p) for p in seen["runtime"]) == sorted(c.path for c in copies if c is not None)
