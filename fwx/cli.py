"""The ``fwx`` command: a click group whose subcommands load on demand.

Every command is a thin wrapper over a library function (``fwx.exporter.export``,
``fwx.validators.validate``, ``fwx.serving.supervisor.supervise``). Command modules
import no framework at import time, so ``fwx --help`` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from fwx import __version__, ui
from fwx.errors import FwxError, first_line

#: name -> (module:function, one-line help shown in ``fwx --help``)
COMMANDS: dict[str, tuple[str, str]] = {
    "export": (
        "fwx.commands.export:export",
        "Export a PyTorch/TF/Keras/ONNX model to TorchScript, .pt2, SavedModel, ONNX, TFLite.",
    ),
    "validate": ("fwx.commands.validate:validate", "Run every format on the same inputs and diff the outputs."),
    "inspect": (
        "fwx.commands.inspect:inspect",
        "Show the signature and metadata of a model or artifact, without running it.",
    ),
    "serve": (
        "fwx.commands.serve:serve",
        "Serve an artifact repository over KServe v2 REST + gRPC and TF Serving REST.",
    ),
    "dockerize": ("fwx.commands.dockerize:dockerize", "Write a Dockerfile that serves an artifact repository."),
    "deploy": ("fwx.commands.deploy:deploy", "Generate KServe or Kubernetes manifests that run fwx serve."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        target, _ = COMMANDS[cmd_name]
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("fwx"):
                return _unavailable(cmd_name)
            raise
        cmd: click.Command = getattr(module, attr)
        from fwx.commands import sandboxing

        return sandboxing.wrap(cmd_name, cmd)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help text comes from COMMANDS so listing commands imports none of them.
        with formatter.section("Commands"):
            formatter.write_dl([(n, h) for n, (_, h) in COMMANDS.items()])


def _unavailable(name: str) -> click.Command:
    @click.command(name, help=COMMANDS[name][1])
    def cmd() -> None:
        raise FwxError(f"`fwx {name}` is not built into this version of fwx yet")

    return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="fwx")
@ui.common_options
def cli() -> None:
    """fwx: export a model once, get every deployment format, prove they agree, serve them.

    \b
    Typical flow:
      fwx export model.pt --model-class pkg.mod:Net --input x:float32[N,3,32,32] --to all
      fwx validate artifacts/model/1
      fwx serve artifacts

    Loading a model never runs code from it unless you pass --trust-model-code.
    Exit codes: 0 success, 1 export/validation failure, 2 usage or input error.
    """


def main(argv: list[str] | None = None) -> None:
    if os.environ.get("FWX_DEBUG"):
        ui.state.debug = True
    debug = ui.state.debug or "--debug" in (sys.argv[1:] if argv is None else argv)
    from fwx import quiet

    quiet.install(debug, filter_fd=False)
    if argv is None:  # the real command line: this process runs one command and may sandbox itself for it
        from fwx.commands import sandboxing

        sandboxing.command_process = True
        if not debug:  # the fd 2 filter only here (in-process callers keep their stderr), started after the
            # sandbox: its pump thread would otherwise run outside it (fwx.safety.landlock)
            sandboxing.after_start.append(lambda: quiet.install(debug, filter_fd=True))
    try:
        rc = cli.main(args=argv, prog_name="fwx", standalone_mode=False)
        # standalone_mode=False returns ctx.exit(code) instead of exiting.
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except FwxError as exc:
        if ui.state.debug:
            raise
        ui.fail(exc.message, exc.hint, exc.exit_code, exc.detail)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        _json_error("aborted", 130, argv)
    except click.ClickException as exc:
        exc.show()
        _json_error(exc.format_message(), exc.exit_code, argv)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        _json_error("interrupted", 130, argv)
    except Exception as exc:  # noqa: BLE001 - last line of defence: one line, no traceback
        if ui.state.debug:
            raise
        ui.fail(f"unexpected {type(exc).__name__}: {first_line(exc)}", "rerun with --debug for the traceback", 1)


def _json_error(message: str, code: int, argv: list[str] | None) -> None:
    """Exit ``code``; under ``--json`` first the one document a script parses (a usage error can stop click
    before the option's own callback has run, so the command line is asked too)."""
    if ui.state.json or "--json" in (sys.argv[1:] if argv is None else argv):
        ui.error_document(message, None, code)
    sys.exit(code)
