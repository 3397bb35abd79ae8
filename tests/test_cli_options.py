"""One spelling per concept on every command line: the shared option types, renamed flags, grouped help."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from fwx.cli import cli, main
from fwx.commands.options import SECONDS, CountOrAuto, Device, Duration


def _command(name: str) -> click.Command:
    ctx = click.Context(cli)
    command = cli.get_command(ctx, name)
    assert command is not None
    return command


def _option(command: click.Command, flag: str) -> click.Option:
    return next(p for p in command.params if isinstance(p, click.Option) and flag in p.opts)


@pytest.mark.parametrize("name", ["export", "validate", "serve"])
def test_device_is_one_type_with_one_default(name: str) -> None:
    option = _option(_command(name), "--device")
    assert isinstance(option.type, Device)
    assert option.default == "cpu"


@pytest.mark.parametrize("name", ["export", "validate", "inspect", "serve"])
def test_trust_model_code_is_worded_one_way(name: str) -> None:
    helps = _option(_command(name), "--trust-model-code").help or ""
    assert helps.startswith("Trust the model: load files that can run code or touch the host")


@pytest.mark.parametrize("name", ["serve", "deploy kserve"])
def test_every_duration_is_seconds_with_units(name: str) -> None:
    command = _command(name.split()[0])
    if isinstance(command, click.Group):
        command = command.commands[name.split()[1]]
    flags = [p for p in command.params if isinstance(p, click.Option) and any(o.endswith("-seconds") for o in p.opts)]
    assert flags
    assert all(isinstance(p.type, Duration) for p in flags)
    shown = [p for p in command.params if not getattr(p, "hidden", False)]  # renamed flags stay as hidden errors
    assert not [o for p in shown for o in p.opts if o.endswith(("-ms", "-s"))]


def test_durations_and_counts_parse() -> None:
    assert SECONDS.convert("100ms", None, None) == pytest.approx(0.1)
    assert SECONDS.convert("5m", None, None) == 300.0
    assert SECONDS.convert("2", None, None) == 2.0
    assert Duration("ms").convert("2ms", None, None) == pytest.approx(2.0)
    assert CountOrAuto().convert("auto", None, None) == "auto"
    assert CountOrAuto().convert("3", None, None) == 3
    for bad in ("-1s", "5x", "ms"):
        with pytest.raises(click.BadParameter):
            SECONDS.convert(bad, None, None)
    with pytest.raises(click.BadParameter):
        CountOrAuto().convert("0", None, None)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve", ".", "--max-body-mb", "0"], "Invalid value for '--max-body-mb'"),
        (["serve", ".", "--workers", "zero"], "Invalid value for '--workers'"),
        (["serve", ".", "--request-timeout-s", "3"], "--request-timeout-s was renamed to --request-timeout-seconds"),
        (["serve", ".", "--max-queue-delay-ms", "3"], "--max-queue-delay-ms was renamed to --max-queue-delay-seconds"),
        (["export", "m.onnx", "--version", "3"], "--version was renamed to --model-version"),
        (["validate", ".", "--device", "gpu"], "Invalid value for '--device'"),
    ],
)
def test_bad_and_renamed_flags_are_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)  # the real entry point: fwx's own errors are printed there
    out, err = capsys.readouterr()
    assert exit_.value.code == 2, out + err
    assert says in err
    assert "Traceback" not in out + err


def test_export_help_is_in_sections() -> None:
    text = CliRunner().invoke(cli, ["export", "--help"], terminal_width=100).output
    heads = [ln for ln in text.splitlines() if ln and not ln.startswith(" ") and ln.endswith(":")]
    assert heads[-8:] == [
        "Targets:",
        "Source model:",
        "Inputs and outputs:",
        "Conversion:",
        "Validation:",
        "Quantisation:",
        "Accuracy budget (int8):",
        "Other options:",
    ]
    assert "--model-version" in text
