"""A SavedModel folder without ``saved_model.pb`` is refused by the scanner, not passed on unscanned.

TensorFlow's loader also reads ``saved_model.pbtxt`` when no ``.pb`` is there; the scanner reads the ``.pb``
only, so a folder holding a text graph (here with ``WriteFile``) must stop at the scanner.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fwx.errors import InputError
from fwx.safety import check_savedmodel


def test_a_text_graph_alone_is_refused_before_any_loader(tmp_path: Path) -> None:
    folder = tmp_path / "sm"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pbtxt").write_text('meta_graphs { graph_def { node { name: "w" op: "WriteFile" } } }\n')
    with pytest.raises(InputError, match="no saved_model.pb") as info:
        check_savedmodel(folder)
    assert len(str(info.value).splitlines()) == 1
