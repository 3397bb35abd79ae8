"""Offline validation of generated manifests, the way a cluster would judge them.

* Core kinds: ``kubernetes-validate`` in strict mode (unknown fields are errors) against the
  schemas of one pinned Kubernetes version.
* KServe kinds: KServe's own CRD ``openAPIV3Schema`` (vendored under ``schemas/kserve``, see
  SOURCE.md there), made strict the way server-side field validation is: every object schema
  that lists its properties and does not preserve unknown fields refuses others. The CRD leaves
  ``metadata`` open, so it is checked as core ObjectMeta.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
from pathlib import Path
from typing import Any

import kubernetes_validate

#: The Kubernetes version manifests are validated against (kubernetes-validate ships its schemas).
K8S_VERSION = "1.33.0"
SCHEMAS = Path(__file__).parent / "schemas" / "kserve"
CRD_FILES = {
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "servingruntimes.v1alpha1.json.gz",
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "clusterservingruntimes.v1alpha1.json.gz",
    ("serving.kserve.io/v1beta1", "InferenceService"): "inferenceservices.v1beta1.json.gz",
}


class ManifestError(AssertionError):
    pass


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@functools.cache
def _crd_validator(filename: str) -> Any:
    import jsonschema

    schema = _strict(json.loads(gzip.decompress((SCHEMAS / filename).read_bytes())))
    return jsonschema.Draft7Validator(schema)


def validate_core(doc: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(str(p) for p in exc.path)
        raise ManifestError(f"{doc.get('kind')}: {path}: {exc.message}") from None
    except kubernetes_validate.SchemaNotFoundError as exc:
        raise ManifestError(exc.message) from None


def validate_kserve(doc: dict[str, Any]) -> None:
    key = (doc.get("apiVersion"), doc.get("kind"))
    validator = _crd_validator(CRD_FILES[key])  # type: ignore[index]
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        msgs = ["/".join(str(p) for p in e.path) + ": " + e.message for e in errors[:5]]
        raise ManifestError(f"{doc['kind']}: " + "; ".join(msgs))
    # ObjectMeta through the core schema: a ConfigMap is the smallest object that carries it.
    validate_core({"apiVersion": "v1", "kind": "ConfigMap", "metadata": copy.deepcopy(doc["metadata"])})


def validate(doc: dict[str, Any]) -> str:
    """Validate one document; returns which validator judged it."""
    if (doc.get("apiVersion"), doc.get("kind")) in CRD_FILES:
        validate_kserve(doc)
        return "kserve-crd"
    validate_core(doc)
    return f"kubernetes-{K8S_VERSION}-strict"
