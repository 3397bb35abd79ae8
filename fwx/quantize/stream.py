"""Batches of calibration samples, streamed, in the shape ORT's calibrator pulls them.

The object follows onnxruntime's ``CalibrationDataReader`` protocol (``get_next``,
``__len__``, ``set_range``) without importing onnxruntime, so that
``quantize_static(..., extra_options={"CalibStridedMinMax": k})`` calibrates k
batches at a time and then drops their intermediate outputs: peak memory is
bounded by the stride, not by the number of samples. Iterating it gives the
same batches for TFLite's representative dataset.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from fwx.quantize.data import Source
from fwx.signature import Signature, is_dynamic

#: Samples per calibration batch when every input has a dynamic batch axis.
BATCH = 16
#: Most samples whose intermediate outputs ORT may hold at once (per stride).
MAX_SAMPLES_IN_FLIGHT = 64


def batch_size_for(signature: Signature, wanted: int = BATCH) -> int:
    """``wanted`` when every input's first axis is dynamic (samples can be stacked), else 1."""
    ok = all(s.rank >= 1 and is_dynamic(s.shape[0]) for s in signature.inputs)
    return wanted if ok else 1


def uniform_batches(n: int, batch_size: int) -> tuple[int, int]:
    """(samples, batch) with ``batch`` dividing ``samples``: every batch has one shape.

    ORT's histogram calibrators stack the outputs of all batches of a stride with
    ``np.asarray``, which fails on a short last batch. The batch is the largest
    divisor of ``n`` up to ``batch_size``; when that is tiny (n prime, say) the
    sample count is rounded down to a multiple of ``batch_size`` instead.
    """
    if batch_size <= 1 or n <= batch_size:
        return n, max(1, min(n, batch_size))
    best = max(b for b in range(1, batch_size + 1) if n % b == 0)
    if best * 2 >= batch_size:
        return n, best
    return n - n % batch_size, batch_size


def stride_for(batches: int, batch_size: int, max_samples: int | None = None) -> int:
    """The largest stride (in batches) that divides ``batches`` and keeps <= max_samples in flight.

    ORT requires the number of batches to be divisible by the stride.
    """
    limit = max(1, (max_samples or MAX_SAMPLES_IN_FLIGHT) // max(1, batch_size))
    return max(k for k in range(1, min(limit, batches) + 1) if batches % k == 0) if batches else 1


class BatchStream:
    """Forward-only stream of up to ``n`` samples of ``source``, stacked ``batch_size`` at a time."""

    def __init__(self, source: Source, signature: Signature, n: int, batch_size: int = 1) -> None:
        self.source = source
        self.signature = signature
        self.n = min(n, source.count)
        self.batch_size = max(1, batch_size)
        self.total = math.ceil(self.n / self.batch_size)
        self._restart()

    def _restart(self) -> None:
        self._it = self._batches()
        self.samples_seen = 0
        self.pos = 0
        self.end = self.total

    def _batches(self) -> Iterator[dict[str, np.ndarray]]:
        pending: list[dict[str, np.ndarray]] = []
        for sample in self.source.samples(self.signature, self.n):
            pending.append(sample)
            if len(pending) == self.batch_size:
                yield self._stack(pending)
                pending = []
        if pending:
            yield self._stack(pending)

    def _stack(self, samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        self.samples_seen += len(samples)
        if len(samples) == 1:
            return samples[0]
        return {k: np.concatenate([s[k] for s in samples], axis=0) for k in samples[0]}

    def __len__(self) -> int:
        return self.total

    def set_range(self, start_index: int, end_index: int) -> None:
        if start_index < self.pos:
            self._restart()
        while self.pos < start_index and next(self._it, None) is not None:
            self.pos += 1
        self.end = min(end_index, self.total)

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.pos >= self.end:
            return None
        batch = next(self._it, None)
        if batch is not None:
            self.pos += 1
        return batch

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        self._restart()
        while (batch := self.get_next()) is not None:
            yield batch
