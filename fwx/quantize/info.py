"""What a quantisation did, in one record: it goes to fwx.json and to the reports.

A quantised artifact is only trustworthy next to its receipt: which data
calibrated it (and whether that data was random), how many samples, which
granularity, what it cost in size and in accuracy. ``QuantInfo`` is that
receipt; ``to_json`` is what ``ArtifactEntry.quantization`` stores.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class EvalResult:
    """Float vs quantised on the eval data. Accuracy fields only when labels were given."""

    samples: int
    output: str
    accuracy_float: float | None = None
    accuracy_quant: float | None = None
    agreement: float | None = None  # top-1 of quantised == top-1 of float
    cosine_mean: float | None = None
    cosine_min: float | None = None

    @property
    def drop_points(self) -> float | None:
        """Top-1 accuracy lost, in percentage points (negative = the quantised model did better)."""
        if self.accuracy_float is None or self.accuracy_quant is None:
            return None
        return round((self.accuracy_float - self.accuracy_quant) * 100, 4)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["drop_points"] = self.drop_points
        return data


@dataclass
class BudgetResult:
    """What the accuracy budget did: the layers it kept in float, each step it tried, the size it cost.

    ``plain``/``final`` are measures (``drop_points``, ``cosine_mean``,
    ``agreement``) of plain INT8 and of the published model on the samples the
    search chose on; ``holdout`` holds the same two measured on samples it never
    saw (``split``: their sizes and seed). ``steps`` lists every layer tried, in
    ranking order, and whether keeping it in float helped. ``graph`` names the
    float graph that was quantised (the exporter that wrote it).
    """

    budget: str  # e.g. "top-1 drop <= 0.5 pt"
    met: bool
    ranking: str  # the tool and metric that ordered the layers
    data: str = ""  # the samples the budget was measured on
    plain: dict[str, Any] = field(default_factory=dict)
    final: dict[str, Any] = field(default_factory=dict)
    float_layers: list[dict[str, Any]] = field(default_factory=list)  # {name, op, score} as named in the artifact
    steps: list[dict[str, Any]] = field(default_factory=list)
    size_int8: int = 0  # plain INT8
    size_final: int = 0
    graph: str = ""  # the float graph quantised: the exporter (hop tool) that wrote it
    split: dict[str, Any] = field(default_factory=dict)  # {seed, search_samples, holdout_samples}
    holdout: dict[str, Any] = field(default_factory=dict)  # {plain, final}: measures on the held-out part

    @property
    def size_cost_pct(self) -> float:
        """How much larger the published model is than plain INT8, in percent."""
        return round((self.size_final / self.size_int8 - 1) * 100, 2) if self.size_int8 else 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["size_cost_pct"] = self.size_cost_pct
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BudgetResult:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class QuantInfo:
    """The receipt of one quantisation (ONNX post-processing or TFLite conversion)."""

    kind: str  # int8 | int8-dynamic | fp16
    format: str  # onnx | tflite
    tool: str = ""
    tool_version: str = ""
    method: str | None = None  # minmax | entropy | percentile (static int8 only)
    calibration_data: str | None = None  # where the samples came from; "random" is flagged in warnings
    samples: int = 0
    granularity: str | None = None  # per-channel | per-tensor (weights of int8 kinds)
    weight_bits: int | None = None  # 7 (ONNX default: no saturation on any CPU) or 8; int8 kinds only
    cpu: dict[str, Any] = field(default_factory=dict)  # the CPU it was calibrated and measured on (cpu.py)
    io_dtype: str = "float32"  # dtype of the artifact's inputs/outputs
    io: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {dtype, scale, zero_point}
    opset: int | None = None
    size_before: int = 0
    size_after: int = 0
    float_ops: dict[str, int] = field(default_factory=dict)  # TFLite: op -> count still computing in float
    calibration_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    eval: EvalResult | None = None
    budget: BudgetResult | None = None  # --max-drop / --min-cosine / --min-agreement

    @property
    def size_ratio(self) -> float | None:
        return round(self.size_before / self.size_after, 3) if self.size_after else None

    @property
    def precision(self) -> str:
        """The precision name the validators' tolerance policy knows ("int8" or "fp16")."""
        return "fp16" if self.kind == "fp16" else "int8"

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["size_ratio"] = self.size_ratio
        data["eval"] = self.eval.to_json() if self.eval else None
        data["budget"] = self.budget.to_json() if self.budget else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QuantInfo:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        ev = fields.pop("eval", None)
        budget = fields.pop("budget", None)
        info = cls(**fields)
        if budget:
            info.budget = BudgetResult.from_json(budget)
        if ev:
            info.eval = EvalResult(**{k: v for k, v in ev.items() if k in EvalResult.__dataclass_fields__})
        return info
