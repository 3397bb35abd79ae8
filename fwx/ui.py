"""Terminal output shared by every command: steps, tables, JSON, errors.

Human output goes to stderr (progress) and stdout (tables); ``--json`` puts a
single JSON document on stdout and nothing else there, so scripts can pipe it.
Kept free of heavy imports: ``fwx --help`` must start fast.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def _same(text: str) -> str:
    return text


class _State:
    debug = False
    json = False
    quiet = False
    #: How paths read in text the user sees (fwx.safety.snapshot.display: a private copy's path as typed).
    display: Callable[[str], str] = staticmethod(_same)
    #: Wall-clock limit of one step in a command process (``--step-timeout``); None: no limit (in-process).
    step_limit_s: float | None = None
    std_fds: tuple[int, int] = (1, 2)  # copies of stdout/stderr taken when the limit was set


def limit_steps(seconds: float | None) -> None:
    """Give every later ``step`` a wall-clock limit (a command process only: the limit ends the process)."""
    state.step_limit_s = seconds
    if seconds is not None:
        state.std_fds = (os.dup(1), os.dup(2))


state = _State()


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        state.debug = True
    return value


def _set_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        state.json = True
    return value


def common_options(func: F) -> F:
    """``--json`` and ``--debug`` on every command (they also work before the command name)."""
    func = click.option(
        "--debug",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_debug,
        help="Show full tracebacks and framework logs.",
    )(func)
    func = click.option(
        "--json",
        "json_output",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_json,
        help="Print one JSON document on stdout (for scripts).",
    )(func)
    return func


def info(msg: str) -> None:
    if not state.quiet:
        click.echo(state.display(msg), err=True)


def warn(msg: str) -> None:
    click.echo(click.style("warning: ", fg="yellow", bold=True) + state.display(msg), err=True)


def live() -> bool:
    """Animated progress only for a person watching: stderr is a terminal, not --json, not TERM=dumb."""
    if state.json or state.quiet or os.environ.get("TERM") == "dumb":
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _Live:
    """One rich Progress for the whole process: each running step is a row (spinner, name, elapsed)."""

    progress: Any = None
    depth = 0

    @classmethod
    def start(cls) -> Any:
        if cls.progress is None:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn

            cls.progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TextColumn("[dim]{task.elapsed:>5.1f}s"),
                console=Console(stderr=True),
                transient=True,
                refresh_per_second=8,
            )
            cls.progress.start()
        cls.depth += 1
        return cls.progress

    @classmethod
    def stop(cls) -> None:
        cls.depth -= 1
        if cls.depth == 0 and cls.progress is not None:
            cls.progress.stop()
            cls.progress = None


@contextmanager
def step(title: str, *, sub: bool = False) -> Iterator[None]:
    """Progress for a step that may take a while, on stderr.

    On a terminal: a live spinner row with the step's name and elapsed time (rich),
    then ``✓ title (1.2s)``. Otherwise plain lines: ``• title …`` then ``✓ title (1.2s)``
    (a ``sub`` step, such as one conversion hop, only says when it took over a second).
    Nothing under ``--json``.
    """
    t0 = time.perf_counter()
    with _time_limit(state.display(title)):
        if state.quiet or state.json:
            yield
            return
        title = state.display(title)
        if live():
            yield from _live_step(title, sub, t0)
            return
        yield from _plain_step(title, sub, t0)


@contextmanager
def _time_limit(title: str) -> Iterator[None]:
    """End the process with one error line when a step outlives ``state.step_limit_s``.

    A model can make a step run forever (an ONNX ``Loop`` of 2**62 iterations) inside native code that
    no Python exception interrupts; only a command process that owns itself sets a limit, and then the
    only sound way out is to stop it. An unpublished version stays a hidden temporary folder, swept by
    the next export (``fwx.repository``).
    """
    limit = state.step_limit_s
    if limit is None:
        yield
        return
    import threading

    def expire() -> None:
        msg = f"{title} did not finish within {limit:g}s"
        hint = "the model may loop without end; raise --step-timeout if it is only slow"
        # straight to the descriptors saved at the start: a framework call may have fd 1/2 and sys.std*
        # redirected right now (fwx.quiet)
        os.write(state.std_fds[1], f"error: {msg}\n  hint: {hint}\n".encode())
        if state.json:
            os.write(
                state.std_fds[0],
                (json.dumps({"ok": False, "error": msg, "hint": hint, "exit_code": 1}) + "\n").encode(),
            )
        import atexit

        atexit._run_exitfuncs()  # drain the stderr filter, drop the private snapshots
        os._exit(1)

    timer = threading.Timer(limit, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _plain_step(title: str, sub: bool, t0: float) -> Iterator[None]:
    if not sub:
        click.echo(f"• {title} …", err=True)
    try:
        yield
    except BaseException:
        click.echo(click.style(f"  ✗ {title} failed after {time.perf_counter() - t0:.1f}s", fg="red"), err=True)
        raise
    took = time.perf_counter() - t0
    if not sub or took >= 1.0:
        click.echo(("    " if sub else "  ") + click.style(f"✓ {title}", fg="green") + f" ({took:.1f}s)", err=True)


def _live_step(title: str, sub: bool, t0: float) -> Iterator[None]:
    from rich.markup import escape

    progress = _Live.start()
    task = progress.add_task(("  " if sub else "") + escape(title), total=None)
    ok = False
    try:
        yield
        ok = True
    finally:
        took = time.perf_counter() - t0
        progress.remove_task(task)
        if not sub or took >= 1.0 or not ok:
            mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
            progress.console.print(
                f"{'    ' if sub else '  '}{mark} {escape(title)} [dim]({took:.1f}s)[/dim]",
                highlight=False,
                markup=True,
            )
        _Live.stop()


def verdict(ok: bool) -> str:
    return click.style("PASS", fg="green", bold=True) if ok else click.style("FAIL", fg="red", bold=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> str:
    """A plain aligned text table (ANSI colour codes do not count toward widths)."""
    import re

    strip = re.compile(r"\x1b\[[0-9;]*m")
    cells = [[str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(strip.sub("", c)))

    def fmt(r: Sequence[str]) -> str:
        return "  ".join(c + " " * (widths[i] - len(strip.sub("", c))) for i, c in enumerate(r)).rstrip()

    lines = [title] if title else []
    lines += [fmt(list(headers)), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells]
    return "\n".join(lines)


def emit(result: Any, human: Callable[[], str]) -> None:
    """Print ``result`` as JSON under ``--json``, else the human rendering."""
    if state.json:
        click.echo(state.display(json.dumps(result, indent=2, default=str)))
    else:
        text = human()
        if text:
            click.echo(state.display(text))


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def fail(message: str, hint: str | None, code: int, detail: Mapping[str, Any] | None = None) -> None:
    """The error line (+ hint) and exit ``code``; under ``--json`` also one document with ``detail`` merged in."""
    message = state.display(message)
    click.echo(click.style("error: ", fg="red", bold=True) + message, err=True)
    if hint:
        click.echo(f"  hint: {hint}", err=True)
    if state.json:
        error_document(message, hint, code, detail)
    sys.exit(code)


def error_document(message: str, hint: str | None, code: int, detail: Mapping[str, Any] | None = None) -> None:
    """The one JSON document ``--json`` prints for an error, on stdout."""
    doc = {"ok": False, "error": message, "hint": hint, "exit_code": code, **(detail or {})}
    click.echo(state.display(json.dumps(doc, default=str)))
