"""A media version's processor read when the version loads, so an unsupported one is said once, at load.

The version still loads and serves: its tensor interface works whatever the
processor. The line names the processor and says so; each image or audio
request for it is then the same 400 (the refusal is kept per version).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fwx.errors import FwxError
from fwx.serving.tasks.assets import AUDIO_TASKS, IMAGE_TASKS, media_task

if TYPE_CHECKING:
    from fwx.serving.models import LoadedModel

log = logging.getLogger("fwx.serving")


def check_at_load(model: LoadedModel) -> None:
    """Read an image or audio version's assets now (a small checked JSON file); log a refusal as one warning."""
    try:
        task = media_task(model)
        if task in IMAGE_TASKS:
            from fwx.serving.tasks.vision import vision_assets

            vision_assets(model)
        elif task in AUDIO_TASKS:
            from fwx.serving.tasks.audio import audio_assets

            audio_assets(model, task)
    except FwxError as exc:
        log.warning("%s/%s takes tensors only: %s", model.name, model.version, exc)
    except Exception as exc:  # noqa: BLE001 - a check of the media assets must never fail a load
        log.warning("%s/%s: its media assets could not be read at load: %s", model.name, model.version, exc)
