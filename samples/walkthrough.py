"""End-to-end walkthrough (``make run``): build the sample models, export the CNN to every format.

Steps are functions so later steps (validate, serve) can be added in the
marked places. Each step runs the real ``fwx`` command line, printed first,
so what you see is what you would type.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "samples" / "build"
ARTIFACTS = ROOT / "artifacts"


def fwx(*args: str) -> dict[str, object]:
    """Run ``fwx ARGS --json`` (progress on stderr as usual) and return its JSON document."""
    cmd = [sys.executable, "-m", "fwx", *args, "--json"]
    print("$ fwx " + shlex.join(args), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    doc: dict[str, object] = json.loads(proc.stdout) if proc.stdout.strip() else {}
    if proc.returncode != 0:
        raise SystemExit(f"fwx {args[0]} failed (exit {proc.returncode}): {doc.get('error', '')}")
    return doc


def build(folder: Path = BUILD) -> dict[str, Path]:
    """Write the sample sources: cnn.pt (state_dict), cnn_keras.keras, tfmodule.savedmodel/."""
    sys.path.insert(0, str(ROOT))
    from samples.models import save_all

    paths = save_all(folder)
    for key, path in paths.items():
        print(f"built {key}: {path.relative_to(ROOT)}")
    return paths


def export_all(sources: dict[str, Path], out: Path = ARTIFACTS) -> Path:
    """Export the PyTorch CNN to every reachable format; returns the published version folder."""
    doc = fwx("export", str(sources["cnn"].relative_to(ROOT)), "--model-class", "samples.models:SmallCNN",
              "--input", "image:float32[N,3,32,32]", "--output", "logits", "--to", "all",
              "--out", str(out.relative_to(ROOT) if out.is_relative_to(ROOT) else out), "--name", "cnn")
    for row in doc["targets"]:  # type: ignore[union-attr]
        print(f"  {row['format']:<12} {row['path']:<24} {row['check']}")
    version_dir = Path(str(doc["version_dir"]))
    print(f"published {version_dir}")
    return version_dir if version_dir.is_absolute() else ROOT / version_dir


# --- validate: `fwx validate <version_dir>` goes here (added with the validators). ---
# --- serve: `fwx serve artifacts` goes here (added with the server). ---


def main() -> None:
    sources = build()
    export_all(sources)


if __name__ == "__main__":
    main()
