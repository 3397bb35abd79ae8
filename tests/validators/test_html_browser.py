"""The HTML report in a real headless browser (Debian's chromium): it renders, fetches nothing, shows its plots.

`make test` installs chromium (apt) on CI; the browser test skips, saying so, only
where chromium cannot be installed. The figure tests need matplotlib only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from runtimes import models

from fwx.runtimes import Runtime
from fwx.validators import ValidationReport, validate_runtimes
from fwx.validators.report_html import error_figure
from fwx.validators.report_text import fmt

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PLOT_BLUE = (0x40, 0x63, 0xD8)  # the histogram bars' colour in fwx/validators/report_html.py


def test_zero_error_histogram_has_no_negative_axis() -> None:
    x = np.linspace(-1, 1, 40, dtype=np.float32)
    fig = error_figure({"ref": x, "cand": x.copy()}, "t")
    lo, hi = fig.axes[0].get_xlim()
    assert lo == 0.0
    assert hi > 0
    assert any("exactly 0" in t.get_text() for t in fig.axes[0].texts)
    fig = error_figure({"ref": x, "cand": x + np.float32(1e-6) * np.arange(40, dtype=np.float32)}, "t")
    assert fig.axes[0].get_xlim()[0] == 0.0


def test_timings_print_as_plain_milliseconds() -> None:
    assert fmt(257.3, "ms") == "257"
    assert fmt(12.34, "ms") == "12.3"
    assert fmt(0.0421, "ms") == "0.04"
    assert "e+" not in fmt(123456.0, "ms")


@pytest.fixture(scope="module")
def report(torch_ref: Runtime, torch_candidates: dict[str, Runtime]) -> ValidationReport:
    # TorchScript of the same weights is bit-identical to eager torch: the zero-error case
    return validate_runtimes(
        torch_ref,
        {"torchscript": torch_candidates["torchscript"], "onnx": torch_candidates["onnx"]},
        signature=models.MLP_SIG,
    )


_PROBE = """<script>
addEventListener('load', () => {
  const imgs = [...document.images].map(i => {
    const r = i.getBoundingClientRect();
    return {w: i.naturalWidth, h: i.naturalHeight, shown_w: r.width, shown_h: r.height, complete: i.complete};
  });
  const fetched = performance.getEntriesByType('resource').map(e => e.name);
  const refs = [...document.querySelectorAll('[src],[href]')].map(e => e.getAttribute('src') || e.getAttribute('href'));
  const pre = document.createElement('pre'); pre.id = 'fwx-probe';
  pre.textContent = JSON.stringify({imgs, fetched, refs, height: document.body.scrollHeight});
  document.body.appendChild(pre);
});
</script>"""


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    # no network for the browser at all: the page must not need it, and CI must not reach out
    return subprocess.run(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--hide-scrollbars",
            "--disable-background-networking",
            "--disable-component-update",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("FWX_REQUIRE_TOOLS"),
    reason="chromium is not installed (make test installs it with apt on CI)",
)
def test_report_renders_in_chromium(report: ValidationReport, tmp_path: Path) -> None:
    from PIL import Image

    page = report.write(tmp_path / "report.html")
    html_text = page.read_text()
    assert "ms/sample" in html_text
    assert "e+0" not in html_text.split("ms/sample")[0].rsplit("mean", 1)[-1]

    # 1. it renders: a screenshot with the page's text and the histogram's blue bars in it
    shot = tmp_path / "shot.png"
    res = _chromium(f"--screenshot={shot}", "--window-size=1000,1600", page.as_uri())
    assert shot.is_file(), res.stderr[-2000:]
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    non_white = (img.sum(axis=2) < 3 * 250).mean()
    assert non_white > 0.02, f"screenshot is blank ({non_white:.1%} non-white pixels)"
    blue = (np.abs(img - np.array(PLOT_BLUE)).sum(axis=2) < 40).sum()
    assert blue > 200, f"no histogram bars visible ({blue} blue pixels)"

    # 2. no external URLs: the page fetched nothing, and every src/href is inline data
    probe = tmp_path / "probe.html"
    probe.write_text(html_text.replace("</body>", _PROBE + "</body>"))
    dom = _chromium("--dump-dom", "--virtual-time-budget=5000", probe.as_uri()).stdout
    raw = dom.split('<pre id="fwx-probe">', 1)[1].split("</pre>", 1)[0]
    found = json.loads(raw.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert found["fetched"] == []
    assert found["refs"]
    assert all(r.startswith("data:") for r in found["refs"]), [r[:60] for r in found["refs"]]

    # 3. the plots are visible: every <img> decoded and laid out at a real size
    assert len(found["imgs"]) == 2  # one per output of each candidate (the MLP has one output)
    for im in found["imgs"]:
        assert im["complete"]
        assert im["w"] > 100
        assert im["h"] > 50
        assert im["shown_w"] > 100
        assert im["shown_h"] > 50
