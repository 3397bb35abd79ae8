"""Which integer kernels this CPU gives an INT8 model, recorded with the artifact and compared where it runs.

onnxruntime's x86-64 kernels multiply uint8 activations by int8 weights. With
VNNI (``vpdpbusd``) the products accumulate in 32 bits; without it (AVX2, and
AVX-512 before VNNI) they go through ``vpmaddubsw``, which adds two products
into a *saturating* 16-bit lane: 255 * 127 * 2 > 32767. A model with full
8-bit weights then computes different numbers on an AVX2-only AMD EPYC than on
the Xeon it was validated on (measured: the digits CNN's cosine 0.99994 ->
0.99839, the per-tensor ResNet's top-1 agreement 98.9% -> 95.8%). 7-bit weights
(onnxruntime's ``reduce_range``) keep every pair below 2**15, so the integer
arithmetic is exact on every CPU and the artifact computes the same numbers
everywhere. LiteRT's XNNPACK kernels widen to 16 bits before multiplying and
do not saturate; TFLite keeps 8-bit weights.

``features()`` is what fwx.json records (``quantization.cpu``); ``differs``
is the one comparison ``fwx validate`` and ``fwx serve`` make against it.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The flags (as /proc/cpuinfo spells them) that choose an integer GEMM kernel on x86-64 or Arm.
INT8_FLAGS = (
    "avx2",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx_vnni",
    "amx_int8",
    "asimd",
    "asimddp",
    "i8mm",
    "sve",
)
#: 7-bit weights: no int16 pair sum can saturate (127 would, 63 cannot: 255 * 64 * 2 < 2**15).
REDUCED_WEIGHT_BITS = 7
FULL_WEIGHT_BITS = 8


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU an INT8 artifact was validated on, as far as its integer kernels care."""

    arch: str
    model: str
    flags: tuple[str, ...]

    @property
    def kernel(self) -> str:
        """The class of integer kernel the runtimes choose on this CPU."""
        f = set(self.flags)
        if self.arch in ("x86_64", "amd64"):
            if f & {"avx512_vnni", "avx_vnni", "amx_int8"}:
                return "x86-vnni"
            return "x86-avx512" if "avx512bw" in f else ("x86-avx2" if "avx2" in f else "x86-sse")
        if self.arch in ("aarch64", "arm64"):
            return "arm-dotprod" if "asimddp" in f else "arm-neon"
        return self.arch or "unknown"

    @property
    def saturates_u8s8(self) -> bool:
        """Whether 8-bit int8 weights can saturate here (x86-64 without VNNI)."""
        return self.kernel in ("x86-avx512", "x86-avx2", "x86-sse")

    def to_json(self) -> dict[str, Any]:
        return {"arch": self.arch, "model": self.model, "flags": list(self.flags), "kernel": self.kernel}

    @classmethod
    def from_json(cls, data: object) -> CpuFeatures | None:
        """The record in fwx.json; None when absent or not of this shape (it is data from a file)."""
        if not isinstance(data, dict):
            return None
        arch, model, flags = data.get("arch"), data.get("model"), data.get("flags")
        if not isinstance(arch, str) or not isinstance(model, str) or not isinstance(flags, list):
            return None
        return cls(arch, model[:200], tuple(str(f) for f in flags if str(f) in INT8_FLAGS))


def features(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuFeatures:
    """This machine's CPU: its model name and the INT8-relevant flags of its first processor."""
    arch = platform.machine().lower()
    model, flags = "", set[str]()
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return CpuFeatures(arch, model or arch, tuple(f for f in INT8_FLAGS if f in flags))


def differs(recorded: object, weight_bits: object, here: CpuFeatures | None = None) -> str | None:
    """One line when this CPU may compute an INT8 artifact differently from the CPU it was validated on.

    ``recorded`` and ``weight_bits`` are the ``quantization`` fields of fwx.json
    (data: anything). An artifact with 7-bit weights computes the same integers
    everywhere, so a different CPU is worth a line only for full 8-bit weights.
    """
    then = CpuFeatures.from_json(recorded)
    now = here or features()
    if then is None or weight_bits == REDUCED_WEIGHT_BITS or then.kernel == now.kernel:
        return None
    risk = " (8-bit weights can saturate there)" if now.saturates_u8s8 and not then.saturates_u8s8 else ""
    return (
        f"this int8 artifact was validated on {then.model} ({then.kernel}); this CPU is {now.model} "
        f"({now.kernel}){risk}: its numbers may differ, re-check it here with fwx validate"
    )
