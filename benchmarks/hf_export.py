"""Benchmark: how long ``fwx export`` takes for each Hugging Face task, end to end, on tiny folders.

Each row is one tiny ``save_pretrained`` folder (hidden size 32, 1-2 layers, random weights: the same
builders the tests use, ``tests/exporter/hf_folders.py``) exported by the CLI in a fresh process, the task
inferred from the folder's config as a user would leave it. The time is fwx's own work (interpreter and
framework imports, the loader process, tracing, conversion, read-back, validation at two sizes, the greedy
checks of a decoder with a cache), not the model's size. Each figure is the median (with min-max) of
``--repeats`` runs.

Prints a table and writes benchmarks/results/hf_export.json (date, commit, machine: _provenance.py).
    python benchmarks/hf_export.py [--repeats 3] [--to onnx] [--only bert,detr]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._provenance import publish, shown, spread, timed_run  # noqa: E402
from tests.exporter import hf_folders  # noqa: E402  (the one set of tiny configs)

#: Row -> (builder, --task, what is written). ``None``: the task is inferred, as Optimum infers it.
ROWS: dict[str, tuple[str, str | None, str]] = {
    "text-classification (BERT)": ("bert", None, "1 model"),
    "feature-extraction (DistilBERT)": ("distilbert", None, "1 model"),
    "text-generation-with-past (Llama)": ("llama", "text-generation-with-past", "1 model"),
    "text2text-generation-with-past (BART)": ("bart", "text2text-generation-with-past", "3 models"),
    "automatic-speech-recognition (Whisper encoder)": ("whisper", None, "1 model"),
    "automatic-speech-recognition (Wav2Vec2 CTC)": ("wav2vec2_ctc", None, "1 model"),
    "audio-classification (Wav2Vec2)": ("wav2vec2_audio", None, "1 model"),
    "image-classification (ViT)": ("vit", None, "1 model"),
    "object-detection (DETR)": ("detr", None, "1 model"),
    "image-segmentation (SegFormer)": ("segformer", None, "1 model"),
}


def measure(builder: str, task: str | None, to: str, repeats: int, work: Path) -> dict[str, Any]:
    folder, _ = hf_folders.BUILDERS[builder](work / builder)
    times = []
    for i in range(repeats):
        out = work / f"repo-{builder}-{i}"
        cmd = [sys.executable, "-m", "fwx", "export", str(folder), "--to", to, "--out", str(out)]
        times.append(timed_run([*cmd, *(("--task", task) if task else ())]))
        shutil.rmtree(out, ignore_errors=True)
    return {"builder": builder, "task": task or "inferred", "seconds": spread(times, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--to", default="onnx", help="formats, as fwx export --to takes them")
    ap.add_argument("--only", default="", help="comma-separated builder names (default: every row)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "hf_export.json")
    args = ap.parse_args(argv)
    only = {s for s in args.only.split(",") if s}
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fwx-hf-bench-") as tmp:
        for what, (builder, task, writes) in ROWS.items():
            if only and builder not in only:
                continue
            rows[what] = {**measure(builder, task, args.to, args.repeats, Path(tmp)), "writes": writes}
            print(f"{what}: {shown(rows[what]['seconds'], 1)} s", flush=True)
    lines = [f"| task (model) | writes | `--to {args.to}`, seconds: median (min-max) |", "|---|---|---|"]
    lines += [f"| {what} | {r['writes']} | {shown(r['seconds'], 1)} |" for what, r in rows.items()]
    result = {"to": args.to, "repeats": args.repeats, "rows": rows}
    publish(result, "\n".join(lines), args.out)


if __name__ == "__main__":
    main()
