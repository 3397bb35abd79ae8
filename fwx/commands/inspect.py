"""``fwx inspect``: a thin wrapper over ``fwx.sources.inspection.inspect_path``."""

from __future__ import annotations

import json
from typing import Any

import click

from fwx import ui
from fwx.commands.options import trust_option
from fwx.signature import shape_text
from fwx.sources.boundary import Admitted


@click.command("inspect")
@click.argument("path", type=click.Path())
@trust_option("The loader still runs behind every wall.")
@click.option(
    "--signature", "signature_name", default="serving_default", show_default=True, help="SavedModel signature to show."
)
@ui.common_options
def inspect(path: str | Admitted, trust_model_code: bool, signature_name: str) -> None:
    """Show the signature and metadata of PATH (a model, an artifact or a version folder) without running it."""
    from fwx.safety import walls
    from fwx.sources.inspection import inspect_path

    if isinstance(path, Admitted):  # the loader admitted it: its private copy is all this command reads
        path = str(path.path)

    info = inspect_path(path, trust=trust_model_code, signature_name=signature_name)
    shown = walls.report()  # which walls stood around the reading (none listed for an in-process call)
    if shown.walls:
        info = {**info, "walls": shown.as_json()}
    ui.emit(info, lambda: render(info) + (f"\n{shown.line()}" if shown.walls else ""))


def render(info: dict[str, Any]) -> str:
    lines = [f"{info['path']}: {info['format']}"]
    if info["format"] == "model folder":
        lines.append("versions: " + ", ".join(str(v) for v in info["versions"]))
        return "\n".join(lines)
    if info["format"] == "version folder":
        lines.append(
            f"model {info['name']} version {info['version']}, created {info['created']} by fwx {info['fwx_version']}"
        )
        lines.append(
            f"source: {info['source']['path']} ({info['source']['format']}, {info['source']['framework']} "
            f"{info['source']['framework_version']})"
        )
        lines.append(f"command: {info['command']}")
    sig = info.get("signature")
    if sig:
        rows = [
            (kind, s["name"], s["dtype"], shape_text(s["shape"], s["name"]))
            for kind in ("inputs", "outputs")
            for s in sig.get(kind, [])
        ]
        lines += ["", ui.table(["", "name", "dtype", "shape"], [(k[:-1], *r) for k, *r in rows])]
    if info["format"] == "version folder":
        arts = [
            (
                k,
                a["path"],
                ui.human_size(a["size_bytes"]),
                a["precision"],
                a["opset"] or "-",
                a["status"],
                {True: "PASS", False: "FAIL"}.get(a["validated"], "-"),
                a["path_taken"],
            )
            for k, a in info["artifacts"].items()
        ]
        lines += [
            "",
            ui.table(["artifact", "path", "size", "precision", "opset", "status", "validated", "path taken"], arts),
        ]
        lines += [f"skipped {k}: {why}" for k, why in info.get("skipped", {}).items()]
    if info.get("metadata"):
        lines += ["", *(f"{k}: {_short(v)}" for k, v in info["metadata"].items())]
    lines += [f"note: {n}" for n in info.get("notes", [])]
    return "\n".join(lines)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 160 else text[:157] + "..."
