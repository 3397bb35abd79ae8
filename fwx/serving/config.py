"""Every knob of ``fwx serve`` in one dataclass, validated when built.

The CLI, the tests and the lead's walkthrough all build a ``ServerConfig``;
the manager, the data plane and both transports read it and nothing else, so
a flag means the same thing everywhere and no config file is needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fwx.errors import UsageError
from fwx.formats import Format, parse_format
from fwx.safety.limits import default_memory
from fwx.serving.control import check_tokens

#: Format chosen when a version holds several: the first one that loads wins.
DEFAULT_PREFER: tuple[Format, ...] = (Format.ONNX, Format.TORCHSCRIPT, Format.PT2, Format.SAVEDMODEL, Format.TFLITE)
SERVABLE: frozenset[Format] = frozenset(DEFAULT_PREFER)
MiB = 2**20


def parse_prefer(text: str | Iterable[str]) -> list[Format]:
    """``"onnx,torchscript"`` -> [Format.ONNX, Format.TORCHSCRIPT]; refuses source-only formats."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    out: list[Format] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        fmt = parse_format(part)
        if fmt not in SERVABLE:
            raise UsageError(
                f"fwx serve cannot serve {fmt} artifacts",
                hint="choose from " + ",".join(f.value for f in DEFAULT_PREFER),
            )
        if fmt not in out:
            out.append(fmt)
    if not out:
        raise UsageError("--prefer needs at least one format", hint="e.g. --prefer onnx,torchscript")
    return out


def preference_order(prefer: Iterable[Format], only: Iterable[Format] | None = None) -> list[Format]:
    """``--prefer`` is an order, not a filter: the named formats first, then every other servable one
    (default order); ``--only-formats`` is the filter."""
    head = list(prefer)
    order = head + [f for f in DEFAULT_PREFER if f not in head]
    allowed = set(only) if only else SERVABLE
    return [f for f in order if f in allowed]


