"""Triton-style model configuration JSON of a served version (GET .../config, gRPC ModelConfig).

Clients such as perf_analyzer read ``max_batch_size`` and ``dims`` from here
(dims exclude the batch axis when ``max_batch_size`` > 0, as in Triton).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fwx.serving.version_policy import parse_version_policy
from fwx.signature import KSERVE_DTYPES, TensorSpec

if TYPE_CHECKING:
    from fwx.serving.config import ServerConfig
    from fwx.serving.models import LoadedModel


def _config_type(dtype: str) -> str:
    kserve = KSERVE_DTYPES[dtype]
    return "TYPE_STRING" if kserve == "BYTES" else f"TYPE_{kserve}"


def _io(spec: TensorSpec, batched: bool) -> dict[str, Any]:
    dims = spec.kserve_shape()
    return {"name": spec.name, "data_type": _config_type(spec.dtype), "dims": dims[1:] if batched else dims}


def _version_policy(text: str) -> dict[str, Any]:
    policy = parse_version_policy(text)
    if policy.kind == "all":
        return {"all": {}}
    if policy.kind == "specific":
        return {"specific": {"versions": list(policy.versions)}}
    return {"latest": {"num_versions": policy.count}}


def triton_config(model: LoadedModel, config: ServerConfig) -> dict[str, Any]:
    """The config of one version: platform, batching, queue policy, inputs and outputs."""
    batched = bool(model.batchable)
    out: dict[str, Any] = {
        "name": model.name,
        "platform": model.platform,
        "max_batch_size": config.max_batch_size if batched else 0,
        "input": [_io(s, batched) for s in model.signature.inputs],
        "output": [_io(s, batched) for s in model.signature.outputs],
        "version_policy": _version_policy(config.version_policy),
        "instance_group": [
            {
                "name": model.name,
                "count": config.instances,
                "kind": "KIND_CPU" if config.device == "cpu" else "KIND_GPU",
            }
        ],
        "parameters": {"format": {"string_value": model.format.value}},
    }
    if batched:
        out["dynamic_batching"] = {
            "max_queue_delay_microseconds": int(config.max_queue_delay_ms * 1000),
            "default_queue_policy": {
                "max_queue_size": config.max_queue_size,
                "default_timeout_microseconds": int(config.request_timeout_s * 1_000_000),
                "timeout_action": "REJECT",
            },
        }
    return out
