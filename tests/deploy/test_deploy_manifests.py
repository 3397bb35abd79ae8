"""``fwx deploy``: every generated manifest validates offline (core: kubernetes-validate strict;
KServe: its own CRD schemas), golden files per generator, and the numbers that make rollouts lossless."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from manifest_schemas import ManifestError, validate

from fwx.deploy.k8s import K8sOptions, render_k8s
from fwx.deploy.kserve import KServeOptions, render_kserve
from fwx.errors import UsageError

GOLDEN = Path(__file__).parent / "golden"

KSERVE_CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "cluster-gpu": {"cluster": True, "gpu": True, "model_format": "pytorch", "repo_uri": "pvc://models/artifacts"},
    "namespaced": {
        "namespace": "ml",
        "service_account": "s3-reader",
        "model_format": "tensorflow",
        "image": "registry.example/fwx:0.1.0",
        "replicas": 1,
        "max_replicas": 3,
    },
}
K8S_CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "s3-init": {"repo_uri": "s3://bucket/artifacts", "service_account": "s3-reader", "namespace": "ml"},
    "gpu-queue-depth": {"gpu": True, "queue_depth_target": 4, "replicas": 1, "max_replicas": 4},
}


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _kserve(**kw: Any) -> str:
    return render_kserve(KServeOptions(**{"name": "mnist", "repo_uri": "s3://bucket/artifacts", **kw}))


def _k8s(**kw: Any) -> str:
    return render_k8s(K8sOptions(**{"name": "mnist", "repo_uri": "pvc://models/artifacts", **kw}))


@pytest.mark.parametrize("case", KSERVE_CASES)
def test_kserve_manifests_validate_against_kserve_crds(case: str) -> None:
    docs = _docs(_kserve(**KSERVE_CASES[case]))
    assert [d["kind"] for d in docs] == [
        "ClusterServingRuntime" if KSERVE_CASES[case].get("cluster") else "ServingRuntime",
        "InferenceService",
    ]
    assert {validate(d) for d in docs} == {"kserve-crd"}


@pytest.mark.parametrize("case", K8S_CASES)
def test_k8s_manifests_validate_strictly(case: str) -> None:
    docs = _docs(_k8s(**K8S_CASES[case]))
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"]
    for d in docs:
        assert validate(d).endswith("-strict")


@pytest.mark.parametrize(
    ("render", "mutate", "needle"),
    [
        (_k8s, lambda d: d[0]["spec"]["template"]["spec"]["containers"][0].update(readinesProbe={}), "readinesProbe"),
        (_k8s, lambda d: d[0]["spec"].update(replicas="two"), "replicas"),
        (_kserve, lambda d: d[0]["spec"]["containers"][0].update(imagePullPolice="Always"), "imagePullPolice"),
        (_kserve, lambda d: d[0]["spec"]["supportedModelFormats"][0].update(priority=0), "priority"),
        (_kserve, lambda d: d[1]["spec"]["predictor"]["model"].update(storageURI="s3://x"), "storageURI"),
        (_kserve, lambda d: d[1]["metadata"].update(labelz={}), "labelz"),
    ],
)
def test_validators_reject_what_a_cluster_would(render: Any, mutate: Any, needle: str) -> None:
    docs = _docs(render())
    mutate(docs)
    errors = []
    for d in docs:
        try:
            validate(d)
        except ManifestError as exc:
            errors.append(str(exc))
    assert len(errors) == 1, errors
    assert needle in errors[0]


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("FWX_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} changed; rerun with FWX_UPDATE_GOLDEN=1 and review"


def test_kserve_golden() -> None:
    _golden("kserve.yaml", _kserve(token_secret="mnist-tokens", network_policy=True))


def test_k8s_golden() -> None:
    _golden(
        "k8s.yaml",
        _k8s(
            repo_uri="s3://bucket/artifacts",
            queue_depth_target=4,
            token_secret="mnist-tokens",
            network_policy=True,
            allow_namespaces=("monitoring",),
        ),
    )


def test_grace_period_outlasts_delay_plus_drain_and_server_gets_both() -> None:
    dep = _docs(_k8s(shutdown_delay_seconds=7, drain_seconds=45))[0]
    pod = dep["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--shutdown-delay-seconds") + 1] == "7"
    assert args[args.index("--drain-seconds") + 1] == "45"
    assert pod["terminationGracePeriodSeconds"] > 7 + 45
    isvc = _docs(_kserve(shutdown_delay_seconds=7, drain_seconds=45))[1]
    assert isvc["spec"]["predictor"]["terminationGracePeriodSeconds"] > 7 + 45


def test_pod_is_locked_down_and_repository_read_only() -> None:
    for uri in ("pvc://models/artifacts", "gs://bucket/artifacts"):
        pod = _docs(_k8s(repo_uri=uri))[0]["spec"]["template"]["spec"]
        ctr = pod["containers"][0]
        sec = ctr["securityContext"]
        assert sec["readOnlyRootFilesystem"]
        assert sec["runAsNonRoot"]
        assert sec["capabilities"]["drop"] == ["ALL"]
        assert sec["allowPrivilegeEscalation"] is False
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        models = next(m for m in ctr["volumeMounts"] if m["name"] == "models")
        assert models == {
            "name": "models",
            "mountPath": "/mnt/models",
            "readOnly": True,
            **({"subPath": "artifacts"} if uri.startswith("pvc") else {}),
        }
        assert ctr["resources"]["requests"]
        assert ctr["resources"]["limits"]
        if uri.startswith("gs"):
            assert pod["initContainers"][0]["args"] == [uri, "/mnt/models"]


def test_runtime_declares_fwx_formats_and_kserve_ports() -> None:
    runtime, isvc = _docs(_kserve())
    assert {f["name"] for f in runtime["spec"]["supportedModelFormats"]} == {"onnx", "tensorflow", "tflite", "pytorch"}
    assert all(f["autoSelect"] for f in runtime["spec"]["supportedModelFormats"])
    assert "v2" in runtime["spec"]["protocolVersions"]
    ctr = runtime["spec"]["containers"][0]
    assert [(p["name"], p["containerPort"]) for p in ctr["ports"]] == [("http", 8080), ("grpc", 8081)]
    assert ctr["args"][:2] == ["serve", "/mnt/models"]
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert isvc["spec"]["predictor"]["model"]["storageUri"] == "s3://bucket/artifacts"
    assert isvc["spec"]["predictor"]["model"]["runtime"] == runtime["metadata"]["name"]


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"repo_uri": "./artifacts"}, "not a storage URI"),
        ({"repo_uri": "/data/artifacts"}, "not a storage URI"),
        ({"repo_uri": "s3://"}, "names no bucket"),
        ({"name": "My_Model"}, "not a valid Kubernetes name"),
        ({"cpu_limit": "two"}, "not a Kubernetes quantity"),
        ({"replicas": 0}, "between 1"),
        ({"drain_seconds": -1}, "must not be negative"),
    ],
)
def test_bad_options_are_one_line_usage_errors(kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        K8sOptions(**{"name": "mnist", "repo_uri": "s3://b/a", **kw})
    with pytest.raises(UsageError, match=needle):
        KServeOptions(**{"name": "mnist", "repo_uri": "s3://b/a", **kw})
