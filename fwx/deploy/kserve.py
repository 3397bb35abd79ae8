"""KServe: a ``ServingRuntime`` (or ``ClusterServingRuntime``) for fwx and an ``InferenceService`` using it.

KServe's storage initializer copies ``storageUri`` to ``/mnt/models`` and
starts the runtime's container with the args given here, where KServe fills
in ``{{.Name}}`` (the InferenceService's name), as its own servers'
``--model_name={{.Name}} --model_dir=/mnt/models`` do. fwx gets
``/mnt/models --model-name {{.Name}}``: a URI naming one model's folder
(``.../artifacts/mnist``, holding ``1/``, ``2/``) is served as model NAME,
which is the ``/v2/models/NAME`` URL KServe's clients expect; a URI naming a
whole repository (``.../artifacts``) serves every model in it.

HTTP is the first container port (8080, KServe's default; its Service maps
port 80 to it), gRPC is 8081 on a port named ``grpc`` (served as h2c). Two
ports need KServe's Standard (raw Deployment) mode; the InferenceService
asks for it with the ``RawDeployment`` annotation, which older releases
know by that name and newer ones accept as an alias.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fwx.deploy.access import network_policy
from fwx.deploy.common import (
    HTTP_PORT,
    DeployOptions,
    dump,
    pod_security,
    serve_container,
    tmp_volume,
)
from fwx.deploy.storage import parse_storage_uri
from fwx.errors import UsageError

#: KServe model format name -> (declared major version or "", the fwx formats it means).
#: An InferenceService that names no version matches any; one that does must match these.
MODEL_FORMATS: dict[str, tuple[str, str]] = {
    "onnx": ("1", "ONNX"),
    "tensorflow": ("2", "SavedModel"),
    "tflite": ("", "TFLite"),
    "pytorch": ("2", "TorchScript and .pt2"),
}
RUNTIME_API = "serving.kserve.io/v1alpha1"
ISVC_API = "serving.kserve.io/v1beta1"


@dataclass
class KServeOptions(DeployOptions):
    model_format: str = "onnx"
    cluster: bool = False  # ClusterServingRuntime instead of a namespaced ServingRuntime
    runtime_name: str = "fwx"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model_format not in MODEL_FORMATS:
            raise UsageError(
                f"--format {self.model_format!r} is not a model format the fwx runtime declares",
                hint="use one of " + ", ".join(MODEL_FORMATS),
            )
        if self.cluster and self.namespace:
            raise UsageError(
                "--namespace and --cluster conflict: a ClusterServingRuntime is cluster-wide",
                hint="drop --namespace (it still applies to the InferenceService) or --cluster",
            )
        parse_storage_uri(self.repo_uri)


def serving_runtime(opts: KServeOptions) -> dict[str, Any]:
    formats = [
        {"name": name, **({"version": version} if version else {}), "autoSelect": True, "priority": 1}
        for name, (version, _) in MODEL_FORMATS.items()
    ]
    tmp, _ = tmp_volume()
    container = serve_container(opts, "kserve-container", "{{.Name}}", [])
    meta: dict[str, Any] = {"name": opts.runtime_name}
    if opts.namespace and not opts.cluster:
        meta["namespace"] = opts.namespace
    meta["labels"] = {"app.kubernetes.io/name": "fwx", "app.kubernetes.io/managed-by": "fwx"}
    meta["annotations"] = {"serving.kserve.io/server-type": "fwx"}
    return {
        "apiVersion": RUNTIME_API,
        "kind": "ClusterServingRuntime" if opts.cluster else "ServingRuntime",
        "metadata": meta,
        "spec": {
            "annotations": {"prometheus.kserve.io/port": str(HTTP_PORT), "prometheus.kserve.io/path": "/metrics"},
            "supportedModelFormats": formats,
            "protocolVersions": ["v2", "grpc-v2"],
            "multiModel": False,
            "containers": [container],
            "volumes": [tmp],  # the only writable path under readOnlyRootFilesystem
        },
    }


def inference_service(opts: KServeOptions) -> dict[str, Any]:
    predictor: dict[str, Any] = {
        "minReplicas": opts.replicas,
        "maxReplicas": opts.max_replicas,
        "terminationGracePeriodSeconds": opts.grace_period_s,
        "securityContext": pod_security(),
        "model": {
            "modelFormat": {"name": opts.model_format},
            "runtime": opts.runtime_name,
            "protocolVersion": "v2",
            "storageUri": opts.repo_uri,
        },
    }
    if opts.service_account:
        predictor["serviceAccountName"] = opts.service_account  # credentials for the storage initializer
    meta = opts.metadata(annotations={"serving.kserve.io/deploymentMode": "RawDeployment"})
    return {"apiVersion": ISVC_API, "kind": "InferenceService", "metadata": meta, "spec": {"predictor": predictor}}


def kserve_documents(opts: KServeOptions) -> list[dict[str, Any]]:
    docs = [serving_runtime(opts), inference_service(opts)]
    if opts.network_policy:
        # KServe labels the predictor's pods with the InferenceService's name.
        pods = {"serving.kserve.io/inferenceservice": opts.name}
        docs.append(network_policy(opts.metadata(), pods, opts.allow_from, opts.allow_namespaces))
    return docs


def render_kserve(opts: KServeOptions) -> str:
    """The runtime and the InferenceService as YAML, ready for ``kubectl apply -f -``."""
    return dump(kserve_documents(opts))
