"""``fwx serve``'s supervisor: N worker processes on shared ports, none of whose models it loads.

The supervisor imports no framework and loads no model. It reserves the HTTP
and gRPC ports (a bound, never-listening SO_REUSEPORT socket, so port 0
resolves once and every worker joins the same port), creates a private run
directory (``fwx.serving.runstate``) and hands each of the N
``python -m fwx.serving.workers`` processes its job (run directory, slot,
ServerConfig) over its stdin. ``fwx serve`` starts the first N workers before
anything else (``fwx.serving.spawn``), so their interpreter start and imports
overlap the supervisor's own. The kernel spreads incoming connections over
the workers' listeners.

Every ``TICK_S``, and at once when a worker writes to the wake-up pipe (it
does on every change of its own readiness), it:

* writes the board = every worker alive and ready (workers AND this into
  their own /v2/health/ready, so the probe answers for the whole pod). The
  pipe makes "worker ready" to "pod ready" a matter of microseconds instead of
  up to two 20 ms ticks (the worker's and this one's);
* reaps dead workers: when a worker died while loading an artifact, that
  artifact is tried once more in a trial child of the supervisor's own
  (``fwx.serving.crash_check``), and quarantined only if the trial crashes or
  hangs too (the restart then marks the version FAILED with "loader crashed
  (SIGSEGV) ..." and tries the next format); a worker's word alone never
  quarantines. Its metrics snapshot is copied to ``dead/<pid>.prom`` so
  counters never drop; its folder is emptied; it is restarted after a
  back-off that doubles on quick deaths;
* kills a worker stuck in one load longer than the probe timeout (a hostile
  artifact that hangs), timed by its own clock, with the same trial.

Workers are untrusted (``fwx.serving.runstate``): everything read from their
folders is validated, a bad record is logged and ignored, and no exception
from tending one worker leaves the loop.

A worker that exits with a usage error before ever being ready (bad flag,
port refused) stops the whole server with that exit code instead of looping.
SIGTERM/SIGINT: readiness false at once, the signal is forwarded so every
worker drains in parallel, and the supervisor exits 0 once all have; a
second signal is forwarded too (workers then skip the drain).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from fwx.errors import UsageError
from fwx.machine import signal_name
from fwx.serving import crash_check
from fwx.serving.config import ServerConfig
from fwx.serving.crash_check import CrashCheck
from fwx.serving.loader_probe import DEFAULT_TIMEOUT_S
from fwx.serving.logs import setup_logging
from fwx.serving.runstate import LoadMark, RunState, describe_key
from fwx.serving.sockets import bind_tcp
from fwx.serving.spawn import Job, Spawner, worker_env

log = logging.getLogger("fwx.serving")

TICK_S = 0.02
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0
#: A worker that lived this long (or became ready) resets the back-off.
STABLE_S = 30.0
#: Extra time, beyond --drain-seconds, a worker gets to unload and exit after SIGTERM.
EXIT_GRACE_S = 15.0


def _reserve(host: str, port: int, what: str, flag: str) -> socket.socket:
    """Bind (never listen) with SO_REUSEPORT and claim the port: the workers join it, another server cannot."""
    return bind_tcp(host, port, reuse_port=True, claim=True, what=what, flag=flag)


@dataclass
class _Worker:
    slot: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    was_ready: bool = False
    backoff: float = BACKOFF_MIN_S
    restart_at: float = 0.0
    hung: str = ""  # why we killed it, when we did
    load: tuple[LoadMark, float] | None = None  # the mark it shows and when this process first saw it
    check: CrashCheck | None = None  # the trial of the artifact it died on; it restarts after the verdict


class Supervisor:
    """Starts, watches, restarts and stops the worker processes of one ``fwx serve``."""

    def __init__(self, config: ServerConfig, root: Path, spawner: Spawner | None = None) -> None:
        self.config = config
        self.n = int(config.workers)
        self.state = RunState.create(root, self.n)
        self.workers = [_Worker(i) for i in range(self.n)]
        self.signals = 0
        self.exit_code = 0
        self._announced = False
        self._fatal: int | None = None
        self.spawner = spawner or Spawner(worker_env(self.n))

    # ---------------------------------------------------------------- processes
    def _spawn(self, w: _Worker) -> None:
        w.proc = self.spawner.take()
        self.spawner.hand(w.proc, Job(self.state.root, w.slot, os.getpid(), self.spawner.wake_w, self.config))
        w.started = time.monotonic()
        w.was_ready = False
        log.debug("worker %d started (pid %d)", w.slot, w.proc.pid)

    def _reap(self, w: _Worker, now: float) -> None:
        assert w.proc is not None
        code = w.proc.returncode
        pid = w.proc.pid
        w.proc = None
        self.state.retire_metrics(w.slot, pid)
        loading = self.state.current_load(w.slot)
        what = self._what(w.slot, loading)
        w.load = None
        self.state.reset_slot(w.slot)  # the next worker in this slot starts from an empty folder
        how = _how(code)
        if loading is not None and what is not None and not self.state.quarantined(loading.key):
            log.error(
                "worker %d (pid %d) died (%s) loading %s: trying that artifact in a trial of its own first",
                w.slot,
                pid,
                w.hung or how,
                what,
            )
            w.hung = ""
            w.check = self._start_check(loading.key, what)
            w.restart_at = float("inf")  # set by the verdict
            return
        w.hung = ""
        if code > 0 and not w.was_ready and not self._announced:
            # at the first start only: a bad flag or a refused port; later, a worker's exit (its code is
            # untrusted) costs a restart, never the server
            log.error("worker %d exited with code %d before it was ready; stopping", w.slot, code)
            self._fatal = code
            return
        stable = w.was_ready or now - w.started > STABLE_S
        w.backoff = BACKOFF_MIN_S if stable else min(BACKOFF_MAX_S, w.backoff * 2)
        w.restart_at = now + (0.0 if stable else w.backoff)
        log.error("worker %d (pid %d) died (%s); restarting it in %.1fs", w.slot, pid, how, w.restart_at - now)

    def _start_check(self, key: str, what: str) -> CrashCheck:
        cfg = self.config
        return crash_check.start(
            key,
            what,
            repository=Path(cfg.repository),
            env=self.spawner.env,
            trust_model_code=bool(cfg.trust_model_code),
            require_sandbox=bool(cfg.require_sandbox),
            timeout_s=float(getattr(cfg, "probe_timeout_s", DEFAULT_TIMEOUT_S)),
            sandbox=not cfg.no_sandbox,
        )

    def _judge(self, w: _Worker, now: float) -> bool:
        """True once the trial of the artifact ``w`` died on has a verdict (quarantined or not)."""
        assert w.check is not None
        reason = w.check.verdict(now)
        if reason is None:
            return False
        key, what = w.check.key, w.check.what
        w.check = None
        if reason:
            self.state.quarantine(key, reason)
            log.error("%s: quarantined; restarting worker %d without that artifact", reason, w.slot)
            w.restart_at = now  # the cause is gone: restart at once
        else:
            w.backoff = min(BACKOFF_MAX_S, w.backoff * 2)
            w.restart_at = now + w.backoff
            log.error(
                "worker %d died loading %s, which loads cleanly in a trial of its own: not quarantined; "
                "restarting it in %.1fs",
                w.slot,
                what,
                w.backoff,
            )
        return True

    def _what(self, slot: int, mark: LoadMark | None) -> str | None:
        """The artifact a mark names, described by the supervisor; None for a key outside the repository."""
        if mark is None:
            return None
        what = describe_key(mark.key, self.config.repository)
        if what is None:
            log.warning("worker %d names an artifact outside the repository in its loading mark: ignored", slot)
        return what

    def _check_hung_load(self, w: _Worker, now: float) -> None:
        """Kill a worker stuck in one load: timed by this process's clock from when the mark first showed."""
        mark = self.state.current_load(w.slot)
        if mark is None:
            w.load = None
            return
        if w.load is None or w.load[0] != mark:
            w.load = (mark, now)
        limit = float(getattr(self.config, "probe_timeout_s", DEFAULT_TIMEOUT_S))
        if w.proc is not None and now - w.load[1] > limit:
            what = self._what(w.slot, mark) or "an artifact outside the repository"
            log.error("worker %d stuck loading %s for over %gs: killing it", w.slot, what, limit)
            w.hung = f"loader timed out after {limit:g}s on {what}"
            w.proc.kill()

    # --------------------------------------------------------------------- loop
    def tick(self) -> None:
        now = time.monotonic()
        for w in self.workers:
            try:
                self._tend(w, now)
            except Exception:  # noqa: BLE001 - what a worker wrote must never stop the server
                log.exception("worker %d: its state could not be read; retrying at the next tick", w.slot)
        ready = all(w.proc is not None and self.state.worker_ready(w.slot) for w in self.workers)
        self.state.set_all_ready(ready and self.signals == 0)
        if ready and not self._announced:
            self._announced = True
            log.info(
                "fwx serve ready: %d worker process(es) on HTTP %s, gRPC %s",
                self.n,
                self.config.http_port,
                self.config.grpc_port,
            )
            from fwx.serving.client_examples import print_usage_examples

            print_usage_examples(
                self.config, http_port=self._port(self.config.http_port), grpc_port=self._port(self.config.grpc_port)
            )

    def _tend(self, w: _Worker, now: float) -> None:
        if w.proc is None:
            if w.check is not None and not self._judge(w, now):
                return
            if now >= w.restart_at:
                self._spawn(w)
            return
        if w.proc.poll() is not None:
            self._reap(w, now)
            return
        if self.state.worker_ready(w.slot):
            w.was_ready = True
        self._check_hung_load(w, now)  # a ready worker loads too (a hot reload, in-process after its probe)

    @staticmethod
    def _port(port: int) -> int | None:
        return port if port >= 0 else None

    def on_signal(self, signum: int, _frame: FrameType | None = None) -> None:
        self.signals += 1
        self.state.set_all_ready(False)
        log.info(
            "received %s: %s",
            signal.Signals(signum).name,
            "draining every worker" if self.signals == 1 else "stopping without waiting",
        )
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.on_signal)
        for w in self.workers:
            self._spawn(w)
        while self.signals == 0 and self._fatal is None:
            self.tick()
            self._wait(TICK_S)
        if self._fatal is not None:
            self.on_signal(signal.SIGTERM)
        return self._stop(self._fatal or 0)

    def _wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``; return early when a worker reports a readiness change."""
        wake = self.spawner.wake_r
        readable, _, _ = select.select([wake], [], [], seconds)
        if readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake, 4096):
                    pass

    def close(self) -> None:
        for w in self.workers:
            if w.check is not None:
                w.check.stop()
                w.check = None
        self.state.close()
        self.spawner.close()

    def _stop(self, code: int) -> int:
        cfg = self.config
        end = time.monotonic() + float(cfg.drain_seconds) + float(getattr(cfg, "shutdown_delay_s", 0.0)) + EXIT_GRACE_S
        for w in self.workers:
            if w.proc is None:
                continue
            try:
                w.proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker %d did not stop in time: killing it", w.slot)
                w.proc.kill()
                w.proc.wait()
                code = code or 1
            if w.proc.returncode not in (0, -signal.SIGTERM) and not code:
                code = 1
        log.info("fwx serve stopped")
        return code


def _how(code: int | None) -> str:
    return signal_name(-code) if code is not None and code < 0 else f"exit {code}"


def supervise(config: ServerConfig, spawner: Spawner | None = None) -> int:
    """Blocking entry point of ``fwx serve``: reserve ports, run the workers, return the exit code.

    ``spawner`` may hold workers started early (``Spawner.start_early``); they get their jobs here.
    """
    from fwx.serving.readiness import check_repository

    setup_logging(config.log_level, "supervisor", uvicorn=False)
    check_repository(config.repository)  # a wrong folder is a usage error here, before any worker starts
    if config.workers > 1 and config.enable_model_control:
        raise UsageError(
            "--enable-model-control needs --workers 1",
            hint="a load/unload call would reach one worker only; use repository polling instead",
        )
    held: list[socket.socket] = []
    http_port, grpc_port = config.http_port, config.grpc_port
    if http_port >= 0:
        held.append(_reserve(config.host, http_port, "HTTP", "--http-port"))
        http_port = int(held[-1].getsockname()[1])
    if grpc_port >= 0:
        held.append(_reserve(config.host, grpc_port, "gRPC", "--grpc-port"))
        grpc_port = int(held[-1].getsockname()[1])
    root = Path(tempfile.mkdtemp(prefix="fwx-serve-"))
    try:
        # an absolute repository: workers never resolve a path against a working directory they cannot read
        repository = Path(config.repository).resolve()
        # the address the reservation resolved: a worker resolves no name (it may create TCP sockets only,
        # so no DNS over UDP, and its sandbox does not grant /etc/hosts)
        host = str(held[0].getsockname()[0]) if held else config.host
        worker_config = replace(
            config, repository=repository, reuse_port=True, http_port=http_port, grpc_port=grpc_port, host=host
        )
        sup = Supervisor(worker_config, root, spawner)
        try:
            return sup.run()
        finally:
            sup.close()
    finally:
        for sock in held:
            sock.close()
        shutil.rmtree(root, ignore_errors=True)
