"""Plain Kubernetes: Deployment, Service, PodDisruptionBudget and HorizontalPodAutoscaler for ``fwx serve``.

Rollouts lose nothing because three things line up: ``maxUnavailable: 0``
(a replacement is ready before an old replica goes), the server's
``--shutdown-delay-seconds`` (an old replica keeps answering while the
endpoint removal reaches every node, so no preStop sleep is needed), and a
grace period longer than delay + drain. The repository is read-only: a PVC
(``pvc://``) that the server polls for new versions, or a copy made by an
init container (KServe's storage initializer) at pod start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fwx.deploy.access import network_policy
from fwx.deploy.common import (
    GRPC_PORT,
    HTTP_PORT,
    MODEL_DIR,
    QUANTITY,
    DeployOptions,
    container_security,
    dump,
    pod_security,
    serve_container,
    tmp_volume,
)
from fwx.deploy.storage import STORAGE_INITIALIZER, parse_storage_uri
from fwx.errors import UsageError


@dataclass
class K8sOptions(DeployOptions):
    cpu_target_percent: int = 70
    queue_depth_target: float | None = None  # average fwx_queue_depth per pod, via the Prometheus adapter
    storage_initializer_image: str = STORAGE_INITIALIZER
    #: sizeLimit of the emptyDir a non-PVC repository is copied into: a runaway download is evicted,
    #: not left to fill the node's disk.
    model_volume_size: str = "10Gi"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not QUANTITY.fullmatch(self.model_volume_size):
            raise UsageError(
                f"--model-volume-size {self.model_volume_size!r} is not a Kubernetes quantity", hint="e.g. 10Gi"
            )
        if not 1 <= self.cpu_target_percent <= 100:
            raise UsageError(f"--cpu-target {self.cpu_target_percent} must be a percentage (1-100)")
        if self.queue_depth_target is not None and self.queue_depth_target <= 0:
            raise UsageError("--queue-depth-target must be positive", hint="e.g. 4 (queued requests per pod)")
        if parse_storage_uri(self.repo_uri).scheme == "oci":
            raise UsageError(
                "oci:// model images need KServe's modelcar support, not a plain Deployment",
                hint="use fwx deploy kserve, or s3://, gs://, https:// or pvc://",
            )


def _repository(opts: K8sOptions) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, init containers) that put the repository read-only at /mnt/models."""
    src = parse_storage_uri(opts.repo_uri)
    if src.is_pvc:
        return [{"name": "models", "persistentVolumeClaim": {"claimName": src.claim, "readOnly": True}}], []
    _, tmp_mount = tmp_volume()
    init = {
        "name": "storage-initializer",
        "image": opts.storage_initializer_image,
        "args": [src.uri, MODEL_DIR],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "securityContext": container_security(),
        "volumeMounts": [{"name": "models", "mountPath": MODEL_DIR}, tmp_mount],
    }
    return [{"name": "models", "emptyDir": {"sizeLimit": opts.model_volume_size}}], [init]


def _models_mount(opts: K8sOptions) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": "models", "mountPath": MODEL_DIR, "readOnly": True}
    src = parse_storage_uri(opts.repo_uri)
    if src.is_pvc and src.sub_path:
        mount["subPath"] = src.sub_path
    return mount


def deployment(opts: K8sOptions) -> dict[str, Any]:
    volumes, init = _repository(opts)
    tmp, _ = tmp_volume()
    container = serve_container(opts, "fwx", opts.name, [_models_mount(opts)])
    pod: dict[str, Any] = {
        "terminationGracePeriodSeconds": opts.grace_period_s,
        "securityContext": pod_security(),
        "automountServiceAccountToken": False,
    }
    if opts.service_account:
        pod["serviceAccountName"] = opts.service_account
    if init:
        pod["initContainers"] = init
    pod.update({"containers": [container], "volumes": [*volumes, tmp]})
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(HTTP_PORT),
        "prometheus.io/path": "/metrics",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": opts.metadata(),
        # No spec.replicas: the HPA owns the count (minReplicas = --replicas); a replicas field here
        # would reset it on every `kubectl apply`.
        "spec": {
            "selector": {"matchLabels": opts.labels()},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {"metadata": {"labels": opts.labels(), "annotations": annotations}, "spec": pod},
        },
    }


def service(opts: K8sOptions) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": opts.metadata(),
        "spec": {
            "type": "ClusterIP",
            "selector": opts.labels(),
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {
                    "name": "grpc",
                    "port": GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c",
                },
            ],
        },
    }


def disruption_budget(opts: K8sOptions) -> dict[str, Any]:
    # maxUnavailable 1 rather than minAvailable: node drains still make progress at replicas=1.
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": opts.metadata(),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": opts.labels()}},
    }


def autoscaler(opts: K8sOptions) -> dict[str, Any]:
    metrics: list[dict[str, Any]] = [
        {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": opts.cpu_target_percent},
            },
        }
    ]
    if opts.queue_depth_target is not None:
        # Served by prometheus-adapter from fwx_queue_depth (see docs/deploy.md for the rule).
        metrics.append(
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "fwx_queue_depth"},
                    "target": {"type": "AverageValue", "averageValue": f"{opts.queue_depth_target:g}"},
                },
            }
        )
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": opts.metadata(),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": opts.name},
            "minReplicas": opts.replicas,
            "maxReplicas": opts.max_replicas,
            "metrics": metrics,
            # Scale down slowly: a replica that leaves costs a model load when load comes back.
            "behavior": {
                "scaleDown": {
                    "stabilizationWindowSeconds": 300,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                }
            },
        },
    }


def k8s_documents(opts: K8sOptions) -> list[dict[str, Any]]:
    docs = [deployment(opts), service(opts), disruption_budget(opts), autoscaler(opts)]
    if opts.network_policy:
        docs.append(network_policy(opts.metadata(), opts.labels(), opts.allow_from, opts.allow_namespaces))
    return docs


def render_k8s(opts: K8sOptions) -> str:
    """The YAML of every object, ready for ``kubectl apply -f -``."""
    return dump(k8s_documents(opts))
