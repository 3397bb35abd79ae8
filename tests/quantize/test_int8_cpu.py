"""INT8 that computes the same numbers on every CPU, and a record of the CPU it was measured on.

onnxruntime's x86-64 int8 kernels saturate without VNNI (``fwx.quantize.cpu``).
The check that fwx's default avoids it runs the same artifact under an
emulated AVX2-only AMD EPYC (``qemu-x86_64 -cpu EPYC-Rome``: user-mode
emulation, so the CPUID onnxruntime reads is the emulated one) and natively:
7-bit weights give the same outputs; 8-bit weights give other outputs there
whenever this machine has VNNI (which is what shows the emulation is real).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fwx.quantize import QuantOptions
from fwx.quantize.cpu import CpuFeatures, differs, features

from .conftest import SIGNATURE, Digits

QEMU = shutil.which("qemu-x86_64")
#: An AMD EPYC (Zen 2) as qemu models it: AVX2 and FMA, no AVX-512, no VNNI.
AVX2_CPU = "EPYC-Rome"
RUN = """
import sys, numpy as np, onnxruntime as ort
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
np.save(sys.argv[3], s.run(None, {"image": np.load(sys.argv[2])})[0])
"""

needs_qemu = pytest.mark.skipif(
    platform.machine() != "x86_64" or (QEMU is None and not os.environ.get("FWX_REQUIRE_TOOLS")),
    reason="needs qemu-user on x86-64 (make test-deps installs it)",
)


def _quantize(digits: Digits, folder: Path, bits: int) -> tuple[Path, dict[str, object]]:
    pytest.importorskip("onnxruntime")
    from fwx.quantize.onnx import quantize_onnx

    out = folder / f"int8-{bits}.onnx"
    opts = QuantOptions("int8", calibration_data=str(digits.calib), weight_bits=bits)
    info = quantize_onnx(digits.onnx, out, SIGNATURE, opts)
    return out, info.to_json()


def _outputs(model: Path, images: Path, dest: Path, *, emulate: str | None) -> np.ndarray:
    cmd = [sys.executable, "-c", RUN, str(model), str(images), str(dest)]
    if emulate:
        assert QEMU is not None, "qemu-x86_64 is missing: run make test-deps"
        cmd = [QEMU, "-cpu", emulate, *cmd]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    return np.load(dest)


@needs_qemu
def test_onnx_int8_computes_the_same_numbers_on_an_avx2_only_cpu(digits: Digits, tmp_path: Path) -> None:
    images = tmp_path / "images.npy"
    np.save(images, digits.x_test[:200])
    seven, info = _quantize(digits, tmp_path, 7)
    assert info["weight_bits"] == 7
    assert info["cpu"] == features().to_json()  # fwx.json says which CPU the artifact was measured on
    here = _outputs(seven, images, tmp_path / "here.npy", emulate=None)
    there = _outputs(seven, images, tmp_path / "there.npy", emulate=AVX2_CPU)
    np.testing.assert_allclose(there, here, rtol=0, atol=1e-5)

    eight, _ = _quantize(digits, tmp_path, 8)
    here8 = _outputs(eight, images, tmp_path / "here8.npy", emulate=None)
    there8 = _outputs(eight, images, tmp_path / "there8.npy", emulate=AVX2_CPU)
    if features().kernel == "x86-vnni":  # the saturation this machine does not have, seen in the emulated one
        assert np.abs(there8 - here8).max() > 1e-3
    else:  # this machine saturates too: the emulated CPU computes what it does
        np.testing.assert_allclose(there8, here8, rtol=0, atol=1e-5)


def test_the_cpu_is_read_from_cpuinfo_and_compared_only_for_8_bit_weights(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse2 avx fma avx2 bmi2\n\n"
        "processor\t: 1\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse2 avx fma avx2 bmi2\n"
    )
    epyc = features(cpuinfo)
    assert (epyc.model, epyc.flags, epyc.kernel) == ("AMD EPYC 7B12", ("avx2",), "x86-avx2")
    assert epyc.saturates_u8s8
    xeon = CpuFeatures("x86_64", "Intel Xeon", ("avx2", "avx512f", "avx512bw", "avx512_vnni"))
    assert not xeon.saturates_u8s8

    line = differs(xeon.to_json(), 8, here=epyc)
    assert line is not None
    assert "Intel Xeon (x86-vnni)" in line
    assert "AMD EPYC 7B12 (x86-avx2)" in line
    assert "saturate" in line
    assert differs(xeon.to_json(), 7, here=epyc) is None  # 7-bit weights: the same integers everywhere
    assert differs(xeon.to_json(), 8, here=xeon) is None
    # fwx.json is data: a record of the wrong shape says nothing
    assert differs({"arch": ["not", "a", "string"]}, 8, here=epyc) is None
