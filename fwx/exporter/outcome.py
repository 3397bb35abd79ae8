"""Run every target of one export, keep what happened to each, and decide what may be published.

Every requested target runs, even after another failed, so the report (and
``--json``) says for each one whether it passed and why not. Then:

* ``--to all``: a target with no working path is skipped; one that validated
  wrong is left out (recorded under ``failed``); the others are published.
* A named target (``--to onnx,tflite``) that fails, by conversion or by
  validation, publishes nothing: no version holds half of what was asked.
  The error names the failure and the targets that passed.
* ``--keep-failed``: the targets that passed are published anyway, a target
  that validated wrong is published marked failed, one that produced no
  artifact is recorded under ``failed``; the export still exits 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fwx import ui
from fwx.converters.plan import Plan
from fwx.errors import ExportError, FwxError, ValidationError
from fwx.exporter.manifest_build import choose, telling_error
from fwx.exporter.runner import Attempt, RunContext, place, run_target
from fwx.exporter.summary import TargetRow, check_text
from fwx.exporter.targets import Selection, run_order
from fwx.formats import TARGETS, Format
from fwx.manifest import Manifest

KEEP_FAILED_HINT = "--keep-failed publishes the targets that passed"


@dataclass
class Outcomes:
    """What happened to each target; every mapping is read in ``TARGETS`` order."""

    optional: frozenset[Format]  # asked for only through ``all``
    chosen: dict[Format, Attempt] = field(default_factory=dict)  # to publish (a failed one only with --keep-failed)
    rejected: dict[Format, tuple[Attempt, list[str]]] = field(default_factory=dict)  # validated wrong, left out
    errors: dict[Format, FwxError] = field(default_factory=dict)  # no artifact: every path failed
    skipped: dict[str, str] = field(default_factory=dict)  # --to all: no path, or no artifact
    kept_failures: list[str] = field(default_factory=list)  # validation failures of artifacts kept marked failed

    def named_failures(self) -> list[Format]:
        """Named targets that failed, by conversion or by validation, in ``TARGETS`` order."""
        bad = {f for f in (*self.errors, *self.rejected) if f not in self.optional}
        return [f for f in TARGETS if f in bad]

    def failures(self) -> list[str]:
        """One line per failure, as ``ExportResult.failures`` lists them (empty: the export is ok)."""
        lines = [f"{fmt}: {line}" for fmt, (_, found) in self.rejected.items() for line in found]
        lines += [f"{fmt}: {self.errors[fmt].message}" for fmt in self.named_failures() if fmt in self.errors]
        return lines + self.kept_failures

    def failed_entries(self) -> dict[str, dict[str, Any]]:
        """fwx.json's ``failed``: targets left out because they validated wrong, and named ones with no artifact."""
        out = {fmt.value: _failed_entry(fmt, pick, lines) for fmt, (pick, lines) in self.rejected.items()}
        out |= {fmt.value: {"error": self.errors[fmt].message} for fmt in self.named_failures() if fmt in self.errors}
        return {f.value: out[f.value] for f in TARGETS if f.value in out}

    def rows(self, manifest: Manifest | None) -> list[TargetRow]:
        """The summary rows; without a manifest (nothing published) the passing targets show as not published."""
        rows: list[TargetRow] = []
        failed = self.failed_entries()
        for fmt in TARGETS:
            if fmt.value in self.skipped:
                rows.append(TargetRow(fmt, "skipped", error=self.skipped[fmt.value]))
            if fmt.value in failed:
                bad = failed[fmt.value]
                check = check_text(bad.get("validation")) if "validation" in bad else "no artifact"
                rows.append(TargetRow(fmt, "failed", plan=bad.get("plan", ""), check=check, error=bad["error"]))
            if fmt in self.chosen:
                rows.append(_chosen_row(fmt, self.chosen[fmt], manifest))
        return rows

    def detail(self, signature: Any) -> dict[str, Any]:
        """The per-target detail of an export that published nothing (``--json`` prints it with the error)."""
        return {
            "signature": signature.to_json(),
            "targets": [r.to_json() for r in self.rows(None)],
            "failures": self.failures(),
            "skipped": dict(self.skipped),
            "failed": self.failed_entries(),
        }


def _chosen_row(fmt: Format, attempt: Attempt, manifest: Manifest | None) -> TargetRow:
    entry = manifest.artifacts.get(fmt.value) if manifest is not None else None
    if entry is not None:
        return TargetRow(
            fmt,
            entry.status,
            entry.path,
            entry.size_bytes,
            attempt.plan.describe(),
            check_text(entry.validation),
            str(entry.sig()) if entry.signature else "",
            published=True,
        )
    validation = attempt.report.for_artifact(fmt.value) if attempt.report is not None else None
    return TargetRow(
        fmt,
        "ok" if attempt.passed else "failed",
        plan=attempt.plan.describe(),
        check=check_text(validation),
        signature=str(attempt.readback or ""),
        error="not published: a named target failed",
    )


