"""The model manager: which versions are loaded, and the routing table the data plane reads.

Loads happen in loader threads (verify checksums, probe in a child process, load,
warm up); the event loop only swaps the routing table, in one assignment, once
a new version has answered a warm-up inference. The version it replaces leaves
the table first and is then drained (``on_unload`` awaits its batcher) and
closed, so a request never sees a half-loaded or closed model. A version that
fails to load is recorded as FAILED and the previous one keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableSet
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fwx.decimal_text import is_digits
from fwx.errors import ForbiddenError, FwxError, InputError, NotFoundError, UnavailableError
from fwx.formats import Format, parse_format
from fwx.manifest import Manifest
from fwx.runtimes.base import Runtime
from fwx.serving.config import DEFAULT_PREFER
from fwx.serving.control import resolve_model_dir
from fwx.serving.loader import PLATFORMS, LoadSettings, is_batchable, load_version
from fwx.serving.loader_probe import ProbeLimits, drop_spares, keep_warm, kill_active_probes
from fwx.serving.scan import Fingerprint, Scanner
from fwx.serving.version_policy import VersionPolicy, parse_version_policy, policy_for
from fwx.signature import Signature
from fwx.sources.boundary import Admitted

if TYPE_CHECKING:
    from fwx.serving.config import ServerConfig

log = logging.getLogger("fwx.serving")
T = TypeVar("T")

READY, UNAVAILABLE, LOADING, FAILED = "READY", "UNAVAILABLE", "LOADING", "FAILED"


@dataclass(eq=False)
class LoadedModel:
    """One served version. ``slot`` is its serving state (batcher, plan, stats), attached by the load hook."""

    name: str
    version: int
    format: Format
    runtime: Runtime
    signature: Signature
    manifest: Manifest
    path: Path
    platform: str
    batchable: bool
    # A batching.hooks.ModelSlot; Any because batching sits above this module (hooks and the data plane,
    # which read it, annotate it), so models need not import upward.
    slot: Any = None
    inflight: int = 0
    snapshot: Admitted | None = None  # the private copy the runtime was loaded from (fwx.sources.boundary)

    def close(self) -> None:
        """Close the runtime, then drop its private copy; hand freed heap back to the OS."""
        try:
            _close_and_trim(self.runtime)
        finally:
            if self.snapshot is not None:
                self.snapshot.discard()

    @contextlib.contextmanager
    def use(self) -> Iterator[LoadedModel]:
        """Count a request that runs this model outside the batcher; unload waits for it (loop only)."""
        self.inflight += 1
        try:
            yield self
        finally:
            self.inflight -= 1


@dataclass
class _Record:
    state: str
    reason: str = ""
    fingerprint: Fingerprint | None = None


def _formats(items: Iterable[Any]) -> tuple[Format, ...]:
    return tuple(i if isinstance(i, Format) else parse_format(str(i)) for i in items)


class ModelManager:
    """Discovers, loads, hot-reloads and unloads the models of one repository."""

    def __init__(
        self,
        repository: Path,
        config: ServerConfig,
        *,
        on_load: Callable[[LoadedModel], None] | None = None,
        on_unload: Callable[[LoadedModel], Awaitable[None]] | None = None,
        on_load_failure: Callable[[str, int, str], None] | None = None,
    ) -> None:
        self.repository = Path(repository)
        self.config = config
        self.on_load = on_load
        self.on_unload = on_unload
        self.on_load_failure = on_load_failure
        #: Per-model counters, for metrics (fwx_model_load_failures_total, fwx_model_loads_total).
        self.load_failures: Counter[str] = Counter()
        self.loads: Counter[str] = Counter()
        self._policy = parse_version_policy(str(getattr(config, "version_policy", "latest") or "latest"))
        self._policy_per_model: dict[str, VersionPolicy] = {
            k: parse_version_policy(str(v))
            for k, v in (getattr(config, "version_policy_per_model", None) or {}).items()
        }
        self._prefer = _formats(getattr(config, "prefer", None) or DEFAULT_PREFER)
        self._prefer_per_model = {k: _formats(v) for k, v in (getattr(config, "prefer_per_model", None) or {}).items()}
        self._routes: dict[str, dict[int, LoadedModel]] = {}
        self._records: dict[str, dict[int, _Record]] = {}
        self._known: set[str] = set()
        self._disabled: set[str] = set()
        # Artifacts whose probe child already passed (a worker of --workers N shares the set with the others).
        self.probed: MutableSet[str] = set()
        # False under the worker supervisor: a first load's crash kills only that worker, which the
        # supervisor quarantines, so the probe child (a second import and load) is not needed then.
        self.probe_first_loads = True
        # Hot reloads probe in a child; keep one pre-imported child per served format so that a reload
        # does not pay the framework's import again (loader_probe.keep_warm). Only when reloads can happen.
        self.probe_spares = (
            bool(getattr(config, "load_probe", True))
            and bool(getattr(config, "probe_spare", True))
            and (
                float(getattr(config, "poll_seconds", 2.0) or 0.0) > 0
                or bool(getattr(config, "enable_model_control", False))
            )
        )
        self._locks: dict[str, asyncio.Lock] = {}
        self._scanner = Scanner(self.repository, getattr(config, "model_name", None))
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fwx-load")
        self._poll_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._started = False
        self._stopping = False

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Load every model per its version policy (warmed), then become ready and start polling."""
        await self._reconcile_all()
        self._started = True
        # Spares start only now, so their framework imports never slow the cold start down.
        await self._keep_probes_warm([m for served in self._routes.values() for m in served.values()])
        poll = float(getattr(self.config, "poll_seconds", 2.0) or 0.0)
        if poll > 0:
            self._poll_task = asyncio.create_task(self._poll(poll), name="fwx-model-poll")
        log.info(
            "models serving: %s", ", ".join(f"{n} v{sorted(v)}" for n, v in sorted(self._routes.items())) or "none"
        )

    async def stop(self) -> None:
        """Stop polling, then drain and unload every model."""
        self._stopping = True
        kill_active_probes()
        if self._poll_task is not None:
            self._poll_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poll_task
            self._poll_task = None
        if self._background:  # a spare being started now would outlive the kill above
            await asyncio.gather(*self._background, return_exceptions=True)
            kill_active_probes()
        for name in list(self._routes):
            async with self._lock(name):
                await self._unload_all(name, "server shutting down")
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def ready(self) -> bool:
        """Started, not stopping, and every enabled model with a version on disk serves one."""
        if not self._started or self._stopping:
            return False
        return all(
            self._routes.get(name) or not any(r.state in (FAILED, LOADING) for r in recs.values())
            for name, recs in self._records.items()
            if name in self._known and name not in self._disabled
        )

    # ------------------------------------------------------------------- lookups
    def get(self, name: str, version: str | int | None) -> LoadedModel:
        """The served version (None/"" = newest); NotFoundError, or UnavailableError while none is ready."""
        served = self._routes.get(name) or {}
        if not served and name not in self._known:
            raise NotFoundError(f"model {name!r} not found", hint="list models with POST /v2/repository/index")
        if version is None or version == "":
            if not served:
                raise UnavailableError(f"model {name!r} has no version ready", hint=self._why_not_ready(name))
            return served[max(served)]
        v = _parse_version(name, version)
        if v in served:
            return served[v]
        rec = self._records.get(name, {}).get(v)
        if rec is not None and rec.state == LOADING:
            raise UnavailableError(f"model {name!r} version {v} is still loading", hint="retry in a moment")
        listed = ", ".join(str(x) for x in sorted(served)) or "none"
        raise NotFoundError(f"model {name!r} version {v} is not served", hint=f"served versions: {listed}")

    def versions(self, name: str) -> list[int]:
        return sorted(self._routes.get(name) or {})

    def models(self) -> list[str]:
        return sorted(self._known | {n for n, r in self._routes.items() if r})

    def index(self) -> list[dict[str, Any]]:
        """Every model/version seen: state READY/UNAVAILABLE/LOADING/FAILED and why."""
        return [
            {"name": name, "version": str(v), "state": rec.state, "reason": rec.reason}
            for name in sorted(self._records)
            for v, rec in sorted(self._records[name].items())
        ]

    def _why_not_ready(self, name: str) -> str:
        recs = self._records.get(name, {})
        bad = [f"v{v} {r.state}: {r.reason}" for v, r in sorted(recs.items()) if r.state in (FAILED, LOADING)]
        return "; ".join(bad) or "no complete version in the repository"

    # ------------------------------------------------------------ model control
    async def load(self, name: str) -> None:
        """(Re)load ``name`` now, retrying versions that failed before; error if none ends up ready."""
        self._check_control()
        resolve_model_dir(self.repository, name)
        self._disabled.discard(name)
        self._known.add(name)
        await self._reconcile(name, retry_failed=True)
        if not self._routes.get(name):
            raise InputError(
                f"model {name!r} failed to load: {self._why_not_ready(name)}",
                hint="fix or re-export the model, then load it again",
            )

    async def unload(self, name: str) -> None:
        """Drain and unload every version of ``name``; polling leaves it unloaded until ``load``."""
        self._check_control()
        resolve_model_dir(self.repository, name, must_exist=False)
        if name not in self._known and not self._routes.get(name):
            raise NotFoundError(f"model {name!r} not found", hint="list models with POST /v2/repository/index")
        self._disabled.add(name)
        async with self._lock(name):
            await self._unload_all(name, "unloaded by request")

    def _check_control(self) -> None:
        if not getattr(self.config, "enable_model_control", False):
            raise ForbiddenError(
                "model control is disabled on this server",
                hint="start fwx serve with --enable-model-control --admin-token TOKEN",
            )

    # ------------------------------------------------------------- reconciling
    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _poll(self, seconds: float) -> None:
        # Fixed cadence (one scan every ``seconds``, not ``seconds`` after the last scan ended), so a new
        # version waits at most one poll period; after a long load, one scan at once, no catching up.
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += seconds
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            next_at = max(next_at, loop.time())
            try:
                await self._reconcile_all()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the poller must outlive any one bad scan
                log.exception("repository poll failed; retrying in %gs", seconds)

    async def _reconcile_all(self) -> None:
        names = await self._in_thread(self._scanner.models)
        self._known = set(names)
        todo = sorted(set(names) | {n for n, r in self._routes.items() if r})
        await asyncio.gather(*(self._reconcile(n) for n in todo if n not in self._disabled))

    async def _reconcile(self, name: str, *, retry_failed: bool = False) -> None:
        """Bring ``name`` to its policy: load new versions, swap, then drain what left the table."""
        async with self._lock(name):
            if self._stopping:
                return
            found = await self._in_thread(self._scanner.versions, name)
            recs = self._records.setdefault(name, {})
            self._forget_removed(name, found)
            policy = policy_for(name, self._policy, self._policy_per_model)
            current = dict(self._routes.get(name) or {})
            loadable = {v for v, fp in found.items() if retry_failed or not _failed_same(recs.get(v), fp)}
            fresh: dict[int, LoadedModel] = {}
            try:
                while True:
                    want = policy.select(loadable | (set(current) & set(found)))
                    todo = [v for v in sorted(want, reverse=True) if v not in current and v not in fresh]
                    if not todo or self._stopping:
                        break
                    model = await self._load_version(name, todo[0], found[todo[0]])
                    if model is None:
                        loadable.discard(todo[0])
                    else:
                        fresh[todo[0]] = model
            except asyncio.CancelledError:
                for m in fresh.values():
                    m.runtime.close()
                raise
            new = {v: current.get(v) or fresh[v] for v in want if v in current or v in fresh}
            await self._swap(name, new, {**current, **fresh}, set(found), policy)
            if self.probe_spares and self._started and not self._stopping and set(new) != set(current):
                served = {m.format for routes in self._routes.values() for m in routes.values()}
                await self._in_thread(drop_spares, served)

    def _forget_removed(self, name: str, found: dict[int, Fingerprint]) -> None:
        for v, rec in self._records[name].items():
            if v not in found and rec.state != READY:
                rec.state, rec.reason = UNAVAILABLE, "removed from the repository"

    async def _swap(
        self,
        name: str,
        new: dict[int, LoadedModel],
        had: dict[int, LoadedModel],
        on_disk: set[int],
        policy: VersionPolicy,
    ) -> None:
        if self._stopping:
            new = {}
        old = self._routes.get(name) or {}
        self._routes = {**self._routes, name: new}  # the atomic switch
        recs = self._records[name]
        for v in new:
            recs[v] = _Record(READY)
        for v in on_disk - set(new):
            if v not in recs or recs[v].state != FAILED:
                recs[v] = _Record(UNAVAILABLE, f"not in version policy {policy}")
        leaving = [m for v, m in had.items() if v not in new]
        for m in leaving:
            recs[m.version] = _Record(UNAVAILABLE, self._leave_reason(m.version, new, on_disk, policy))
        if leaving or set(new) != set(old):
            log.info(
                "model %s: serving versions %s%s",
                name,
                sorted(new) or "none",
                f"; retiring {sorted(m.version for m in leaving)}" if leaving else "",
            )
        await self._retire(leaving)

    def _leave_reason(self, version: int, new: dict[int, LoadedModel], on_disk: set[int], policy: VersionPolicy) -> str:
        newest = max(new, default=0)
        if self._stopping:
            return "server shutting down"
        if version not in on_disk:
            return "removed from the repository"
        return f"superseded by version {newest}" if newest > version else f"not in version policy {policy}"

    async def _load_version(self, name: str, version: int, fp: Fingerprint) -> LoadedModel | None:
        """Load one version in a thread; on failure record it (logged once) and return None."""
        recs = self._records[name]
        recs[version] = _Record(LOADING, "loading")
        path = self._scanner.model_dir(name) / str(version)
        settings = self._settings(name)
        fut = asyncio.get_running_loop().run_in_executor(self._pool, load_version, path, settings, self.probed)
        try:
            loaded = await asyncio.shield(fut)
        except asyncio.CancelledError:
            fut.add_done_callback(_close_result)
            raise
        except FwxError as exc:
            if self._stopping:  # the probe was killed by stop(): not the version's fault
                recs[version] = _Record(UNAVAILABLE, "server shutting down")
            else:
                self._failed(name, version, fp, exc.message)
            return None
        except Exception as exc:  # noqa: BLE001 - a loader bug must not take the server down
            log.exception("unexpected error loading %s", path)
            self._failed(name, version, fp, f"unexpected {type(exc).__name__}: {exc}")
            return None
        model = LoadedModel(
            name,
            version,
            loaded.format,
            loaded.runtime,
            loaded.signature,
            loaded.manifest,
            path,
            PLATFORMS.get(loaded.format, loaded.format.value),
            is_batchable(loaded.signature, loaded.runtime),
            snapshot=loaded.snapshot,
        )
        try:
            if self.on_load is not None:
                self.on_load(model)
        except Exception as exc:  # noqa: BLE001 - the data plane's hook failing is a failed load
            await self._in_thread(model.close)
            self._failed(name, version, fp, f"on_load hook failed: {exc}")
            return None
        self.loads[name] += 1
        if self._started:  # in the background: the swap to this version must not wait for a process spawn
            task = asyncio.create_task(self._keep_probes_warm([model]), name="fwx-probe-spare")
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        probe = f", probe {loaded.probe_seconds:.2f}s" if loaded.probe_seconds is not None else ""
        log.info(
            "model %s v%d loaded as %s in %.2fs%s (warmed up)", name, version, loaded.format, loaded.seconds, probe
        )
        return model

    async def _keep_probes_warm(self, models: list[LoadedModel]) -> None:
        """A spare probe child per format, warmed up on a version that loaded here (so known good)."""
        if not self.probe_spares or self._stopping:
            return
        for model in models:
            entry = next((e for e in model.manifest.artifacts.values() if e.format == model.format.value), None)
            if entry is None:
                continue
            settings = self._settings(model.name)
            try:
                await self._in_thread(
                    partial(
                        keep_warm,
                        model.format,
                        (model.snapshot.path if model.snapshot else model.path) / entry.path,  # the checked copy
                        signature=model.manifest.sig() if settings.warmup else None,
                        sizes=model.manifest.warmup_sizes(),
                        trust_model_code=settings.trust_model_code,
                        limits=settings.probe_limits,
                    )
                )
            except Exception:  # noqa: BLE001 - without a spare a reload still probes, in a fresh child
                log.exception("could not start a spare probe child for %s", model.format)

    def _failed(self, name: str, version: int, fp: Fingerprint, reason: str) -> None:
        self._records[name][version] = _Record(FAILED, reason, fp)
        self.load_failures[name] += 1
        log.error("model %s v%d failed to load: %s", name, version, reason)
        if self.on_load_failure is not None:
            try:
                self.on_load_failure(name, version, reason)
            except Exception:  # noqa: BLE001 - a metrics hook must not break loading
                log.exception("on_load_failure hook failed")

    def _settings(self, name: str) -> LoadSettings:
        cfg = self.config
        limits = ProbeLimits(
            timeout_s=float(getattr(cfg, "probe_timeout_s", ProbeLimits.timeout_s)),
            memory_mb=int(getattr(cfg, "probe_memory_mb", ProbeLimits.memory_mb)),
        )
        return LoadSettings(
            prefer=self._prefer_per_model.get(name, self._prefer),
            device=str(getattr(cfg, "device", "cpu")),
            trust_model_code=bool(getattr(cfg, "trust_model_code", False)),
            warmup=bool(getattr(cfg, "warmup", True)),
            probe=bool(getattr(cfg, "load_probe", True)) and (self._started or self.probe_first_loads),
            probe_limits=limits,
        )

    # ----------------------------------------------------------------- unloading
    async def _unload_all(self, name: str, why: str) -> None:
        leaving = list((self._routes.get(name) or {}).values())
        self._routes = {**self._routes, name: {}}
        for m in leaving:
            self._records[name][m.version] = _Record(UNAVAILABLE, why)
        await self._retire(leaving)

    async def _retire(self, models: list[LoadedModel]) -> None:
        """Drain (on_unload, then in-flight direct calls) and close models already out of the table."""
        await asyncio.gather(*(self._retire_one(m) for m in models))

    async def _retire_one(self, model: LoadedModel) -> None:
        deadline = time.monotonic() + float(getattr(self.config, "drain_seconds", 30.0))
        if self.on_unload is not None:
            try:
                await asyncio.wait_for(self.on_unload(model), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                log.warning("model %s v%d did not drain in time; closing it", model.name, model.version)
            except Exception:  # noqa: BLE001 - closing must happen whatever the hook does
                log.exception("on_unload hook failed for %s v%d", model.name, model.version)
        while model.inflight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        try:
            await self._in_thread(model.close)
        except Exception:  # noqa: BLE001
            log.exception("closing %s v%d failed", model.name, model.version)
        log.info("model %s v%d unloaded", model.name, model.version)


def _close_and_trim(runtime: Runtime) -> None:
    """Close a runtime, then hand freed heap back to the OS (glibc keeps it otherwise: RSS creeps per swap)."""
    runtime.close()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _load_libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 - musl has no malloc_trim
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _load_libc()


def _failed_same(rec: _Record | None, fp: Fingerprint) -> bool:
    """A version that failed stays failed until one of its files changes (or an explicit load)."""
    return rec is not None and rec.state == FAILED and rec.fingerprint == fp


def _parse_version(name: str, version: str | int) -> int:
    text = str(version).strip()
    if not is_digits(text) or int(text) < 1:
        raise NotFoundError(f"model {name!r} has no version {version!r}", hint="versions are positive integers")
    return int(text)


def _close_result(fut: Future[Any] | asyncio.Future[Any]) -> None:
    """A load finished after its caller was cancelled (shutdown): close what it loaded."""
    if not fut.cancelled() and fut.exception() is None:
        loaded = fut.result()
        loaded.runtime.close()
        if loaded.snapshot is not None:
            loaded.snapshot.discard()
