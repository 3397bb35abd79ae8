"""Pure numpy merge and split of requests along the batch axis.

Kept free of asyncio and of any runtime so it can be tested on its own: the
scheduler decides *which* requests go together, these functions only glue
their arrays and cut the outputs back at the same offsets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fwx.errors import ServingError

Arrays = Mapping[str, np.ndarray]


def shape_key(inputs: Arrays) -> tuple[tuple[int, ...], ...]:
    """Requests can share a batch only if every non-batch dimension matches."""
    return tuple(arr.shape[1:] for arr in inputs.values())


def merge(parts: Sequence[Arrays]) -> dict[str, np.ndarray]:
    """Concatenate each input along axis 0; a single request passes through uncopied."""
    if len(parts) == 1:
        return dict(parts[0])
    names = list(parts[0])
    return {n: np.concatenate([p[n] for p in parts], axis=0) for n in names}


def split(outputs: Arrays, rows: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """Cut every output into per-request views; refuses outputs that lost the batch axis."""
    if len(rows) == 1:
        return [dict(outputs)]
    total = sum(rows)
    for name, arr in outputs.items():
        if arr.ndim == 0 or arr.shape[0] != total:
            raise ServingError(
                f"output {name!r} has shape {list(arr.shape)}, which does not split into "
                f"{len(rows)} requests of {total} rows",
                hint="the model mixes rows of a batch; export it without a dynamic batch axis",
            )
    out: list[dict[str, np.ndarray]] = []
    start = 0
    for n in rows:
        out.append({name: arr[start : start + n] for name, arr in outputs.items()})
        start += n
    return out
