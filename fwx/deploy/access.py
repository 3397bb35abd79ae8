"""Who may reach the server, and where its tokens come from: a NetworkPolicy and Secret-backed env.

Tokens never appear in a manifest or on the container's command line: the
container reads ``FWX_API_TOKEN`` / ``FWX_ADMIN_TOKEN`` (``fwx serve`` takes both
from the environment) from a Kubernetes Secret through ``secretKeyRef``, so
``kubectl get -o yaml`` of the Deployment, and ``ps`` in the pod, show a
Secret's name, never its value.

The NetworkPolicy admits ingress to the HTTP and gRPC ports only from the
pods and namespaces named; health probes come from the kubelet on the node,
which NetworkPolicies do not filter. Egress is left open: the storage
initializer of a non-PVC repository must download the models.
"""

from __future__ import annotations

import re
from typing import Any

from fwx.errors import UsageError

#: Keys fwx reads from the token Secret, and the env var each becomes.
API_TOKEN_KEY = "api-token"
ADMIN_TOKEN_KEY = "admin-token"
#: A Secret name: a DNS-1123 subdomain.
SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: A label selector term KEY=VALUE (an optional DNS prefix on the key).
LABEL = re.compile(
    r"(?:[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
    r"=(?:[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
)
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def check_access_options(
    token_secret: str | None, network_policy: bool, allow_from: tuple[str, ...], allow_namespaces: tuple[str, ...]
) -> None:
    """One-line usage errors for the Secret name, the selectors, and selectors given without a policy."""
    if token_secret is not None and (len(token_secret) > 253 or not SECRET_NAME.fullmatch(token_secret)):
        raise UsageError(
            f"--token-secret {token_secret!r} is not a valid Secret name",
            hint="lower-case letters, digits, '-' and '.', e.g. mnist-tokens",
        )
    for term in allow_from:
        if not LABEL.fullmatch(term):
            raise UsageError(f"--allow-from {term!r} is not a pod label KEY=VALUE", hint="e.g. app=gateway")
    for ns in allow_namespaces:
        if not NAMESPACE.fullmatch(ns):
            raise UsageError(f"--allow-namespace {ns!r} is not a namespace name", hint="e.g. monitoring")
    if (allow_from or allow_namespaces) and not network_policy:
        raise UsageError("--allow-from and --allow-namespace shape a NetworkPolicy", hint="add --network-policy")


def token_env(token_secret: str | None) -> list[dict[str, Any]]:
    """``FWX_API_TOKEN`` (required key) and ``FWX_ADMIN_TOKEN`` (optional key) from the Secret."""
    if token_secret is None:
        return []

    def ref(key: str, optional: bool) -> dict[str, Any]:
        return {"secretKeyRef": {"name": token_secret, "key": key, "optional": optional}}

    return [
        {"name": "FWX_API_TOKEN", "valueFrom": ref(API_TOKEN_KEY, False)},
        {"name": "FWX_ADMIN_TOKEN", "valueFrom": ref(ADMIN_TOKEN_KEY, True)},
    ]


def network_policy(
    metadata: dict[str, Any],
    pod_labels: dict[str, str],
    allow_from: tuple[str, ...],
    allow_namespaces: tuple[str, ...],
) -> dict[str, Any]:
    """Ingress to the serving ports from the named pods (this namespace) and namespaces; by default this
    namespace's pods only."""
    peers: list[dict[str, Any]] = []
    if allow_from:
        labels = dict(term.split("=", 1) for term in allow_from)
        peers.append({"podSelector": {"matchLabels": labels}})
    peers += [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}} for ns in allow_namespaces]
    if not peers:
        peers = [{"podSelector": {}}]
    ports = [{"protocol": "TCP", "port": "http"}, {"protocol": "TCP", "port": "grpc"}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": {"matchLabels": pod_labels},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": ports}],
        },
    }
