"""The sampling flags that ``fwx export`` and ``fwx validate`` share: one spelling, one parser."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def sample_options(fn: F) -> F:
    """Add ``--input-range``, ``--input-values`` (repeatable; keyword args ``input_ranges``, ``input_values``)
    and ``--validation-data`` (``validation_data``)."""
    fn = click.option(
        "--validation-data",
        "validation_data",
        type=click.Path(path_type=Path, exists=True, dir_okay=True),
        metavar="FILE.npz",
        help="Real samples validated beside the generated ones: a .npz (or folder of <input>.npy) of input arrays.",
    )(fn)
    fn = click.option(
        "--input-values",
        "input_values",
        multiple=True,
        metavar="NAME:V1,V2,...",
        help="Draw every element of input NAME from these values (e.g. token_type_ids:0,1). Repeatable.",
    )(fn)
    return click.option(
        "--input-range",
        "input_ranges",
        multiple=True,
        metavar="NAME:LO,HI",
        help="Draw integer input NAME from [LO, HI) in samples (token ids: the vocabulary). Repeatable.",
    )(fn)


def parse_samples(
    input_ranges: tuple[str, ...], input_values: tuple[str, ...]
) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[float, ...]]]:
    """The flags' text as the sample generator takes them; a malformed one is a ``UsageError`` line."""
    from fwx.sources.samples import parse_input_range, parse_input_values

    return dict(parse_input_range(t) for t in input_ranges), dict(parse_input_values(t) for t in input_values)
