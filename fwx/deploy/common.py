"""The ``fwx serve`` container both generators run, and the YAML dump.

Every number that matters for a lossless rollout lives here once: the
container is told ``--shutdown-delay-seconds`` (keep serving while the
endpoint removal propagates) and ``--drain-seconds`` (finish in-flight work),
and the pod's ``terminationGracePeriodSeconds`` is longer than both together,
so the kubelet never SIGKILLs a replica that is still answering.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from fwx.deploy.access import check_access_options, token_env
from fwx.errors import UsageError

#: Where KServe's storage initializer (and our volumes) put the repository.
MODEL_DIR = "/mnt/models"
#: KServe routes HTTP to the first container port; 8080 is its default, and gRPC rides on a port named grpc.
HTTP_PORT = 8080
GRPC_PORT = 8081
#: Slack on top of delay + drain: closing listeners and unloading models after the drain.
GRACE_SLACK_S = 10
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
QUANTITY = re.compile(r"\d+(\.\d+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?")
#: An image reference as the distribution spec spells it: [registry[:port]/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REF = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::\d+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)


def check_image(ref: str, flag: str) -> str:
    """An image reference, or a one-line refusal: it is written into YAML, a Dockerfile and shell lines."""
    if len(ref) > 255 or not IMAGE_REF.fullmatch(ref):
        raise UsageError(
            f"{flag} {ref!r} is not an image reference",
            hint="e.g. registry.example.com:5000/team/fwx-models:1.2 (lower-case path, tag of letters, digits, '._-')",
        )
    return ref


@dataclass
class DeployOptions:
    """What ``fwx deploy`` was asked for; validated when built."""

    name: str
    repo_uri: str
    image: str = ""  # "" -> fwx:cpu or fwx:gpu
    gpu: bool = False
    namespace: str | None = None
    replicas: int = 2
    max_replicas: int = 10
    cpu_request: str = "1"
    cpu_limit: str = "2"
    memory_request: str = "2Gi"
    memory_limit: str = "2Gi"
    drain_seconds: float = 30.0
    shutdown_delay_seconds: float = 10.0
    poll_seconds: float = 2.0
    service_account: str | None = None  # the pod's (storage credentials for the initializer)
    token_secret: str | None = None  # a Secret with keys api-token (and admin-token): tokens never in the manifest
    network_policy: bool = False  # a NetworkPolicy admitting only allow_from / allow_namespaces (default: this ns)
    allow_from: tuple[str, ...] = ()  # pod labels KEY=VALUE in this namespace
    allow_namespaces: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not DNS_1123.fullmatch(self.name):
            raise UsageError(
                f"--name {self.name!r} is not a valid Kubernetes name",
                hint="use lower-case letters, digits and '-', at most 63 characters",
            )
        if not self.image:
            self.image = "fwx:gpu" if self.gpu else "fwx:cpu"
        check_image(self.image, "--image")
        if not 1 <= self.replicas <= self.max_replicas:
            raise UsageError(f"--replicas {self.replicas} must be between 1 and --max-replicas {self.max_replicas}")
        for flag, value in (
            ("--cpu-request", self.cpu_request),
            ("--cpu-limit", self.cpu_limit),
            ("--memory-request", self.memory_request),
            ("--memory-limit", self.memory_limit),
        ):
            if not QUANTITY.fullmatch(value):
                raise UsageError(f"{flag} {value!r} is not a Kubernetes quantity", hint="e.g. 500m, 2, 512Mi, 4Gi")
        for flag, fvalue in (
            ("--drain-seconds", self.drain_seconds),
            ("--shutdown-delay-seconds", self.shutdown_delay_seconds),
            ("--poll-seconds", self.poll_seconds),
        ):
            if fvalue < 0:
                raise UsageError(f"{flag} must not be negative, got {fvalue:g}")
        self.allow_from, self.allow_namespaces = tuple(self.allow_from), tuple(self.allow_namespaces)
        check_access_options(self.token_secret, self.network_policy, self.allow_from, self.allow_namespaces)

    @property
    def grace_period_s(self) -> int:
        """Longer than the server's whole stop: delay, then drain, then closing (SIGKILL comes after it)."""
        return math.ceil(self.shutdown_delay_seconds + self.drain_seconds) + GRACE_SLACK_S

    def labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": "fwx", "app.kubernetes.io/instance": self.name}

    def metadata(self, name: str | None = None, **extra: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name or self.name}
        if self.namespace:
            meta["namespace"] = self.namespace
        meta["labels"] = {**self.labels(), "app.kubernetes.io/managed-by": "fwx"}
        meta.update(extra)
        return meta


