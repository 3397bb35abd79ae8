"""Resize / Upsample onto ``F.interpolate`` for the coordinate modes torch implements exactly.

ONNX has many coordinate modes; torch has a few. The ones that map one to one:
nearest with asymmetric+floor (what the torch exporters write for
``nn.Upsample``) -> "nearest", nearest with half_pixel+round_prefer_ceil ->
"nearest-exact", linear/cubic with half_pixel (or pytorch_half_pixel) ->
``align_corners=False``, with align_corners -> ``align_corners=True``.
Anything else is listed by precheck rather than approximated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx
import torch.nn.functional as F  # noqa: N812

from fwx.converters.onnx_torch.builder import GraphBuilder
from fwx.converters.onnx_torch.ops.registry import OnnxNode, attr_of, op
from fwx.converters.onnx_torch.values import Value, as_items

LINEAR = {3: "linear", 4: "bilinear", 5: "trilinear"}


def _mode(op_type: str, attr: Callable[[str, Any], Any], opset: int) -> tuple[str, bool | None] | str:
    """(torch mode, align_corners) for a node with these attributes, or what is unsupported."""
    mode = str(attr("mode", "nearest"))
    old = op_type == "Upsample" or opset < 11  # no coordinate modes yet: asymmetric, floor
    coord = "asymmetric" if old else str(attr("coordinate_transformation_mode", "half_pixel"))
    nearest = "floor" if old else str(attr("nearest_mode", "round_prefer_floor"))
    if mode == "nearest":
        if coord == "asymmetric" and nearest == "floor":
            return "nearest", None
        if coord in ("half_pixel", "pytorch_half_pixel") and nearest == "round_prefer_ceil":
            return "nearest-exact", None
        return f"nearest {coord}/{nearest}"
    if mode not in ("linear", "cubic", "bilinear"):
        return f"mode={mode}"
    if attr("exclude_outside", 0) or float(attr("cubic_coeff_a", -0.75)) != -0.75:
        return "cubic_coeff_a/exclude_outside"
    if coord in ("half_pixel", "pytorch_half_pixel"):
        return ("bicubic" if mode == "cubic" else "linear"), False
    if coord == "align_corners":
        return ("bicubic" if mode == "cubic" else "linear"), True
    return f"{mode} {coord}"


def _check(node: onnx.NodeProto, opset: int) -> str | None:
    got = _mode(node.op_type, lambda k, d: attr_of(node, k, d), opset)
    if isinstance(got, str):
        return got
    if attr_of(node, "axes") or str(attr_of(node, "keep_aspect_ratio_policy", "stretch")) != "stretch":
        return "axes/keep_aspect_ratio_policy"
    return None


@op("Resize", "Upsample", check=_check)
def _resize(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.need(0)
    rank = b.rank(x)
    got = _mode(n.op_type, n.attr, n.opset)
    if isinstance(got, str):
        raise n.unsupported(got)
    mode, align = got
    if mode == "linear":
        mode = LINEAR.get(rank, "")
        if not mode:
            raise n.unsupported(f"linear on rank {rank}")
    kwargs: dict[str, Any] = {"mode": mode}
    if align is not None:
        kwargs["align_corners"] = align
    if n.attr("antialias", 0):
        kwargs["antialias"] = True
    sizes = n.input(3) if n.op_type == "Resize" and n.opset >= 11 else None
    if sizes is not None:
        items = as_items(sizes)
        if items is None:
            raise n.unsupported("sizes computed as a tensor at run time")
        return b.call(F.interpolate, x, size=items[0][2:], **kwargs)
    scales = n.const(1 if n.opset < 11 or n.op_type == "Upsample" else 2)
    if scales is None:
        scales_list = [float(s) for s in n.attr("scales", [])]
    else:
        scales_list = [float(s) for s in scales.reshape(-1).tolist()]
    if scales_list[:2] != [1.0, 1.0]:
        raise n.unsupported("scaling the batch or channel axis")
    return b.call(F.interpolate, x, scale_factor=scales_list[2:], **kwargs)
