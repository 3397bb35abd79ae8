"""Refresh tests/deploy/schemas/kserve/ from a KServe checkout (run by hand, not in CI).

    git clone https://github.com/kserve/kserve /tmp/kserve
    python scripts/vendor_kserve_crds.py /tmp/kserve [COMMIT]

Takes ``spec.versions[*].schema.openAPIV3Schema`` of the three CRDs fwx's
manifests use from ``config/crd/full/``, drops the ``description`` texts
(90 % of the bytes, no validation value) and writes gzipped JSON.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

CRDS = ("servingruntimes", "clusterservingruntimes", "inferenceservices")
OUT = Path(__file__).resolve().parent.parent / "tests" / "deploy" / "schemas" / "kserve"


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def main(checkout: str, commit: str = "") -> None:
    root = Path(checkout)
    commit = (
        commit
        or subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    OUT.mkdir(parents=True, exist_ok=True)
    for crd in CRDS:
        doc = yaml.safe_load((root / "config" / "crd" / "full" / f"serving.kserve.io_{crd}.yaml").read_text())
        for version in doc["spec"]["versions"]:
            schema = _strip(version["schema"]["openAPIV3Schema"])
            data = json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()
            path = OUT / f"{crd}.{version['name']}.json.gz"
            path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
            print(f"{path.name}: {len(data)} bytes of schema")
    print(f"from kserve/kserve@{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
