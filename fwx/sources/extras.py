"""What a source knows about its own use beyond the module: a Hugging Face folder's task, id ranges from its
config, sentences from its tokenizer, files a client needs, and a check of each artifact the way it is used.

The exporter reads these as plain data; only ``fwx.sources.hf`` fills them today.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: A check of one artifact's runtime the way the model is used (greedy generation): failure lines, notes.
UsageCheck = Callable[[Any], tuple[list[str], list[str]]]


@dataclass(frozen=True)
class SourceExtras:
    task: str | None = None
    ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # input -> [lo, hi) the config gives
    samples: tuple[Mapping[str, np.ndarray], ...] = ()  # real inputs (tokenized sentences) validated too
    assets: Mapping[str, Path] = field(default_factory=dict)  # name in the version folder -> source file
    check: UsageCheck | None = None
