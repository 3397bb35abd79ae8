"""tests/deploy reuses the tiny ONNX builders of tests/serving (serving_models)."""

from __future__ import annotations

import sys
from pathlib import Path

_SERVING = str(Path(__file__).resolve().parent.parent / "serving")
if _SERVING not in sys.path:
    sys.path.insert(0, _SERVING)
