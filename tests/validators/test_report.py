"""Report renderings: JSON (non-finite safe), fwx.json slice, terminal table, HTML with plots."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from runtimes import models

from fwx.errors import UsageError
from fwx.formats import Format
from fwx.runtimes import Runtime, load_runtime
from fwx.validators import ValidationReport, validate_runtimes


@pytest.fixture(scope="module")
def mixed_report(
    torch_ref: Runtime, torch_files: dict[str, Path], torch_candidates: dict[str, Runtime]
) -> ValidationReport:
    cands = {"onnx": torch_candidates["onnx"], "bad": load_runtime(Format.ONNX, torch_files["onnx_perturbed"])}
    return validate_runtimes(torch_ref, cands, signature=models.MLP_SIG)


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.imgs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "img":
            self.imgs.append(dict(attrs)["src"] or "")


def test_html_report_is_self_contained(mixed_report: ValidationReport, tmp_path: Path) -> None:
    path = mixed_report.write(tmp_path / "r.html")
    text = path.read_text()
    parser = _Collect()
    parser.feed(text)
    assert parser.tags.count("table") == 2
    assert len(parser.imgs) == 2
    for src in parser.imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "http" not in re.sub(r"<!DOCTYPE[^>]*>", "", text)  # nothing fetched from elsewhere
    assert "FAIL" in text
    assert "needs atol" in text


def test_json_report(mixed_report: ValidationReport, tmp_path: Path) -> None:
    data = json.loads(mixed_report.write(tmp_path / "r.json").read_text())
    assert data["passed"] is False
    assert len(data["failures"]) == 1
    onnx = next(a for a in data["artifacts"] if a["key"] == "onnx")
    assert onnx["outputs"][0]["snr_db"] in ("inf",) or isinstance(onnx["outputs"][0]["snr_db"], float)
    assert "points" not in onnx["outputs"][0]
    slice_ = mixed_report.for_artifact("bad")
    assert slice_["passed"] is False
    assert slice_["failures"][0].startswith("bad: output 'logits'")
    json.dumps(slice_)


def test_table_rows_and_failures(mixed_report: ValidationReport) -> None:
    text = re.sub(r"\x1b\[[0-9;]*m", "", mixed_report.table())
    assert "onnx" in text
    assert "bad" in text
    assert "1 failure(s):" in text
    assert text.endswith("verdict: FAIL")


def test_unknown_report_suffix(mixed_report: ValidationReport, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        mixed_report.write(tmp_path / "r.txt")


def test_first_line_names_a_reference_that_is_not_the_source(mixed_report: ValidationReport) -> None:
    import copy

    from fwx.validators.report_html import render_html
    from fwx.validators.report_text import render_table

    assert "NOT the source" not in render_table(mixed_report)
    fell_back = copy.copy(mixed_report)
    fell_back.reference = {**mixed_report.reference, "instead_of_source": "cnn.pt is a state_dict"}
    first = render_table(fell_back).splitlines()[0]
    assert first.startswith("reference: ")
    assert "NOT the source model" in first
    assert "state_dict" in first
    assert "NOT the source model" in render_html(fell_back, plots=False)
