"""Upsampling ops: ConvTranspose, Resize and the older Upsample, channels-last like the convolutions.

Only the forms with an exact TF/TFLite counterpart are translated (TRANSPOSE_CONV,
RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR); any other mode fails with a message
naming it rather than translating to something close. A resize by scales whose
output size may not be whole (a dynamic height halved) is computed with ONNX's
own coordinate mapping by gathers, since TF's resize maps with out/in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf.context import ChannelsLast, NodeCtx
from fwx.converters.onnx_tf.ops_nn import from_4d, to_4d
from fwx.converters.onnx_tf.table import op


def _spatial(c: NodeCtx, name: str, n: int, default: int, was_1d: bool) -> list[int]:
    vals = [int(v) for v in (c.attr(name) or [default] * n)]
    return [default, *vals] if was_1d else vals


@op("ConvTranspose")
def _conv_transpose(c: NodeCtx) -> Any:
    """TF's conv2d_transpose at the full (VALID) size, then the ONNX pads cropped off."""
    w = c.static(1, "weight")  # [C, M/group, kH, (kW)]
    if c.attr("output_shape") is not None or str(c.attr("auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
        c.fail("output_shape and auto_pad SAME are not supported; export with explicit pads")
    x, was_1d = to_4d(c)
    n = w.ndim - 2
    if was_1d:
        w = w[:, :, None, :]
    s, d = _spatial(c, "strides", n, 1, was_1d), _spatial(c, "dilations", n, 1, was_1d)
    extra = _spatial(c, "output_padding", n, 0, was_1d)
    if any(v != 1 for v in d):
        c.fail("dilated ConvTranspose is not supported (TFLite's TRANSPOSE_CONV has no dilation)")
    raw = [int(v) for v in (c.attr("pads") or [0] * (2 * n))]
    pads = [(raw[i], raw[i + n]) for i in range(n)]
    pads = [(0, 0), *pads] if was_1d else pads
    group = int(c.attr("group", 1))
    k = list(w.shape[2:])
    shape = tf.shape(x)
    static_hw = x.shape.as_list()[1:3]
    full = [
        s[i] * ((static_hw[i] if static_hw[i] is not None else shape[1 + i]) - 1) + k[i] + extra[i] for i in range(2)
    ]
    outs = []
    for g, xg in enumerate(tf.split(x, group, axis=3) if group > 1 else [x]):
        wg = w[g * (w.shape[0] // group) : (g + 1) * (w.shape[0] // group)]
        filt = c.env.materialize(np.ascontiguousarray(np.transpose(wg, (2, 3, 1, 0))))  # kH, kW, M/g, C/g
        out_shape = tf.stack([shape[0], *[tf.cast(v, tf.int32) for v in full], wg.shape[1]])
        outs.append(tf.nn.conv2d_transpose(xg, filt, out_shape, [1, *s, 1], "VALID"))
    y = tf.concat(outs, axis=3) if group > 1 else outs[0]
    y = y[:, pads[0][0] : full[0] - pads[0][1], pads[1][0] : full[1] - pads[1][1], :]
    if c.has(2):
        y = tf.nn.bias_add(y, c.t(2))
    return from_4d(y, was_1d)


def _out_size(c: NodeCtx, x: tf.Tensor, scales_i: int, sizes_i: int) -> Any:
    """(H, W) of the result from ``sizes`` or ``scales`` (N and C must not be resized)."""
    known = _static_sizes(c, sizes_i)
    if known is not None and known.size:
        return [int(v) for v in known.reshape(-1)[2:4]]
    if sizes_i >= 0 and c.has(sizes_i) and known is None:
        return tf.cast(tf.cast(c.t(sizes_i), tf.int64)[2:4], tf.int32)
    scales = (
        c.static(scales_i, "scales").reshape(-1).astype(np.float64)
        if scales_i >= 0
        else np.asarray(c.attr("scales"), np.float64)
    )
    if scales.size != 4 or scales[0] != 1 or scales[1] != 1:
        c.fail(f"scales {scales.tolist()} resize the batch or channel axis, or the input is not 4-D")
    hw = x.shape.as_list()[1:3]
    # ONNX maps coordinates with the given scale, TF with out/in: equal only when in * scale is whole.
    whole = all(float(sc).is_integer() for sc in scales[2:]) or (
        all(v is not None for v in hw) and all(float(v * sc).is_integer() for v, sc in zip(hw, scales[2:], strict=True))
    )
    if not whole:
        return _ByScale(scales[2:])
    if all(v is not None for v in hw):
        return [int(np.floor(v * sc)) for v, sc in zip(hw, scales[2:], strict=True)]
    dyn = tf.cast(tf.shape(x)[1:3], tf.float32) * tf.constant(scales[2:], tf.float32)
    return tf.cast(tf.floor(dyn), tf.int32)


class _ByScale:
    """Scales whose product with a dynamic size may not be whole: resized by ``_resize_by_scale``."""

    def __init__(self, scales: np.ndarray) -> None:
        self.scales = [float(v) for v in scales]


def _source_coords(out: tf.Tensor, size_in: tf.Tensor, scale: float, coords: str) -> tf.Tensor:
    """ONNX's coordinate transformation: where output index ``out`` samples the input (float32)."""
    x = tf.cast(out, tf.float32)
    if coords == "asymmetric":
        return x / scale
    if coords in ("half_pixel", "pytorch_half_pixel"):
        src = (x + 0.5) / scale - 0.5
        if coords == "pytorch_half_pixel":  # a length-1 output samples the first input pixel
            src = tf.where(tf.size(out) > 1, src, tf.zeros_like(src))
        return src
    n_out = tf.cast(tf.size(out), tf.float32)
    return x * (tf.cast(size_in, tf.float32) - 1.0) / tf.maximum(n_out - 1.0, 1.0)  # align_corners


def _resize_by_scale(x: tf.Tensor, scales: list[float], mode: str, coords: str) -> tf.Tensor:
    """Resize (a mode ``_resize`` admitted) with ONNX's own mapping (out = floor(in * scale), coordinates from the given scale), by gathers.

    TF's resize ops map with out/in, which differs from the scale when in * scale is not whole (an odd
    height halved); a dynamic size cannot be checked at conversion, so the mapping is computed here. Only
    GATHER, FLOOR and arithmetic: TFLite builtins.
    """
    y = x
    for axis, scale in ((1, scales[0]), (2, scales[1])):
        size_in = tf.shape(y)[axis]
        n_out = tf.cast(tf.floor(tf.cast(size_in, tf.float32) * scale), tf.int32)
        src = _source_coords(tf.range(n_out), size_in, scale, coords)
        last = tf.cast(size_in - 1, tf.float32)
        if mode == "nearest":
            idx = tf.cast(tf.clip_by_value(tf.floor(src), 0.0, last), tf.int32)
            y = tf.gather(y, idx, axis=axis)
            continue
        src = tf.clip_by_value(src, 0.0, last)
        lo = tf.floor(src)
        w = src - lo
        i0 = tf.cast(lo, tf.int32)
        i1 = tf.minimum(i0 + 1, size_in - 1)
        w = tf.reshape(w, [-1, 1] if axis == 1 else [-1])[None, ..., None]
        y = tf.gather(y, i0, axis=axis) * (1.0 - w) + tf.gather(y, i1, axis=axis) * w
    return y


#: linear coordinate modes -> TF's ResizeBilinear (align_corners, half_pixel_centers)
_LINEAR = {
    "half_pixel": (False, True),
    "pytorch_half_pixel": (False, True),
    "align_corners": (True, False),
    "asymmetric": (False, False),
}


def _axis_matrix(c: NodeCtx, n_in: int, scale: float | None, size: int | None) -> np.ndarray:
    """``[n_in, n_out]``: this node's Resize along one axis, computed by onnx's reference implementation on
    an identity (every mode, coordinate mapping, ``cubic_coeff_a`` and ``exclude_outside`` exactly as ONNX
    defines them), with the node's own scale or size so the coordinates map as in the graph."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    eye = np.eye(n_in, dtype=np.float32).reshape(n_in, 1, 1, n_in)
    if scale is not None:
        names, extra = ["x", "", "scales"], numpy_helper.from_array(np.array([1, 1, 1, scale], np.float32), "scales")
    else:
        names, extra = ["x", "", "", "sizes"], numpy_helper.from_array(np.array([n_in, 1, 1, size], np.int64), "sizes")
    graph = helper.make_graph(
        [helper.make_node("Resize", names, ["y"], **c.node.attrs)],
        "axis",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(eye.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[extra],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(c.opset, 13))])
    result: Any = ReferenceEvaluator(model).run(None, {"x": eye})
    return np.ascontiguousarray(result[0][:, 0, 0, :], dtype=np.float32)


def _static_sizes(c: NodeCtx, i: int) -> np.ndarray | None:
    """The ``sizes`` input when its H and W are known at conversion, even if N and C come from the input's
    shape at run time (``F.interpolate(size=(16, 16))``: ``Concat(Shape(x)[:2], [16, 16])``)."""
    if i < 0 or not c.has(i):
        return None
    known = c.const(i)
    if known is not None:
        return known
    from tensorflow.python.framework import tensor_util

    dims = tensor_util.constant_value_as_shape(c.t(i)).as_list()
    if dims is None or len(dims) != 4 or dims[2] is None or dims[3] is None:
        return None
    return np.array([-1 if d is None else d for d in dims], np.int64)


def _resize_by_matrices(c: NodeCtx, x: tf.Tensor, scales_i: int, sizes_i: int) -> tf.Tensor | None:
    """A resize TF's ops do not reproduce (bicubic with ONNX's ``a = -0.75``, other coordinate mappings) as
    two products with constant interpolation matrices, when the input and output sizes are static:
    MatMul and Transpose, TFLite builtins. None when a size is only known at run time."""
    hw = x.shape.as_list()[1:3]
    if c.opset < 11 or any(v is None for v in hw):
        return None
    sizes = _static_sizes(c, sizes_i)
    scales = c.const(scales_i) if c.has(scales_i) else None
    if sizes is not None and sizes.size:  # the node's own choice decides how coordinates map: sizes ...
        per_axis = [_axis_matrix(c, int(n), None, int(sizes.reshape(-1)[2 + a])) for a, n in enumerate(hw)]
    elif scales is not None and scales.size:  # ... or scales
        per_axis = [_axis_matrix(c, int(n), float(scales.reshape(-1)[2 + a]), None) for a, n in enumerate(hw)]
    else:
        return None
    a_h, a_w = (c.env.materialize(m) for m in per_axis)
    y = tf.transpose(x, [0, 3, 2, 1]) @ a_h  # N, C, W, H'
    y = tf.transpose(y, [0, 1, 3, 2]) @ a_w  # N, C, H', W'
    return tf.transpose(y, [0, 2, 3, 1])


def _resize(c: NodeCtx, x: tf.Tensor, size: Any, mode: str, coords: str, nearest: str) -> tf.Tensor:
    native = (
        mode == "linear" and coords in _LINEAR or mode == "nearest" and (coords, nearest) == ("asymmetric", "floor")
    )
    if not native:
        y = _resize_by_matrices(c, tf.cast(x, tf.float32), 2, 3) if c.node.op == "Resize" else None
        if y is not None:
            return y
        c.fail(
            f"{mode} resize with {coords!r} coordinates and nearest_mode {nearest!r} is not supported on "
            "dynamic sizes (nearest: asymmetric + floor; linear: half_pixel, pytorch_half_pixel, align_corners, "
            "asymmetric; any mode when the input and output sizes are fixed)"
        )
    if isinstance(size, _ByScale):
        return _resize_by_scale(x, size.scales, mode, coords)
    size = tf.constant(size, tf.int32) if isinstance(size, list) else size
    if mode == "linear":
        corners, half = _LINEAR[coords]
        return tf.raw_ops.ResizeBilinear(images=x, size=size, align_corners=corners, half_pixel_centers=half)
    return tf.raw_ops.ResizeNearestNeighbor(images=x, size=size, align_corners=False, half_pixel_centers=False)


@op("Resize")
def _resize_op(c: NodeCtx) -> Any:
    if c.rank(0) != 4:
        c.fail("only 4-D (N, C, H, W) inputs are supported")
    if c.attr("axes") is not None or str(c.attr("keep_aspect_ratio_policy", "stretch")) != "stretch":
        c.fail("axes and keep_aspect_ratio_policy are not supported")
    x = c.cl(0)
    size = _out_size(c, x, 1 if c.opset < 11 else 2, -1 if c.opset < 11 else 3)
    y = _resize(
        c,
        x,
        size,
        str(c.attr("mode", "nearest")),
        str(c.attr("coordinate_transformation_mode", "half_pixel" if c.opset >= 11 else "asymmetric")),
        str(c.attr("nearest_mode", "round_prefer_floor" if c.opset >= 11 else "floor")),
    )
    return ChannelsLast(tf.cast(y, x.dtype))


@op("Upsample")
def _upsample(c: NodeCtx) -> Any:
    """Deprecated since opset 10: asymmetric coordinates, nearest rounds down."""
    if c.rank(0) != 4:
        c.fail("only 4-D (N, C, H, W) inputs are supported")
    x = c.cl(0)
    size = _out_size(c, x, 1 if c.has(1) else -1, -1)
    return ChannelsLast(tf.cast(_resize(c, x, size, str(c.attr("mode", "nearest")), "asymmetric", "floor"), x.dtype))