def parse_overrides(items: Iterable[str], flag: str) -> dict[str, str]:
    """``["resnet=a,b"]`` -> {"resnet": "a,b"}: the per-model ``NAME=VALUE`` flags."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UsageError(f"cannot parse {flag} {item!r}", hint="write NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def parse_prefer_model(items: Iterable[str]) -> dict[str, list[Format]]:
    """``["resnet=tflite,onnx"]`` -> {"resnet": [TFLITE, ONNX]} (the ``--prefer-model`` flag)."""
    return {name: parse_prefer(fmts) for name, fmts in parse_overrides(items, "--prefer-model").items()}


@dataclass
class ServerConfig:
    """All settings of one server process; see docs/serve.md for each flag."""

    repository: Path
    host: str = "127.0.0.1"
    http_port: int = 8000  # 0 picks a free port, -1 disables HTTP
    grpc_port: int = 8001  # 0 picks a free port, -1 disables gRPC
    max_batch_size: int = 32
    max_queue_delay_ms: float = 2.0
    max_queue_size: int = 100
    max_body_bytes: int = 64 * MiB
    grpc_max_message_bytes: int = 64 * MiB
    request_timeout_s: float = 30.0
    prefer: list[Format] = field(default_factory=lambda: list(DEFAULT_PREFER))
    prefer_per_model: dict[str, list[Format]] = field(default_factory=dict)
    only_formats: list[Format] | None = None  # None: every servable format may be loaded
    device: str = "cpu"
    version_policy: str = "latest"
    version_policy_per_model: dict[str, str] = field(default_factory=dict)
    poll_seconds: float = 2.0  # 0 disables repository polling
    enable_model_control: bool = False
    admin_token: str | None = None
    api_token: str | None = None
    trust_model_code: bool = False
    allow_request_chat_template: bool = False  # a request's own chat_template (vLLM's opt-in likewise)
    require_sandbox: bool = False  # refuse to serve where a worker's wall cannot be taken
    no_sandbox: bool = False  # workers take no wall at all (fwx.serving.worker_walls); warned loudly
    memory_limit: int | None = field(default_factory=default_memory)  # each worker's RLIMIT_DATA (None: none)
    drain_seconds: float = 30.0
    model_name: str | None = None  # serve a repository that is one model's folder under this name (KServe)
    shutdown_delay_s: float = 0.0  # after SIGTERM: not ready but still serving, so load balancers catch up
    warmup: bool = True
    load_probe: bool = True  # load each new artifact once in a child process first (crash-safe)
    probe_spare: bool = True  # keep one pre-imported probe child per served format, so reloads skip the import
    instances: int = 1  # concurrent batches per model version (compute threads; CLI --instances)
    workers: int = 1  # serving processes sharing the ports (CLI --workers; fwx.serving.supervisor)
    reuse_port: bool = False  # SO_REUSEPORT on both listeners (set for supervised workers)
    log_level: str = "info"

    @classmethod
    def from_cli(cls, repository: Path, workers: int, options: Mapping[str, Any]) -> ServerConfig:
        """The config ``fwx serve`` runs: each flag mapped to its field once (sizes in MiB, negated switches)."""
        o = dict(options)
        only = o.pop("only_formats")
        return cls(
            repository=repository,
            workers=workers,
            prefer=parse_prefer(o.pop("prefer")),
            prefer_per_model=parse_prefer_model(o.pop("prefer_model")),
            only_formats=parse_prefer(only) if only is not None else None,
            max_body_bytes=int(o.pop("max_body_mb") * MiB),
            grpc_max_message_bytes=int(o.pop("grpc_max_message_mb") * MiB),
            version_policy_per_model=parse_overrides(o.pop("version_policy_model"), "--version-policy-model"),
            shutdown_delay_s=o.pop("shutdown_delay_seconds"),
            warmup=not o.pop("no_warmup"),
            load_probe=not o.pop("no_load_probe"),
            probe_spare=not o.pop("no_probe_spare"),
            **o,  # the rest are named as the fields are
        )

    def __post_init__(self) -> None:
        self.repository = Path(self.repository)
        only = parse_prefer([str(f) for f in self.only_formats]) if self.only_formats is not None else None
        self.only_formats = only
        self.prefer = preference_order(parse_prefer([str(f) for f in self.prefer]), only)
        self.prefer_per_model = {
            k: preference_order(parse_prefer([str(f) for f in v]), only) for k, v in self.prefer_per_model.items()
        }
        self._check_ranges()
        check_tokens(self)
        if self.model_name is not None:
            from fwx.repository import check_model_name

            check_model_name(self.model_name)
        from fwx.serving.version_policy import parse_version_policy

        for policy in (self.version_policy, *self.version_policy_per_model.values()):
            parse_version_policy(policy)

    def _check_ranges(self) -> None:
        for name in ("http_port", "grpc_port"):
            port = getattr(self, name)
            if not -1 <= port <= 65535:
                raise UsageError(
                    f"--{name.replace('_', '-')} {port} is not a port",
                    hint="use 1-65535, 0 for any free port, -1 to disable",
                )
        positive = {
            "max_batch_size": self.max_batch_size,
            "max_queue_size": self.max_queue_size,
            "max_body_bytes": self.max_body_bytes,
            "grpc_max_message_bytes": self.grpc_max_message_bytes,
            "instances": self.instances,
            "workers": self.workers,
        }
        for name, value in positive.items():
            if value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        non_negative = {
            "max_queue_delay_ms": self.max_queue_delay_ms,
            "request_timeout_s": self.request_timeout_s,
            "poll_seconds": self.poll_seconds,
            "drain_seconds": self.drain_seconds,
            "shutdown_delay_seconds": self.shutdown_delay_s,
        }
        for name, fvalue in non_negative.items():
            if fvalue < 0:
                raise UsageError(f"--{name.replace('_', '-')} must not be negative, got {fvalue}")
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise UsageError(f"unknown device {self.device!r}", hint="use cpu, cuda or cuda:N")
        if self.log_level.lower() not in ("critical", "error", "warning", "info", "debug"):
            raise UsageError(f"unknown log level {self.log_level!r}", hint="use error, warning, info or debug")

    def prefer_for(self, model: str) -> list[Format]:
        """The format preference of one model: its ``--prefer-model`` override, else ``--prefer``."""
        return self.prefer_per_model.get(model, self.prefer)
