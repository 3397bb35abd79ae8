"""The budget's data, split in two: a part the search chooses on, a part it never sees.

A budget searched and reported on the same samples reports the search's own
luck: with 450 digits one flipped prediction is 0.22 points, and a search that
tries eight layers will find some that flip the right ones. So the samples are
shuffled with a fixed seed and split: the search part picks the layers kept in
float, the held-out part measures what the published model costs. Both sizes,
the fraction and the seed go to fwx.json, so the split can be drawn again from
the data. ``--eval-holdout`` moves the cut: more held out resolves the reported
cost more finely (one sample is 100/held points), less leaves the search more.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fwx.errors import InputError, UsageError
from fwx.quantize.data import Source
from fwx.signature import Signature

#: The fraction of the budget's samples held out from the search (``--eval-holdout``).
HOLDOUT_FRACTION = 0.5
#: The shuffle's seed: a fixed one, so the same data always splits the same way.
SPLIT_SEED = 0
#: Fewer samples than this cannot give each part enough to count a top-1 on.
MIN_SAMPLES = 4


@dataclass(frozen=True)
class Split:
    """Which samples (indices into the data, ascending) the search uses and which it never sees."""

    seed: int
    search: tuple[int, ...]
    holdout: tuple[int, ...]
    fraction: float = HOLDOUT_FRACTION  # what was asked; the sizes are what it came to

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "search_samples": len(self.search),
            "holdout_samples": len(self.holdout),
            "holdout_fraction": self.fraction,
        }

    def describe(self) -> str:
        return f"{len(self.search)} searched, {len(self.holdout)} held out (seed {self.seed})"


def check_fraction(fraction: float) -> float:
    """``fraction`` when both parts can have samples; a UsageError naming the flag otherwise."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
        raise UsageError(
            f"--eval-holdout must be a fraction between 0 and 1 (both excluded), got {fraction!r}",
            hint="e.g. 0.5: half the eval samples are held out from the search and report its cost",
        )
    return float(fraction)


def split(count: int, fraction: float = HOLDOUT_FRACTION, seed: int = SPLIT_SEED) -> Split:
    """A seeded shuffle of ``count`` samples cut in two; each part keeps the data's order."""
    fraction = check_fraction(fraction)
    if count < MIN_SAMPLES:
        raise InputError(
            f"the budget needs at least {MIN_SAMPLES} eval samples to search on some and report on others, got {count}",
            hint="pass more --eval-data samples",
        )
    order = np.random.default_rng(seed).permutation(count)
    held = min(count - 1, max(1, round(count * fraction)))
    search, holdout = sorted(int(i) for i in order[held:]), sorted(int(i) for i in order[:held])
    return Split(seed, tuple(search), tuple(holdout), fraction)


class Part(Source):
    """The samples of ``base`` at ``indices``: reads only those, labels included."""

    def __init__(self, base: Source, indices: Sequence[int], role: str) -> None:
        super().__init__(base.path, base.purpose)
        self.base = base
        self.indices = tuple(indices)
        self.role = role
        self.count = len(self.indices)
        self.kind = base.kind

    def describe(self) -> str:
        return f"{self.base.describe()} ({self.role}: {self.count} of {self.base.count})"

    def arrays(self, signature: Signature) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        return self.base.arrays(signature)

    def check(self, signature: Signature | None, n: int) -> None:
        self.base.check(signature, self.base.count)

    def rows(self, signature: Signature, indices: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
        return self.base.rows(signature, [self.indices[i] for i in indices])

    def labels(self) -> np.ndarray | None:
        labels = self.base.labels()
        return None if labels is None else np.asarray(labels)[list(self.indices)]


def parts(source: Source, fraction: float = HOLDOUT_FRACTION) -> tuple[Split, Part, Part]:
    """(the split, the part the search measures on, the held-out part the cost is reported on)."""
    s = split(source.count, fraction)
    return s, Part(source, s.search, "searched"), Part(source, s.holdout, "held out")