def run_targets(ctx: RunContext, sel: Selection, *, keep_failed: bool) -> Outcomes:
    """Export every selected target in ``run_order``; never stops at a failure."""
    out = Outcomes(sel.optional, skipped={fmt.value: reason for fmt, reason in sel.skipped.items()})
    for fmt in run_order(sel.plans):
        try:
            with ui.step(f"export {fmt}"):
                pick, lines = _target(ctx, fmt, sel.plans[fmt])
        except FwxError as exc:
            out.errors[fmt] = exc
            if fmt in sel.optional:
                out.skipped[fmt.value] = exc.message
            continue
        if lines and not keep_failed:
            out.rejected[fmt] = (pick, lines)
            _show_rejected(fmt, pick, lines)
            continue
        out.chosen[fmt] = pick
        for warning in (w for hop in pick.hops for w in hop.result.extra.get("warnings", [])):
            ui.warn(f"{fmt}: {warning}")
        out.kept_failures += lines
        if lines:
            place(ctx, fmt, pick)
    out.chosen, out.rejected = _in_target_order(out.chosen), _in_target_order(out.rejected)
    out.errors = _in_target_order(out.errors)
    out.skipped = {f.value: out.skipped[f.value] for f in TARGETS if f.value in out.skipped}
    return out


def warn_skipped(out: Outcomes) -> None:
    """A warning per skipped target, except one whose reason the closing error repeats."""
    first = next(iter(out.errors.values()), None)
    for key, reason in out.skipped.items():
        if out.chosen or first is None or reason != first.message:
            ui.warn(f"{key} skipped: {reason}")


def blocking_error(out: Outcomes, signature: Any, *, keep_failed: bool) -> FwxError | None:
    """The error that stops publishing, or None when the chosen targets may be published.

    It is the first failing target's own error (its type and exit code), with
    the other failures and the targets that passed named in it, and every
    target's outcome in ``detail``.
    """
    named = out.named_failures()
    if out.chosen and (keep_failed or not named):
        return None
    detail = out.detail(signature)
    fmt = named[0] if named else next(iter((*out.rejected, *out.errors)))
    cause = out.errors[fmt] if fmt in out.errors else _validation_error(*out.rejected[fmt])
    others = [f for f in named if f is not fmt]
    for other in others:
        if other in out.errors:  # a validation failure was shown as it happened
            ui.warn(f"{other} failed: {out.errors[other].message}")
    passed = [f.value for f, a in out.chosen.items() if a.passed]
    if others or passed:
        also = f" (also failed: {', '.join(f.value for f in others)})" if others else ""
        cause.message = f"{fmt}: {cause.message}{also}"
        cause.args = (cause.message,)
    if passed:
        cause.hint = f"{', '.join(passed)} passed but nothing was published; {KEEP_FAILED_HINT}"
    cause.detail = detail
    return cause


def _target(ctx: RunContext, fmt: Format, plans: list[Plan]) -> tuple[Attempt, list[str]]:
    """The attempt to publish for ``fmt`` and its validation failures; raises when no path made an artifact."""
    attempts = run_target(ctx, fmt, plans)
    pick, lines = choose(attempts)
    if pick is None:
        raise telling_error(attempts) or ExportError(f"{fmt}: no path produced an artifact")
    return pick, lines


_T = TypeVar("_T")


def _in_target_order(by_format: Mapping[Format, _T]) -> dict[Format, _T]:
    """``by_format`` in ``TARGETS`` order (targets run in ``run_order``; fwx.json and errors follow ``TARGETS``)."""
    return {f: by_format[f] for f in TARGETS if f in by_format}


def _failed_entry(fmt: Format, attempt: Attempt, lines: list[str]) -> dict[str, Any]:
    """What fwx.json keeps of a target that validated wrong: the first failure, the path and every number."""
    validation = attempt.report.for_artifact(fmt.value) if attempt.report is not None else {}
    return {"error": f"validation failed: {lines[0]}", "plan": attempt.plan.describe(), "validation": validation}


def _show_rejected(fmt: Format, attempt: Attempt, lines: list[str]) -> None:
    if attempt.report is not None and not ui.state.json:
        ui.info(attempt.report.table())
    more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
    ui.warn(f"{fmt} failed validation and is not published: {lines[0]}{more}")


def _validation_error(attempt: Attempt, lines: list[str]) -> ValidationError:
    more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
    return ValidationError(
        f"validation failed: {lines[0]}{more}",
        hint="nothing was published; --keep-failed publishes it marked failed, --no-validate skips the check",
    )
