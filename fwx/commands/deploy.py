"""``fwx deploy kserve|k8s``: thin wrappers over :mod:`fwx.deploy` that print or write YAML."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from fwx import ui
from fwx.commands.options import SECONDS

F = TypeVar("F", bound=Callable[..., Any])


def _shared(func: F) -> F:
    """Options both generators take (the ``fwx serve`` container and its pod)."""
    opts = [
        click.argument("repo_uri", metavar="REPO_URI"),
        click.option("--name", required=True, help="Name of the InferenceService / Deployment (DNS-1123)."),
        click.option("--image", default="", help="fwx serving image [default: fwx:cpu, or fwx:gpu with --gpu]."),
        click.option("--gpu", is_flag=True, help="Request one nvidia.com/gpu and serve with --device cuda."),
        click.option("--namespace", default=None, help="metadata.namespace of every object (default: none)."),
        click.option(
            "--replicas",
            default=2,
            show_default=True,
            type=click.IntRange(min=1),
            help="Replicas (the autoscaler's minimum).",
        ),
        click.option(
            "--max-replicas",
            default=10,
            show_default=True,
            type=click.IntRange(min=1),
            help="The autoscaler's maximum.",
        ),
        click.option("--cpu-request", default="1", show_default=True),
        click.option("--cpu-limit", default="2", show_default=True),
        click.option("--memory-request", default="2Gi", show_default=True),
        click.option("--memory-limit", default="2Gi", show_default=True),
        click.option(
            "--drain-seconds", default=30.0, show_default=True, type=SECONDS, help="fwx serve --drain-seconds."
        ),
        click.option(
            "--shutdown-delay-seconds",
            default=10.0,
            show_default=True,
            type=SECONDS,
            help="fwx serve --shutdown-delay-seconds: serve on after SIGTERM while endpoints update.",
        ),
        click.option("--poll-seconds", default=2.0, show_default=True, type=SECONDS, help="fwx serve --poll-seconds."),
        click.option("--service-account", default=None, help="Service account (storage credentials)."),
        click.option(
            "--token-secret",
            default=None,
            metavar="SECRET",
            help="Kubernetes Secret whose keys api-token (and admin-token) become FWX_API_TOKEN (FWX_ADMIN_TOKEN); "
            "the manifest names the Secret, never a token.",
        ),
        click.option(
            "--network-policy",
            is_flag=True,
            help="Add a NetworkPolicy: ingress only from --allow-from pods / --allow-namespace namespaces "
            "(default: pods of this namespace).",
        ),
        click.option(
            "--allow-from", multiple=True, metavar="KEY=VALUE", help="Pod label admitted by the NetworkPolicy."
        ),
        click.option(
            "--allow-namespace",
            "allow_namespaces",
            multiple=True,
            metavar="NAMESPACE",
            help="Namespace admitted by the NetworkPolicy (e.g. your Prometheus's).",
        ),
        click.option(
            "--out",
            "out_dir",
            type=click.Path(path_type=Path, file_okay=False),
            default=None,
            help="Write NAME-<target>.yaml into this folder instead of printing.",
        ),
        click.option("--force", is_flag=True, help="Overwrite an existing file under --out."),
        ui.common_options,
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def _emit(yaml_text: str, out_dir: Path | None, filename: str, force: bool) -> None:
    if out_dir is None:
        click.echo(yaml_text, nl=False)
        return
    from fwx.errors import InputError
    from fwx.machine import write_atomic

    target = out_dir / filename
    if target.exists() and not force:
        raise InputError(f"{target} already exists", hint="pass --force to overwrite it")
    if target.is_dir():
        raise InputError(
            f"{target} is a folder; --force only overwrites a file", hint="remove it or pass another --out"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(target, yaml_text)  # written whole, then renamed: never half a manifest
    ui.emit({"ok": True, "written": str(target)}, lambda: f"wrote {target}\napply: kubectl apply -f {target}")


@click.group("deploy")
def deploy() -> None:
    """Generate manifests that run `fwx serve` on KServe or plain Kubernetes.

    REPO_URI is the repository (the folder `fwx export --out` wrote) where the
    cluster can read it: s3://, gs://, https:// or pvc://CLAIM/PATH.
    """


@deploy.command("kserve")
@_shared
@click.option(
    "--format",
    "model_format",
    default="onnx",
    show_default=True,
    type=click.Choice(["onnx", "tensorflow", "tflite", "pytorch"]),
    help="modelFormat of the InferenceService (the runtime declares all four).",
)
@click.option("--cluster", is_flag=True, help="A ClusterServingRuntime instead of a namespaced ServingRuntime.")
@click.option("--runtime-name", default="fwx", show_default=True, help="Name of the (Cluster)ServingRuntime.")
def kserve(out_dir: Path | None, force: bool, **kw: Any) -> None:
    """A ServingRuntime for fwx and an InferenceService serving REPO_URI with it.

    \b
    Example:
      fwx deploy kserve s3://bucket/artifacts --name mnist | kubectl apply -f -
    """
    from fwx.deploy.kserve import KServeOptions, render_kserve

    opts = KServeOptions(**kw)
    _emit(render_kserve(opts), out_dir, f"{opts.name}-kserve.yaml", force)


@deploy.command("k8s")
@_shared
@click.option(
    "--cpu-target",
    "cpu_target_percent",
    default=70,
    show_default=True,
    help="HPA target: average CPU utilisation in percent of the request.",
)
@click.option(
    "--queue-depth-target",
    type=float,
    default=None,
    help="Also scale on average fwx_queue_depth per pod (needs prometheus-adapter; docs/deploy.md).",
)
@click.option(
    "--storage-initializer-image",
    default=None,
    help="Init container that copies a non-PVC REPO_URI to /mnt/models [default: KServe's].",
)
@click.option(
    "--model-volume-size",
    default="10Gi",
    show_default=True,
    help="sizeLimit of the emptyDir a non-PVC REPO_URI is copied into.",
)
def k8s(out_dir: Path | None, force: bool, storage_initializer_image: str | None, **kw: Any) -> None:
    """A Deployment, Service, PodDisruptionBudget and HorizontalPodAutoscaler serving REPO_URI.

    \b
    Example:
      fwx deploy k8s pvc://models/artifacts --name mnist --out deploy/
      fwx deploy k8s s3://bucket/artifacts --name mnist --token-secret mnist-tokens --network-policy
    """
    from fwx.deploy.k8s import K8sOptions, render_k8s

    if storage_initializer_image:
        kw["storage_initializer_image"] = storage_initializer_image
    opts = K8sOptions(**kw)
    _emit(render_k8s(opts), out_dir, f"{opts.name}-k8s.yaml", force)
