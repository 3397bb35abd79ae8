"""Option types every command shares, so one concept has one spelling and one meaning on every command line.

* ``--device``: ``cpu`` (the default everywhere), ``cuda``, ``cuda:N`` or
  ``auto`` (a GPU when one is visible, else the CPU).
* durations: options named ``--...-seconds`` take a number of seconds or a
  number with a unit (``100ms``, ``30s``, ``5m``, ``1h``).
* counts: typed ranges (``--workers`` also takes ``auto``).
* ``--trust-model-code``: one flag, one wording.
* a renamed flag stays as an error that names its new spelling (never a silent alias).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from fwx.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)?")


class Duration(click.ParamType):
    """A non-negative duration: seconds, or a number with a unit; converted to ``unit`` (seconds by default)."""

    name = "duration"

    def __init__(self, unit: str = "s") -> None:
        self.scale = 1.0 / _UNITS[unit]

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            seconds = float(value)
        else:
            match = _DURATION.fullmatch(str(value).strip().lower())
            if match is None:
                self.fail(f"{value!r} is not a duration (e.g. 30, 30s, 100ms, 5m)", param, ctx)
            seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
        if seconds < 0:
            self.fail(f"{value!r} is negative", param, ctx)
        return seconds * self.scale


SECONDS = Duration()


class CountOrAuto(click.ParamType):
    """A positive integer, or ``auto`` (left to the command to resolve, e.g. one per CPU)."""

    name = "count"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif str(value).strip().lower() == "auto":
            return "auto"
        else:
            try:
                number = int(str(value))
            except ValueError:
                self.fail(f"{value!r} is neither a positive integer nor auto", param, ctx)
        if number < 1:
            self.fail(f"{number} is not a positive integer (or auto)", param, ctx)
        return number


class Device(click.ParamType):
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto``."""

    name = "device"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "cpu|cuda|cuda:N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip().lower()
        if text not in ("cpu", "cuda", "auto") and not re.fullmatch(r"cuda:\d+", text):
            self.fail(f"{value!r} is not a device (cpu, cuda, cuda:N or auto)", param, ctx)
        return text


DEVICE_HELP = "cpu, cuda, cuda:N, or auto (a GPU when one is visible, else the CPU)."


def device_option(purpose: str) -> Callable[[F], F]:
    """``--device`` with the same type and default on every command; ``purpose`` says what runs there."""
    return click.option(
        "--device", type=Device(), default="cpu", show_default=True, help=f"Device for {purpose}: {DEVICE_HELP}"
    )


def resolve_device(device: str) -> str:
    """``auto`` becomes ``cuda`` when a GPU is visible (a cheap look: no framework import), else ``cpu``."""
    if device != "auto":
        return device
    from fwx.validators.artifacts import gpu_visible

    return "cuda" if gpu_visible() else "cpu"


TRUST_HELP = (
    "Trust the model: load files that can run code or touch the host (TorchScript, pickles, Keras Lambda, "
    "SavedModel I/O ops, custom ops) instead of refusing them."
)


def trust_option(consequence: str = "") -> Callable[[F], F]:
    """``--trust-model-code``, worded once; ``consequence`` adds what else it changes in this command."""
    return click.option(
        "--trust-model-code", is_flag=True, help=TRUST_HELP + (f" {consequence}" if consequence else "")
    )


def renamed(old: str, new: str) -> Callable[[F], F]:
    """``old`` is refused with one line naming ``new``: a renamed flag never silently keeps working."""

    def refuse(_ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value not in (None, False, ()):
            raise UsageError(f"{old} was renamed to {new}", hint=f"use {new}")

    name = "renamed_" + old.lstrip("-").replace("-", "_")  # never the new option's own name
    return click.option(old, name, hidden=True, expose_value=False, default=None, callback=refuse)


class SectionedCommand(click.Command):
    """A command whose ``--help`` prints its options in named sections (click has no native groups)."""

    def __init__(self, *args: Any, sections: Sequence[tuple[str, Sequence[str]]] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[str, tuple[str, str]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.name is not None:
                rows[param.name] = record
        placed: set[str] = set()
        for title, names in self.sections:
            records = [rows[n] for n in names if n in rows]
            placed.update(names)
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)
        rest = [record for name, record in rows.items() if name not in placed]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)
