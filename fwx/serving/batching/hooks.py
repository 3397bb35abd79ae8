"""The manager's load hooks: give each loaded version its typed serving slot.

A ``ModelSlot`` is what the data plane needs per served version: the request
plan (signature checks compiled at load, not on the first request), the
batcher, and the statistics both record into. ``LoadedModel.slot`` holds it
from ``on_load`` until ``on_unload`` has drained the batcher.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fwx.serving.batching.batcher import Batcher
from fwx.serving.drift import version_drift
from fwx.serving.signature_check import RequestPlan
from fwx.serving.stats import ModelStats

if TYPE_CHECKING:
    from fwx.serving.config import ServerConfig
    from fwx.serving.metrics import Metrics
    from fwx.serving.models import LoadedModel

log = logging.getLogger("fwx.serving")


@dataclass(eq=False)
class ModelSlot:
    """The serving state of one loaded version."""

    stats: ModelStats
    plan: RequestPlan
    batcher: Batcher


class BatchingHooks:
    """The manager's ``on_load``/``on_unload``: attach a slot at load, drain and detach it at unload."""

    def __init__(self, config: ServerConfig, metrics: Metrics) -> None:
        self.config = config
        self.metrics = metrics
        self.batchers: set[Batcher] = set()

    def attach(self, model: LoadedModel) -> ModelSlot:
        """Build and attach ``model``'s slot (also for a manager built without these hooks)."""
        stats = ModelStats(model.name, str(model.version))
        slot = ModelSlot(stats, RequestPlan(model.signature, model.batchable), Batcher(model, self.config, stats))
        model.slot = slot
        self.batchers.add(slot.batcher)
        self.metrics.add_model(stats)
        return slot

    def on_load(self, model: LoadedModel) -> None:
        self.attach(model)
        try:
            drift = version_drift(model.manifest, model.format, model.runtime.runtime_version)
        except Exception:  # noqa: BLE001 - a version probe must never fail a load
            drift = None
        if drift:
            log.warning("%s", drift)

    async def on_unload(self, model: LoadedModel) -> None:
        slot: ModelSlot | None = model.slot
        if slot is not None:
            batcher = slot.batcher
            if not await batcher.drain(self.config.drain_seconds):
                log.warning(
                    "model %s/%s still busy after %.0fs; unloading anyway",
                    model.name,
                    model.version,
                    self.config.drain_seconds,
                )
            batcher.close()
            self.batchers.discard(batcher)
        self.metrics.remove_model(model.name, str(model.version))
