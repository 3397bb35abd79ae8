"""End-to-end walkthrough (``make run``): build the samples, export the CNN to every format,
validate every format against the PyTorch source, then serve the repository.

Each step runs the real ``fwx`` command line, printed first, so what you see is
what you would type. ``--serve-seconds N`` stops the server after N seconds
(SIGTERM, graceful drain); without it the server runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "samples" / "build"
ARTIFACTS = ROOT / "artifacts"
sys.path.insert(0, str(ROOT))  # run as a script: the samples package (and fwx) from this checkout

from samples import CNN_CLASS, CNN_EXPORT_ARGS  # noqa: E402 - needs the path above


def fwx(*args: str) -> str:
    """Run ``fwx ARGS`` as you would type it: its tables on stdout, live progress on stderr.

    Returns what it printed on stdout (also shown), so later steps can read e.g.
    the ``published as NAME/VERSION`` line.
    """
    cmd = [sys.executable, "-m", "fwx", *args]
    print("$ fwx " + shlex.join(args), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"fwx {args[0]} failed (exit {proc.returncode}); its error is above")
    return proc.stdout


def build(folder: Path = BUILD) -> dict[str, Path]:
    """Write the sample sources: cnn.pt (state_dict), cnn_keras.keras, tfmodule.savedmodel/."""
    from fwx import ui
    from samples.models import save_all

    with ui.step("building the samples (PyTorch CNN, Keras model, tf.Module SavedModel)"):
        paths = save_all(folder)
    for key, path in paths.items():
        print(f"built {key}: {path.relative_to(ROOT)}")
    return paths


def export_all(sources: dict[str, Path], out: Path = ARTIFACTS) -> Path:
    """Export the PyTorch CNN to every reachable format; returns the published version folder."""
    text = fwx(
        "export",
        str(sources["cnn"].relative_to(ROOT)),
        *CNN_EXPORT_ARGS,
        "--to",
        "all",
        "--out",
        str(out.relative_to(ROOT) if out.is_relative_to(ROOT) else out),
        "--name",
        "cnn",
    )
    found = re.search(r"^published as (\S+)/(\d+)$", text, re.M)
    if found is None:
        raise SystemExit("fwx export did not say where it published the model")
    return out / found.group(1) / found.group(2)


def validate(version_dir: Path, source: Path) -> None:
    """Run every format on the same inputs and diff against the PyTorch source (exit 1 on mismatch)."""
    rel = version_dir.relative_to(ROOT) if version_dir.is_relative_to(ROOT) else version_dir
    fwx(
        "validate",
        str(rel),
        "--source-model",
        str(source.relative_to(ROOT) if source.is_relative_to(ROOT) else source),
        "--model-class",
        CNN_CLASS,
        "--report",
        str((BUILD / "validation.html").relative_to(ROOT)),
    )


def serve(repo: Path = ARTIFACTS, seconds: float | None = None, extra: tuple[str, ...] = ()) -> int:
    """`fwx serve artifacts` in the foreground; it prints curl and tritonclient examples once ready.

    Ctrl-C in a terminal reaches the whole foreground process group, so the server
    already has it: passing it on again would count as a second Ctrl-C (stop without
    draining). Here we only wait for the drain; SIGTERM, which reaches this process
    alone, is passed on.
    """
    args = ["serve", str(repo.relative_to(ROOT) if repo.is_relative_to(ROOT) else repo), *extra]
    print("$ fwx " + shlex.join(args) + "    (Ctrl-C to stop)", flush=True)
    proc = subprocess.Popen([sys.executable, "-m", "fwx", *args], cwd=ROOT)
    signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C is the server's to handle
    rc = proc.wait()
    return 128 - rc if rc < 0 else rc  # killed by signal N: the shell's 128+N, not 256-N


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--serve-seconds", type=float, default=None, help="stop serving after N seconds")
    parser.add_argument("--no-serve", action="store_true", help="export and validate only")
    opts = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sources = build()
    version_dir = export_all(sources)
    validate(version_dir, sources["cnn"])
    if not opts.no_serve:
        sys.exit(serve(seconds=opts.serve_seconds))


if __name__ == "__main__":
    main()