def _num(value: float) -> str:
    return f"{value:g}"


def serve_args(opts: DeployOptions, model_name: str) -> list[str]:
    """``fwx serve`` arguments: all interfaces inside the pod, KServe's ports, the lossless-stop timings.

    ``--model-name`` only matters when /mnt/models is one model's folder (a storage URI naming
    ``.../artifacts/mnist``); a repository (``.../artifacts``) is served as it is.
    """
    args = [
        "serve",
        MODEL_DIR,
        "--model-name",
        model_name,
        "--host",
        "0.0.0.0",
        "--http-port",
        str(HTTP_PORT),
        "--grpc-port",
        str(GRPC_PORT),
        "--shutdown-delay-seconds",
        _num(opts.shutdown_delay_seconds),
        "--drain-seconds",
        _num(opts.drain_seconds),
        "--poll-seconds",
        _num(opts.poll_seconds),
    ]
    if opts.gpu:
        args += ["--device", "cuda"]
    return args


def serve_container(opts: DeployOptions, name: str, model_name: str, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``fwx serve`` container both generators run; ``mounts`` go before the writable /tmp."""
    _, tmp_mount = tmp_volume()
    return {
        "name": name,
        "image": opts.image,
        "command": ["fwx"],
        "args": serve_args(opts, model_name),
        "ports": ports(),
        "env": env(opts.token_secret),
        "resources": resources(opts),
        **probes(),
        "securityContext": container_security(),
        "volumeMounts": [*mounts, tmp_mount],
    }


def probes() -> dict[str, Any]:
    """Readiness on /v2/health/ready (false while loading and from SIGTERM on), liveness on /v2/health/live.

    Liveness answers while models load, so a slow first load is never killed;
    readiness fails fast (2 x 2 s) so a replica that stops being ready leaves
    the Service quickly.
    """

    def get(path: str) -> dict[str, Any]:
        return {"path": path, "port": "http"}

    return {
        "readinessProbe": {
            "httpGet": get("/v2/health/ready"),
            "periodSeconds": 2,
            "timeoutSeconds": 2,
            "failureThreshold": 2,
            "successThreshold": 1,
        },
        "livenessProbe": {
            "httpGet": get("/v2/health/live"),
            "periodSeconds": 10,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
    }


def container_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def resources(opts: DeployOptions) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": opts.cpu_limit, "memory": opts.memory_limit}
    if opts.gpu:
        limits["nvidia.com/gpu"] = 1
    return {"requests": {"cpu": opts.cpu_request, "memory": opts.memory_request}, "limits": limits}


def env(token_secret: str | None = None) -> list[dict[str, Any]]:
    """POD_NAME names the replica in ``fwx_server_info``; HOME on the writable /tmp (read-only root);
    the tokens from ``token_secret`` (``fwx.deploy.access``)."""
    return [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "HOME", "value": "/tmp"},
        *token_env(token_secret),
    ]


def ports() -> list[dict[str, Any]]:
    # Order matters to KServe: the first port is the one its Service and probes route HTTP to.
    return [
        {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
        {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
    ]


def tmp_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, mount) for /tmp: the only writable path (load-probe children, runtime caches)."""
    return ({"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}, {"name": "tmp", "mountPath": "/tmp"})


def dump(documents: list[dict[str, Any]]) -> str:
    """Multi-document YAML, keys in the order built (kind and apiVersion first, as people write them)."""
    import yaml

    header = "# Generated by `fwx deploy`. Validated offline; review before applying.\n"
    return header + yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, explicit_start=True)
