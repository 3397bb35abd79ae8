"""The data plane: every serving decision, shared by the REST and gRPC transports.

Transports decode into ``fwx.serving.types``, call one method here, encode the
answer, and map ``FwxError`` to their status codes in one place each. Nothing
here knows about HTTP or protobuf. Every request policy lives here so the two
transports cannot disagree: who may call what (``ACCESS``: public, API token,
admin token; the transport only passes the ``Authorization`` value it got),
which failures are counted and how, index filtering, and the TF Serving
status/metadata lookups. The hot path (``handle_infer`` -> ``infer``) costs an
optional token compare, a routing lookup, a precomputed signature check, and
one await on the model's batcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hmac
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from fwx import __version__
from fwx.decimal_text import is_digits
from fwx.errors import (
    DeadlineExceededError,
    FwxError,
    ServingError,
    UnauthenticatedError,
    UnavailableError,
)
from fwx.serving.batching.hooks import BatchingHooks, ModelSlot
from fwx.serving.codecs import datatype_of
from fwx.serving.control import bearer_token, check_admin, check_request_model_name
from fwx.serving.deadlines import timeout_seconds
from fwx.serving.failures import failure_reason
from fwx.serving.metrics import Metrics
from fwx.serving.tasks.plane import TaskPlane
from fwx.serving.types import InferRequest, InferResponse, InferTensor
from fwx.signature import KSERVE_DTYPES, Signature, TensorSpec

if TYPE_CHECKING:
    from fwx.serving.config import ServerConfig
    from fwx.serving.models import LoadedModel, ModelManager

_D = TypeVar("_D")


class Access(enum.Enum):
    """Who may call an operation: anyone, holders of ``--api-token``, holders of ``--admin-token``."""

    PUBLIC = "public"
    API = "api"
    ADMIN = "admin"


#: The one access table: every data-plane operation a transport exposes, by name.
ACCESS: dict[str, Access] = {
    "live": Access.PUBLIC,
    "ready": Access.PUBLIC,
    "server_metadata": Access.PUBLIC,
    "metrics": Access.PUBLIC,
    "openapi": Access.PUBLIC,
    "model_ready": Access.API,
    "model_metadata": Access.API,
    "model_config": Access.API,
    "model_statistics": Access.API,
    "repository_index": Access.API,
    "infer": Access.API,  # also generation and text tasks (fwx.serving.tasks)
    "model_status": Access.API,
    "served_model": Access.API,
    "load_model": Access.ADMIN,
    "unload_model": Access.ADMIN,
}

EXTENSIONS = [
    "binary_tensor_data",
    "parameters",
    "statistics",
    "model_configuration",
    "model_repository",
    "schedule_policy",
    "generate",
    "tf_serving_rest",
]


class DataPlane:
    """All serving logic over one ``ModelManager``."""

    def __init__(
        self, manager: ModelManager, config: ServerConfig, metrics: Metrics, hooks: BatchingHooks | None = None
    ) -> None:
        self.manager = manager
        self.config = config
        self.metrics = metrics
        self._hooks = hooks or BatchingHooks(config, metrics)
        self._closing = False
        self._unready = False  # --shutdown-delay-seconds: not ready, still serving
        self._inflight = 0
        self.tasks = TaskPlane(self)  # text in, answers out; generation (fwx.serving.tasks)

    # ------------------------------------------------------------------ access
    def authorize(self, operation: str, auth: str | None) -> None:
        """Refuse ``operation`` unless ``auth`` (the raw ``Authorization`` value) may call it.

        API routes need ``--api-token`` when one is set (401, counted as
        ``unauthenticated``); model control needs ``--admin-token`` (403 when
        control is off, 401 for a missing or wrong token). Tokens compare in
        constant time.
        """
        access = ACCESS[operation]
        if access is Access.ADMIN:
            check_admin(self.config, auth)
        elif access is Access.API and self.config.api_token:
            self.check_api_token(auth)

    def check_api_token(self, token: str | None) -> None:
        """``--api-token``: inference and model routes need ``Authorization: Bearer TOKEN``."""
        expected = self.config.api_token
        if not expected:
            return
        given = bearer_token(token)
        if given is None or not hmac.compare_digest(given.encode(), expected.encode()):
            self.metrics.count_failure("unauthenticated")
            raise UnauthenticatedError(
                "missing or invalid API token",
                hint="send 'Authorization: Bearer TOKEN' (gRPC: 'authorization' metadata)",
            )

    # ------------------------------------------------------------------ health
    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        ready = not self._closing and not self._unready and self.manager.ready
        self.metrics.ready = ready
        return ready

    def model_ready(self, name: str, version: str | None, *, auth: str | None = None) -> bool:
        self.authorize("model_ready", auth)
        if self._closing or self._unready:
            return False
        try:
            self.manager.get(name, version)
        except FwxError:
            return False
        return True

    @property
    def closing(self) -> bool:
        return self._closing

    def mark_unready(self) -> None:
        """Readiness false, inference still served: the load balancer's grace to notice (SIGTERM + delay)."""
        self._unready = True
        self.metrics.ready = False

    def begin_shutdown(self) -> None:
        """Readiness false at once; every new inference is answered 503 / UNAVAILABLE."""
        self._closing = True
        self.metrics.ready = False

    async def drain(self, timeout: float) -> bool:
        """Wait until no inference is in flight (True) or ``timeout`` passes (False)."""
        end = time.monotonic() + timeout
        while self._inflight > 0:
            if time.monotonic() >= end:
                return False
            await asyncio.sleep(0.01)
        return True

    @property
    def inflight(self) -> int:
        return self._inflight

    @contextlib.contextmanager
    def tracked(self) -> Iterator[None]:
        """Count a request that runs outside ``infer`` (a generation stream) as in flight: drain waits for it."""
        self._inflight += 1
        try:
            yield
        finally:
            self._inflight -= 1

    def abort_queued(self) -> None:
        """Fail every queued request with 503 (a forced stop); running batches still finish."""
        for batcher in list(self._hooks.batchers):
            batcher.close()

    def metrics_text(self, accept: str | None = None) -> tuple[bytes, str]:
        """The Prometheus exposition (OpenMetrics if ``accept`` asks) and its content type, readiness refreshed."""
        self.ready()
        return self.metrics.negotiate(accept)

    # ---------------------------------------------------------------- metadata
    def server_metadata(self) -> dict[str, Any]:
        from fwx.safety.sandbox import status
        from fwx.safety.walls import report

        # "sandbox" and "walls" are fwx's own fields beside the v2 protocol's three: whether loads run inside
        # Landlock, and every wall around this worker (up or missing, and why)
        meta = {"name": "fwx", "version": __version__, "extensions": list(EXTENSIONS), "sandbox": status.to_json()}
        return meta | {"walls": report().as_json()}

    def signature(self, name: str, version: str | None) -> Signature:
        """The served signature (decoders read it after ``authorize``; no access check here)."""
        return self.manager.get(name, version).signature

    def served_model(self, name: str, version: str | None, *, auth: str | None = None) -> LoadedModel:
        """The version a request for (name, version) reaches (TF Serving ``/metadata``)."""
        self.authorize("served_model", auth)
        return self.manager.get(name, version)

    def model_metadata(self, name: str, version: str | None, *, auth: str | None = None) -> dict[str, Any]:
        self.authorize("model_metadata", auth)
        m = self.manager.get(name, version)
        return {
            "name": m.name,
            "versions": [str(v) for v in self.manager.versions(name)],
            "platform": m.platform,
            "inputs": [_tensor_meta(s) for s in m.signature.inputs],
            "outputs": [_tensor_meta(s) for s in m.signature.outputs],
            "parameters": {"format": m.format.value},
        }

    def model_config(self, name: str, version: str | None, *, auth: str | None = None) -> dict[str, Any]:
        from fwx.serving.model_config import triton_config

        self.authorize("model_config", auth)
        return triton_config(self.manager.get(name, version), self.config)

    def model_statistics(self, name: str | None, version: str | None, *, auth: str | None = None) -> dict[str, Any]:
        self.authorize("model_statistics", auth)
        if name:
            self.manager.get(name, version)  # NotFoundError for an unknown model or version
        stats = [
            s
            for s in self.metrics.models()
            if (not name or s.model == name) and (not version or s.version == str(version))
        ]
        stats.sort(key=lambda s: (s.model, int(s.version) if is_digits(s.version) else 0))
        return {"model_stats": [s.triton_json() for s in stats]}

    def repository_index(self, *, ready_only: bool = False, auth: str | None = None) -> list[dict[str, Any]]:
        """Every model/version seen, or only the READY ones (``{"ready": true}``)."""
        self.authorize("repository_index", auth)
        entries = list(self.manager.index())
        return [e for e in entries if e.get("state") == "READY"] if ready_only else entries

    def model_status(self, name: str, version: str | None, *, auth: str | None = None) -> list[dict[str, Any]]:
        """The index entries of one model (or one version of it); 404 naming what is missing."""
        self.authorize("model_status", auth)
        if version is not None and is_digits(version):
            version = str(int(version))  # "02" is version 2, as for every other route
        entries = [
            e for e in self.manager.index() if e["name"] == name and (version is None or str(e["version"]) == version)
        ]
        if not entries:
            self.manager.get(name, version)  # raises NotFoundError naming what is missing
        return entries

    # ----------------------------------------------------------- model control
    async def load_model(self, name: str, *, auth: str | None = None) -> None:
        self.authorize("load_model", auth)
        await self.manager.load(check_request_model_name(name))

    async def unload_model(self, name: str, *, auth: str | None = None) -> None:
        self.authorize("unload_model", auth)
        await self.manager.unload(check_request_model_name(name))

    # --------------------------------------------------------------- inference
    async def handle_infer(
        self, decode: Callable[[], Awaitable[tuple[InferRequest, _D]]], *, auth: str | None = None
    ) -> tuple[InferRequest, _D, InferResponse]:
        """What every transport calls: authorize, decode (a failure is counted), infer.

        ``decode`` runs only after the caller is authorized (REST reads the body
        there); it returns the request and whatever the transport needs to
        encode the answer, handed back untouched.
        """
        self.authorize("infer", auth)
        try:
            request, extra = await decode()
        except FwxError as exc:
            self.metrics.count_failure(failure_reason(exc))
            raise
        return request, extra, await self.infer(request)

    async def stream_infer(
        self, decode: Callable[[], Awaitable[tuple[InferRequest, Any]]], *, auth: str | None = None
    ) -> AsyncIterator[InferResponse]:
        """One request of a stream (gRPC ``ModelStreamInfer``): a generation in the generate form answers once
        per text delta, as Triton's decoupled LLM backends do; any other request answers once, as ``infer``."""
        self.authorize("infer", auth)
        try:
            request, _ = await decode()
        except FwxError as exc:
            self.metrics.count_failure(failure_reason(exc))
            raise
        if self.tasks.generates(request):
            async for response in self.tasks.stream_infer(request, auth):
                yield response
            return
        yield await self.infer(request)

    async def infer(self, request: InferRequest) -> InferResponse:
        """Check against the pinned signature, batch, run, and return the requested outputs (no access check)."""
        t0 = time.perf_counter_ns()
        if self._closing:
            self.metrics.count_failure("shutting_down")
            raise UnavailableError("the server is shutting down", hint="retry against another replica")
        try:
            model = self.manager.get(request.model_name, request.model_version)
        except FwxError as exc:
            self.metrics.count_failure(failure_reason(exc))
            raise
        slot: ModelSlot = model.slot or self._hooks.attach(model)  # a manager built without our hooks
        self._inflight += 1
        try:
            if self.tasks.wants_text(model, request):  # BYTES text for a model that takes token ids
                response = await self.tasks.infer_text(model, slot, request, self._deadline(request))
            else:
                arrays, rows = slot.plan.check(request.inputs)
                if request.outputs:
                    slot.plan.check_outputs(request.outputs)
                outputs = await slot.batcher.submit(arrays, rows, self._deadline(request))
                response = _response(model, request, slot, outputs)
        except (FwxError, asyncio.CancelledError) as exc:
            slot.stats.record_request(False, time.perf_counter_ns() - t0, failure_reason(exc))
            raise
        finally:
            self._inflight -= 1
        slot.stats.record_request(True, time.perf_counter_ns() - t0)
        return response

    def _deadline(self, request: InferRequest) -> float | None:
        now = time.monotonic()
        deadline = request.deadline
        timeout_s = timeout_seconds(request.parameters)  # "timeout" in µs (Triton), "timeout_ms" in ms
        if timeout_s is not None:
            deadline = _earliest(deadline, now + timeout_s)
        if self.config.request_timeout_s > 0:
            deadline = _earliest(deadline, now + self.config.request_timeout_s)
        if deadline is not None and deadline <= now:
            raise DeadlineExceededError("the request's deadline passed before it was queued", hint="raise the timeout")
        return deadline


