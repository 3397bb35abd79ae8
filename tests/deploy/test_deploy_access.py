"""``fwx deploy``: tokens from a Kubernetes Secret (never in the manifest), a NetworkPolicy, a bounded model volume.

The end-to-end test plays the kubelet: it resolves the container's env from a Secret the way a pod
gets it and runs the manifest's own command line, so the token path is the one a cluster would use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import serving_models
import yaml
from fleet import free_port
from manifest_schemas import validate

from fwx.deploy.k8s import K8sOptions, render_k8s
from fwx.deploy.kserve import KServeOptions, render_kserve
from fwx.errors import UsageError

SECRET_VALUE = "s3cr3t-token-value"  # what a Secret would hold; must never reach a manifest


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _k8s(**kw: Any) -> list[dict[str, Any]]:
    return _docs(render_k8s(K8sOptions(**{"name": "mnist", "repo_uri": "s3://bucket/artifacts", **kw})))


def _kserve(**kw: Any) -> list[dict[str, Any]]:
    return _docs(render_kserve(KServeOptions(**{"name": "mnist", "repo_uri": "s3://bucket/artifacts", **kw})))


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec = docs[0]["spec"]
    return (spec["template"]["spec"] if "template" in spec else spec)["containers"][0]


@pytest.mark.parametrize("render", [_k8s, _kserve])
def test_tokens_come_from_the_secret_by_reference(render: Any) -> None:
    docs = render(token_secret="mnist-tokens")
    ctr = _container(docs)
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in ctr["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert refs == {
        "FWX_API_TOKEN": {"name": "mnist-tokens", "key": "api-token", "optional": False},
        "FWX_ADMIN_TOKEN": {"name": "mnist-tokens", "key": "admin-token", "optional": True},
    }
    assert not any("token" in a for a in ctr["args"]), ctr["args"]  # not on the command line either
    for d in docs:
        validate(d)


def test_without_a_secret_no_token_env() -> None:
    assert not any(e["name"].startswith("FWX_") for e in _container(_k8s())["env"])


def test_deploy_has_no_flag_that_puts_a_token_in_the_manifest() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "fwx", "deploy", "k8s", "s3://b/a", "--name", "m", "--api-token", SECRET_VALUE],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert SECRET_VALUE not in res.stdout


@pytest.mark.parametrize(
    ("kw", "peers"),
    [
        ({}, [{"podSelector": {}}]),
        (
            {"allow_from": ("app=gateway",), "allow_namespaces": ("monitoring",)},
            [
                {"podSelector": {"matchLabels": {"app": "gateway"}}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
            ],
        ),
    ],
)
def test_network_policy_admits_only_the_named_peers_to_the_serving_ports(kw: dict[str, Any], peers: Any) -> None:
    docs = _k8s(network_policy=True, namespace="ml", **kw)
    assert [d["kind"] for d in docs][-1] == "NetworkPolicy"
    policy = docs[-1]
    assert validate(policy).endswith("-strict")
    pod_labels = docs[0]["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"] == pod_labels  # it selects the Deployment's pods
    assert policy["metadata"]["namespace"] == "ml"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == peers
    container_ports = {p["name"] for p in docs[0]["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {p["port"] for p in rule["ports"]} == container_ports == {"http", "grpc"}


def test_kserve_network_policy_selects_the_predictor_pods() -> None:
    docs = _kserve(network_policy=True)
    policy = docs[-1]
    assert policy["kind"] == "NetworkPolicy"
    assert validate(policy).endswith("-strict")
    assert policy["spec"]["podSelector"]["matchLabels"] == {"serving.kserve.io/inferenceservice": "mnist"}


def test_no_network_policy_unless_asked() -> None:
    assert "NetworkPolicy" not in [d["kind"] for d in _k8s()]
    assert "NetworkPolicy" not in [d["kind"] for d in _kserve()]


def test_the_model_copy_has_a_size_limit() -> None:
    def models_volume(docs: list[dict[str, Any]]) -> dict[str, Any]:
        return next(v for v in docs[0]["spec"]["template"]["spec"]["volumes"] if v["name"] == "models")

    assert models_volume(_k8s()) == {"name": "models", "emptyDir": {"sizeLimit": "10Gi"}}
    assert models_volume(_k8s(model_volume_size="512Mi"))["emptyDir"] == {"sizeLimit": "512Mi"}
    pvc = models_volume(_k8s(repo_uri="pvc://models/artifacts"))
    assert "emptyDir" not in pvc  # a PVC is mounted, not copied


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"token_secret": "Bad_Name"}, "not a valid Secret name"),
        ({"network_policy": True, "allow_from": ("no-equals",)}, "not a pod label"),
        ({"network_policy": True, "allow_namespaces": ("Not_A_NS",)}, "not a namespace name"),
        ({"allow_from": ("app=gateway",)}, "add --network-policy"),
        ({"model_volume_size": "ten"}, "not a Kubernetes quantity"),
    ],
)
def test_bad_access_options_are_one_line_usage_errors(kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        K8sOptions(**{"name": "mnist", "repo_uri": "s3://b/a", **kw})


def _pod_env(container: dict[str, Any], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """The env a kubelet gives the container: literal values, and Secret keys by reference."""
    env: dict[str, str] = {}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in e["valueFrom"]:
            ref = e["valueFrom"]["secretKeyRef"]
            value = secrets.get(ref["name"], {}).get(ref["key"])
            assert value is not None or ref["optional"], f"pod would not start: {ref}"
            if value is not None:
                env[e["name"]] = value
    return env


@pytest.mark.slow
@pytest.mark.e2e
def test_the_manifests_token_path_protects_a_real_server(tmp_path: Path) -> None:
    docs = _k8s(token_secret="mnist-tokens")
    assert SECRET_VALUE not in yaml.safe_dump_all(docs)
    container = _container(docs)
    repo = tmp_path / "repo"
    serving_models.publish(repo, "linear", *serving_models.build_linear())
    args = list(container["args"])
    port = free_port()
    args[args.index("/mnt/models")] = str(repo)
    args[args.index("--host") + 1] = "127.0.0.1"
    args[args.index("--http-port") + 1] = str(port)
    args[args.index("--grpc-port") + 1] = "-1"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FWX_")}
    env.update(_pod_env(container, {"mnist-tokens": {"api-token": SECRET_VALUE}}))
    env["HOME"] = str(tmp_path)
    assert container["command"] == ["fwx"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "fwx", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = f"http://127.0.0.1:{port}"
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]})
    try:
        deadline = time.monotonic() + 120
        while True:  # readiness is public: the kubelet's probe needs no token
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "not ready after 120 s"
            time.sleep(0.1)
        infer = f"{url}/v2/models/linear/infer"
        assert httpx.post(infer, content=body, timeout=30).status_code == 401
        wrong = httpx.post(infer, content=body, headers={"Authorization": "Bearer nope"}, timeout=30)
        assert wrong.status_code == 401
        ok = httpx.post(infer, content=body, headers={"Authorization": f"Bearer {SECRET_VALUE}"}, timeout=30)
        assert ok.status_code == 200, ok.text
        assert ok.json()["outputs"][0]["data"] == [9.0]
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
