"""``fwx serve``: a thin click wrapper over ``fwx.serving.supervisor.supervise``.

Imports nothing heavy at module import: the server (Starlette, grpc, runtimes)
is imported only when the command runs, so ``fwx serve --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fwx import ui
from fwx.commands.options import SECONDS, CountOrAuto, Duration, device_option, renamed, resolve_device, trust_option
from fwx.commands.sandboxing import MEMORY_OPTION, NO_SANDBOX_OPTION
from fwx.errors import UsageError

if TYPE_CHECKING:
    from fwx.serving.config import ServerConfig


def _removed_grpc_server(value: str | None) -> None:
    """``--grpc-server`` is gone (one gRPC server, grpc.aio); ``aio``, the old default, is still accepted."""
    if value is not None and value != "aio":
        raise UsageError(
            f"--grpc-server {value} was removed: fwx serve has one gRPC server (grpc.aio)",
            hint="drop the flag",
        )


@click.command("serve", context_settings={"max_content_width": 100})
@click.argument("repository", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (0.0.0.0 exposes it).")
@click.option(
    "--http-port",
    default=8000,
    show_default=True,
    type=click.IntRange(-1, 65535),
    help="KServe v2 + TF Serving REST port (0 any, -1 off).",
)
@click.option(
    "--grpc-port",
    default=8001,
    show_default=True,
    type=click.IntRange(-1, 65535),
    help="KServe v2 gRPC port (0 any, -1 off).",
)
@click.option(
    "--prefer",
    default="onnx,torchscript,pt2,savedmodel,tflite",
    show_default=True,
    help="Preference order when a version has several formats; formats not named follow in the default "
    "order (a preference, not a filter: see --only-formats).",
)
@click.option(
    "--only-formats",
    default=None,
    metavar="FMT,FMT",
    help="Load only these formats (a version with none of them is not served).",
)
@click.option(
    "--prefer-model", multiple=True, metavar="NAME=FMT,FMT", help="Per-model override of --prefer (repeatable)."
)
@click.option(
    "--max-batch-size",
    default=32,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows merged into one model run.",
)
@click.option(
    "--max-queue-delay-seconds",
    "max_queue_delay_ms",
    default="2ms",
    show_default=True,
    type=Duration("ms"),
    help="Longest wait for the clients of the last batch to send again (never at concurrency 1).",
)
@renamed("--max-queue-delay-ms", "--max-queue-delay-seconds (e.g. 2ms)")
@click.option(
    "--max-queue-size",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="Queued requests per model before 503.",
)
@click.option(
    "--workers",
    default="1",
    show_default=True,
    type=CountOrAuto(),
    help="Serving processes sharing the ports, each with its own models (auto = one per CPU).",
)
@click.option("--grpc-server", hidden=True, expose_value=False, callback=lambda _c, _p, v: _removed_grpc_server(v))
@click.option(
    "--instances",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Concurrent batches (compute threads) per model version.",
)
@click.option(
    "--request-timeout-seconds",
    "request_timeout_s",
    default=30.0,
    show_default=True,
    type=SECONDS,
    help="Default request deadline (0 = none).",
)
@renamed("--request-timeout-s", "--request-timeout-seconds")
@click.option(
    "--max-body-mb",
    default=64.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Largest HTTP body, after decompression.",
)
@click.option(
    "--grpc-max-message-mb",
    default=64.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Largest gRPC message.",
)
@device_option("the served models")
@click.option("--version-policy", default="latest", show_default=True, help="latest, latest:N, all or specific:1,3.")
@click.option(
    "--version-policy-model",
    multiple=True,
    metavar="NAME=POLICY",
    help="Per-model override of --version-policy (repeatable).",
)
@click.option(
    "--poll-seconds", default=2.0, show_default=True, type=SECONDS, help="Repository poll interval (0 = off)."
)
@click.option("--enable-model-control", is_flag=True, help="Allow load/unload over the API (needs --admin-token).")
@click.option(
    "--admin-token", envvar="FWX_ADMIN_TOKEN", default=None, help="Token for load/unload [env FWX_ADMIN_TOKEN]."
)
@click.option(
    "--api-token",
    envvar="FWX_API_TOKEN",
    default=None,
    help="Bearer token required on inference routes [env FWX_API_TOKEN].",
)
@click.option(
    "--api-token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Read the --api-token from this file (safer than the command line, which other processes can read).",
)
@click.option(
    "--admin-token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Read the --admin-token from this file.",
)
@trust_option(
    "Here it also skips the checksum checks and the private snapshot; model code still runs inside the workers' "
    "walls (only --no-sandbox takes them down)."
)
@click.option(
    "--allow-request-chat-template",
    is_flag=True,
    help="Let a chat request carry its own chat_template (any client can then make the server render its Jinja); "
    "off: the version's own template only, and a request that sends one is a 400.",
)
@click.option(
    "--drain-seconds", default=30.0, show_default=True, type=SECONDS, help="How long SIGTERM waits for in-flight work."
)
@click.option(
    "--model-name",
    default=None,
    metavar="NAME",
    help="If REPOSITORY is one model's folder (1/, 2/ ... as KServe's storageUri gives), serve it as NAME.",
)
@click.option(
    "--shutdown-delay-seconds",
    default=0.0,
    show_default=True,
    type=SECONDS,
    help="After SIGTERM: not ready but still serving this long (load balancer catch-up), then drain.",
)
@click.option(
    "--require-sandbox",
    is_flag=True,
    help="Refuse to start, naming them, where a worker cannot take every wall (also FWX_REQUIRE_SANDBOX=1).",
)
@click.option("--no-warmup", is_flag=True, help="Skip the warm-up inference (readiness then means loaded).")
@click.option("--no-load-probe", is_flag=True, help="Skip the crash-safe trial load of each new artifact.")
@click.option(
    "--no-probe-spare",
    is_flag=True,
    help="Keep no pre-imported trial-load process per served format (saves its memory; reloads then pay an import).",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    help="Least severe fwx log line printed (uvicorn's own lines need --debug).",
)
@ui.common_options
def serve(repository: Path, workers: str, **options: Any) -> None:
    """Serve every model of an artifact repository over KServe v2 REST + gRPC and TF Serving REST.

    \b
    Example:
      fwx serve artifacts
      curl localhost:8000/v2/health/ready
    """
    from fwx.serving.spawn import Spawner, parse_workers, worker_env

    # The workers start first: their interpreter and imports overlap the checks below (one core each);
    # they wait for their job on stdin, and are stopped unused if a check fails.
    n = parse_workers(workers)
    spawner = Spawner(worker_env(n))
    spawner.start_early(n)
    try:
        from fwx.serving.config import ServerConfig
        from fwx.serving.supervisor import supervise

        options["device"] = resolve_device(options["device"])
        config = ServerConfig.from_cli(repository, n, _tokens(options))
        _check_layout(config)
        _check_sandbox(config)
        code = supervise(config, spawner)
    finally:
        spawner.close()
    sys.exit(code)


# The same --no-sandbox and --memory-limit as export, validate and inspect: one spelling, one meaning.
serve.params += [NO_SANDBOX_OPTION, MEMORY_OPTION]
NO_SANDBOX_WARNING = (
    "--no-sandbox: the workers load and run models with every wall down: code they run can read and write "
    "your files, reach the network, signal your processes and use all memory (the scanners still apply)"
)


def _tokens(options: dict[str, Any]) -> dict[str, Any]:
    """Tokens from a file, the environment or the command line; then erased from what other processes can read.

    Workers get them over their job pipe (never argv or environ). A token typed on the command line is
    visible in /proc/<pid>/cmdline until this point, hence the warning.
    """
    from fwx.serving.secrets import forget, read_token_file
    from fwx.serving.spawn import SECRET_ENV

    ctx = click.get_current_context()
    for name in ("api_token", "admin_token"):
        path = options.pop(f"{name}_file", None)
        flag = "--" + name.replace("_", "-")
        if path is not None:
            if options.get(name) is not None:
                raise UsageError(f"{flag} and {flag}-file both given", hint="pass one of them")
            options[name] = read_token_file(path, f"{flag}-file")
        elif options.get(name) is not None and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
            ui.warn(
                f"{flag} on the command line is visible to other processes while fwx serve starts; "
                f"prefer {flag}-file or the environment variable"
            )
    forget(SECRET_ENV, [t for t in (options.get("api_token"), options.get("admin_token")) if t])
    return options


def _check_layout(config: ServerConfig) -> None:
    """Refuse one model's folder passed as a repository; warn when the server leaves this machine."""
    from fwx.serving.scan import is_model_folder

    if config.model_name is None and is_model_folder(config.repository):
        raise UsageError(
            f"{config.repository} is one model's folder (it holds version folders), not a repository",
            hint="pass --model-name NAME to serve it as NAME, or serve its parent folder",
        )
    if config.host not in ("127.0.0.1", "localhost", "::1"):
        ui.warn(
            f"binding {config.host}: the server is reachable from other machines"
            + ("" if config.api_token else "; consider --api-token")
        )


def _check_sandbox(config: ServerConfig) -> None:
    """Say once, here, what every worker would find: --no-sandbox, or a kernel without Landlock (or fail with
    --require-sandbox). The workers report the other walls themselves (``GET /v2``)."""
    from fwx.safety import landlock, sandbox

    if config.no_sandbox:
        if sandbox.required(config.require_sandbox):
            raise UsageError("--no-sandbox and --require-sandbox contradict each other", hint="drop one")
        ui.warn(NO_SANDBOX_WARNING)
        return
    if landlock.abi_version() >= 1:
        return
    if sandbox.required(config.require_sandbox):
        raise sandbox.SandboxRequiredError(
            "cannot sandbox the server's workers: this kernel offers no Landlock",
            hint="run on Linux 5.13+ with Landlock enabled, or drop --require-sandbox",
        )
    ui.warn("this kernel offers no Landlock: the workers load models without the sandbox (the scanners still apply)")