def _earliest(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def _tensor_meta(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "datatype": KSERVE_DTYPES[spec.dtype], "shape": spec.kserve_shape()}


def _response(model: LoadedModel, request: InferRequest, slot: ModelSlot, outputs: dict[str, Any]) -> InferResponse:
    names = [o.name for o in request.outputs] if request.outputs else (slot.plan.output_names or list(outputs))
    tensors = []
    for name in names:
        arr = outputs.get(name)
        if arr is None:
            raise ServingError(
                f"model {model.name} did not return output {name!r}",
                hint="the artifact's outputs differ from fwx.json; re-export it",
            )
        tensors.append(InferTensor(name, datatype_of(arr), list(arr.shape), arr))
    return InferResponse(model.name, str(model.version), tensors, id=request.id)


def build_dataplane(config: ServerConfig, metrics: Metrics | None = None) -> DataPlane:
    """A data plane over a new ``ModelManager`` wired to the batching hooks (call ``manager.start()``)."""
    from fwx.serving.models import ModelManager

    metrics = metrics or Metrics(device=config.device)
    hooks = BatchingHooks(config, metrics)
    manager = ModelManager(config.repository, config, on_load=_on_load(hooks), on_unload=hooks.on_unload)
    metrics.manager = manager
    return DataPlane(manager, config, metrics, hooks)


def _on_load(hooks: BatchingHooks) -> Callable[[LoadedModel], None]:
    """The batching hook, then the media tasks' processor check (one warning at load for an unsupported one)."""
    from fwx.serving.tasks.media_load import check_at_load

    def on_load(model: LoadedModel) -> None:
        hooks.on_load(model)
        check_at_load(model)

    return on_load
