"""``fwx dockerize``: thin wrapper over :mod:`fwx.docker`."""

from __future__ import annotations

from pathlib import Path

import click

from fwx import ui


@click.command("dockerize")
@click.argument("repository", type=click.Path(path_type=Path), default="artifacts")
@click.option("--gpu", is_flag=True, help="CUDA base image with onnxruntime-gpu (run with --gpus all).")
@click.option(
    "--prefer",
    default="onnx,torchscript,pt2,savedmodel,tflite",
    show_default=True,
    help="Format preference of the server (others follow); decides which runtimes the image needs.",
)
@click.option("--tag", default="fwx-models:latest", show_default=True, help="Image tag used in the printed commands.")
@click.option("--force", is_flag=True, help="Overwrite an existing Dockerfile/.dockerignore.")
@click.option(
    "--wheel",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="fwx_toolkit wheel to bake in (default: build one from this fwx's source checkout).",
)
@ui.common_options
def dockerize(repository: Path, gpu: bool, prefer: str, tag: str, force: bool, wheel: Path | None) -> None:
    """Write a Dockerfile and .dockerignore into REPOSITORY that bake its models into a serving image.

    fwx goes into the image as a wheel built from this checkout (or --wheel),
    copied into REPOSITORY/.fwx-wheels/; the image installs only the extras its models need (an ONNX-only repository
    gets an ONNX-only image), runs as uid 1000, exposes 8000 (HTTP) and 8001
    (gRPC) and has a HEALTHCHECK on /v2/health/ready. Publish the ports on
    127.0.0.1 unless you mean to expose them.

    \b
    Example:
      fwx dockerize artifacts && docker build -t my-models artifacts
    """
    from fwx.docker import plan_image, write_docker_files
    from fwx.serving.config import parse_prefer, preference_order

    order = tuple(preference_order(parse_prefer(prefer)))
    plan = plan_image(repository, prefer=order, gpu=gpu, tag=tag)
    with ui.step("building fwx's wheel for the image"):
        written = write_docker_files(plan, force=force, wheel=wheel)

    def human() -> str:
        rows = [(k, v) for k, v in sorted(plan.served.items())]
        lines = [
            ui.table(["model/version", "served as"], rows),
            "",
            f"wrote {', '.join(str(p) for p in written)} (extras: {', '.join(plan.extras)})",
            "",
            "build:  " + plan.build_command(),
            "run:    " + plan.run_command(),
        ]
        return "\n".join(lines)

    ui.emit({"ok": True, **plan.to_json(), "written": [str(p) for p in written]}, human)
