"""Convolutions, pooling and normalisation.

ONNX graphs from PyTorch are NCHW, but TF's CPU kernels and TFLite only run
NHWC convolutions and pools. These handlers take their input channels-last
(``NodeCtx.cl`` transposes once when needed) and return ``ChannelsLast``
values, so a chain of them transposes once on entry and once on exit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from fwx.converters.onnx_tf.context import ChannelsLast, NodeCtx
from fwx.converters.onnx_tf.table import op

Pads = list[tuple[int, int]]


def _same_pads(size: int, k: int, s: int, d: int, upper: bool) -> tuple[int, int]:
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    small, big = total // 2, total - total // 2
    return (small, big) if upper else (big, small)


def spatial_pads(c: NodeCtx, hw: list[int | None], k: list[int], s: list[int], d: list[int]) -> Pads | str:
    """Begin/end padding per spatial axis, or ``"SAME"`` when TF's SAME is exact but sizes are dynamic."""
    auto = str(c.attr("auto_pad", "NOTSET"))
    n = len(k)
    if auto == "VALID":
        return [(0, 0)] * n
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        if any(x is None for x in hw):
            if auto == "SAME_UPPER":
                return "SAME"
            c.fail("auto_pad SAME_LOWER needs static spatial sizes")
        return [_same_pads(int(x or 0), k[i], s[i], d[i], auto == "SAME_UPPER") for i, x in enumerate(hw)]
    p = [int(v) for v in (c.attr("pads") or [0] * (2 * n))]
    return [(p[i], p[i + n]) for i in range(n)]


def _is_same(pads: Pads, hw: list[int | None], k: list[int], s: list[int], d: list[int]) -> bool:
    if any(x is None for x in hw):
        return False
    return all(pads[i] == _same_pads(int(x or 0), k[i], s[i], d[i], True) for i, x in enumerate(hw))


def _pad_nhwc(x: tf.Tensor, pads: Pads, value: float = 0.0) -> tf.Tensor:
    if not any(a or b for a, b in pads):
        return x
    return tf.pad(x, [[0, 0], *[list(p) for p in pads], [0, 0]], constant_values=value)


def to_4d(c: NodeCtx) -> tuple[tf.Tensor, bool]:
    """Input as NHWC; 1-D ops (N, C, W) become (N, 1, W, C)."""
    rank = c.rank(0)
    if rank == 4:
        return c.cl(0), False
    if rank == 3:
        return tf.expand_dims(tf.transpose(c.t(0), [0, 2, 1]), 1), True
    return c.fail(f"handles 1-D, 2-D and 3-D inputs, not rank {rank}")


def from_4d(y: tf.Tensor, was_1d: bool) -> Any:
    return tf.transpose(tf.squeeze(y, 1), [0, 2, 1]) if was_1d else ChannelsLast(y)


def _geometry(c: NodeCtx, x: tf.Tensor, was_1d: bool, kernel: list[int]) -> tuple[list[int], list[int], list[int], Any]:
    n = len(kernel)
    s = [int(v) for v in (c.attr("strides") or [1] * n)]
    d = [int(v) for v in (c.attr("dilations") or [1] * n)]
    hw = x.shape.as_list()[1:3]
    if was_1d:
        kernel, s, d, hw = [1, *kernel], [1, *s], [1, *d], hw
        pads = spatial_pads(c, hw[1:], kernel[1:], s[1:], d[1:])
        pads = pads if isinstance(pads, str) else [(0, 0), *pads]
    else:
        pads = spatial_pads(c, hw, kernel, s, d)
    return kernel, s, d, pads


#: NCDHW <-> NDHWC: TF's 3-D convolution and pools (and TFLite's CONV_3D) take channels last.
_TO_NDHWC, _TO_NCDHW = [0, 2, 3, 4, 1], [0, 4, 1, 2, 3]


def _volume(c: NodeCtx, kernel: list[int]) -> tuple[tf.Tensor, list[int], Any]:
    """A rank-5 (video) input as NDHWC, its strides and its pads (per axis, or ``"SAME"``)."""
    if any(int(v) != 1 for v in (c.attr("dilations") or [])):
        c.fail("dilated 3-D convolution or pooling is not supported (TF's CPU kernels have none)")
    x = tf.transpose(c.t(0), _TO_NDHWC)
    s = [int(v) for v in (c.attr("strides") or [1, 1, 1])]
    dhw = x.shape.as_list()[1:4]
    pads = spatial_pads(c, dhw, kernel, s, [1, 1, 1])
    if not isinstance(pads, str) and _is_same(pads, dhw, kernel, s, [1, 1, 1]):
        return x, s, "SAME"
    return x, s, pads


def _conv3d(c: NodeCtx, w: np.ndarray) -> Any:
    if int(c.attr("group", 1)) != 1:
        c.fail("grouped 3-D convolution is not supported")
    x, s, pads = _volume(c, list(w.shape[2:]))
    if not isinstance(pads, str):
        x = _pad_nhwc(x, pads)
    dhwio = np.ascontiguousarray(np.transpose(w, (2, 3, 4, 1, 0)))  # kD, kH, kW, C, M
    y = tf.nn.conv3d(x, c.env.materialize(dhwio), [1, *s, 1], "SAME" if pads == "SAME" else "VALID")
    if c.has(2):
        y = tf.nn.bias_add(y, c.t(2))
    return tf.transpose(y, _TO_NCDHW)


def _pool3d(c: NodeCtx, fn: Any, lowest: bool) -> Any:
    """A 3-D max or average pool as two 2-D pools (over H and W per frame, then over D), since a box's max or
    mean is that of its slices': TFLite has no 3-D pool builtin, and each axis keeps its own padding."""
    if int(c.attr("ceil_mode", 0)) or int(c.attr("count_include_pad", 0)):
        c.fail("ceil_mode and count_include_pad are not supported for 3-D pools")
    k = [int(v) for v in c.attr("kernel_shape")]
    x, s, pads = _volume(c, k)
    padding = "SAME" if pads == "SAME" else "VALID"
    if not isinstance(pads, str) and any(a or b for a, b in pads):
        if not lowest:
            c.fail("padded 3-D average pooling is not supported")
        x = _pad_nhwc(x, pads, float(x.dtype.min))
    n, d, h, w, ch = (tf.shape(x)[i] for i in range(5))
    frames = fn(tf.reshape(x, [n * d, h, w, ch]), k[1:], s[1:], padding)
    h2, w2 = tf.shape(frames)[1], tf.shape(frames)[2]
    y = fn(tf.reshape(frames, [n, d, h2 * w2, ch]), [k[0], 1], [s[0], 1], padding)
    return tf.transpose(tf.reshape(y, [n, tf.shape(y)[1], h2, w2, ch]), _TO_NCDHW)


@op("Conv")
def _conv(c: NodeCtx) -> Any:
    w = c.static(1, "weight")
    if c.rank(0) == 5:
        return _conv3d(c, w)
    group = int(c.attr("group", 1))
    x, was_1d = to_4d(c)
    k, s, d, pads = _geometry(c, x, was_1d, list(w.shape[2:]))
    if was_1d:
        w = w[:, :, None, :]
    if pads != "SAME" and _is_same(pads, x.shape.as_list()[1:3], k, s, d):
        pads = "SAME"
    padding = "SAME" if pads == "SAME" else "VALID"
    if not isinstance(pads, str):
        x = _pad_nhwc(x, pads)
    hwio = np.ascontiguousarray(np.transpose(w, (2, 3, 1, 0)))  # kH, kW, C/g, M
    cin, m = w.shape[1] * group, w.shape[0]
    if group == 1:
        y = tf.nn.conv2d(x, c.env.materialize(hwio), [1, *s, 1], padding, dilations=[1, *d, 1])
    elif group == cin and m % cin == 0 and s[0] == s[1]:
        dw = np.ascontiguousarray(np.transpose(w.reshape(cin, m // cin, *w.shape[2:]), (2, 3, 0, 1)))
        y = tf.nn.depthwise_conv2d(x, c.env.materialize(dw), [1, *s, 1], padding, dilations=d)
    else:
        xs = tf.split(x, group, axis=3)
        ws = np.split(hwio, group, axis=3)
        y = tf.concat(
            [
                tf.nn.conv2d(xi, c.env.materialize(np.ascontiguousarray(wi)), [1, *s, 1], padding, dilations=[1, *d, 1])
                for xi, wi in zip(xs, ws, strict=True)
            ],
            axis=3,
        )
    if c.has(2):
        y = tf.nn.bias_add(y, c.t(2))
    return from_4d(y, was_1d)


def _pool_pads(c: NodeCtx, x: tf.Tensor, was_1d: bool, kernel: list[int]) -> tuple[list[int], list[int], Any, Pads]:
    """Kernel, strides, explicit pads and the extra end padding that ``ceil_mode`` adds."""
    k, s, d, pads = _geometry(c, x, was_1d, kernel)
    if any(v != 1 for v in d):
        c.fail("dilated pooling is not supported")
    extra: Pads = [(0, 0)] * len(k)
    if int(c.attr("ceil_mode", 0)) and pads != "SAME":
        hw = x.shape.as_list()[1:3]
        if any(v is None for v in hw):
            c.fail("ceil_mode needs static spatial sizes")
        extra = []
        for i, size in enumerate(hw):
            full = int(size) + pads[i][0] + pads[i][1]
            out = -(-(full - k[i]) // s[i]) + 1
            if (out - 1) * s[i] >= int(size) + pads[i][0]:
                out -= 1
            extra.append((0, max((out - 1) * s[i] + k[i] - full, 0)))
    return k, s, pads, extra


@op("MaxPool")
def _max_pool(c: NodeCtx) -> Any:
    if len(c.node.outputs) > 1 and c.node.outputs[1]:
        c.fail("the Indices output is not supported")
    if c.rank(0) == 5:
        return _pool3d(c, tf.nn.max_pool2d, lowest=True)
    x, was_1d = to_4d(c)
    k, s, pads, extra = _pool_pads(c, x, was_1d, list(c.attr("kernel_shape")))
    hw = x.shape.as_list()[1:3]
    if pads != "SAME" and _is_same(pads, hw, k, s, [1, 1]) and not any(e for _, e in extra):
        pads = "SAME"
    if pads == "SAME":
        return from_4d(tf.nn.max_pool2d(x, k, s, "SAME"), was_1d)
    total = [(a + ea, b + eb) for (a, b), (ea, eb) in zip(pads, extra, strict=True)]
    if _mirror_exact(total, hw, k):
        padded = tf.pad(x, [[0, 0], *[list(p) for p in total], [0, 0]], "SYMMETRIC")
    else:
        padded = _pad_nhwc(x, total, float(x.dtype.min) if x.dtype.is_floating else int(x.dtype.min))
    return from_4d(tf.nn.max_pool2d(padded, k, s, "VALID"), was_1d)


def _mirror_exact(pads: Pads, hw: list[int | None], k: list[int]) -> bool:
    """Whether padding by mirroring the border leaves every window's maximum unchanged.

    A window that covers ``p`` padded cells on one side also covers the ``p``
    border cells they mirror when ``k >= 2p`` (PyTorch's limit on pooling pads),
    so their copies cannot raise its maximum. Padding with the dtype's lowest
    value gives the same float result, but int8 calibration takes that constant
    into the activation's range (PADV2 keeps its input's scale): the pooled
    tensor's scale becomes ~1e36, every value rounds to zero and LiteRT's XNNPACK
    delegate cannot prepare the graph (torchvision's ResNet stem).
    """
    for i, (begin, end) in enumerate(pads):
        size = hw[i]
        if max(begin, end) * 2 > k[i] or max(begin, end) > (size if size is not None else 1):
            return False
    return any(begin or end for begin, end in pads)


@op("AveragePool")
def _avg_pool(c: NodeCtx) -> Any:
    if c.rank(0) == 5:
        return _pool3d(c, tf.nn.avg_pool2d, lowest=False)
    x, was_1d = to_4d(c)
    k, s, pads, extra = _pool_pads(c, x, was_1d, list(c.attr("kernel_shape")))
    include = bool(int(c.attr("count_include_pad", 0)))
    if pads == "SAME":
        if include:
            c.fail("count_include_pad with auto_pad SAME needs static spatial sizes")
        return from_4d(tf.nn.avg_pool2d(x, k, s, "SAME"), was_1d)
    padded = [(a + ea, b + eb) for (a, b), (ea, eb) in zip(pads, extra, strict=True)]
    if not any(a or b for a, b in padded):
        return from_4d(tf.nn.avg_pool2d(x, k, s, "VALID"), was_1d)
    if not include and padded == pads and _is_same(pads, x.shape.as_list()[1:3], k, s, [1, 1]):
        return from_4d(tf.nn.avg_pool2d(x, k, s, "SAME"), was_1d)
    # General case: window sum over the padded input / number of counted cells in the window.
    xs = tf.shape(x)
    ones = tf.ones(tf.stack([1, xs[1], xs[2], 1]), x.dtype)
    mask = _pad_nhwc(_pad_nhwc(ones, pads, 1.0 if include else 0.0), extra, 0.0)
    y = tf.nn.avg_pool2d(_pad_nhwc(x, padded), k, s, "VALID") / tf.nn.avg_pool2d(mask, k, s, "VALID")
    return from_4d(y, was_1d)


def _global(fn: Any) -> Any:
    def handler(c: NodeCtx) -> Any:
        if c.rank(0) == 4:
            return ChannelsLast(fn(c.cl(0), axis=[1, 2], keepdims=True))
        return fn(c.t(0), axis=list(range(2, c.rank(0))), keepdims=True)

    return handler


op("GlobalAveragePool")(_global(tf.reduce_mean))
op("GlobalMaxPool")(_global(tf.reduce_max))


def _per_channel(c: NodeCtx, v: Any) -> Any:
    """A per-channel vector shaped to broadcast against input 0 in its current layout."""
    rank = c.rank(0)
    if c.is_cl(0) or rank <= 2:
        return v
    shape = [-1] + [1] * (rank - 2)
    return np.reshape(v, shape) if isinstance(v, np.ndarray) else tf.reshape(v, shape)


def _apply_cl(c: NodeCtx, fn: Any) -> Any:
    if c.is_cl(0):
        return ChannelsLast(fn(c.cl(0)))
    return fn(c.t(0))


@op("BatchNormalization")
def _batch_norm(c: NodeCtx) -> Any:
    """Inference form, folded to one multiply-add per channel when the statistics are constant."""
    if int(c.attr("training_mode", 0)):
        c.fail("training_mode=1 is not supported; export the model in eval mode")
    eps = float(c.attr("epsilon", 1e-5))
    consts = [c.const(i) for i in range(1, 5)]
    if all(k is not None for k in consts):
        scale, bias, mean, var = (np.asarray(k, np.float64) for k in consts)  # type: ignore[arg-type]
        a = scale / np.sqrt(var + eps)
        dt = np.dtype(c.dtype(0).as_numpy_dtype)
        ka, kb = (c.env.materialize(_per_channel(c, v.astype(dt))) for v in (a, bias - mean * a))
        return _apply_cl(c, lambda x: x * ka + kb)
    scale, bias, mean, var = (_per_channel(c, c.t(i)) for i in range(1, 5))
    return _apply_cl(c, lambda x: (x - mean) * tf.math.rsqrt(var + eps) * scale + bias)


@op("InstanceNormalization")
def _instance_norm(c: NodeCtx) -> Any:
    eps = float(c.attr("epsilon", 1e-5))
    scale, bias = _per_channel(c, c.t(1)), _per_channel(c, c.t(2))
    rank = c.rank(0)
    axes = [1, 2] if c.is_cl(0) else list(range(2, rank))

    def norm(x: tf.Tensor) -> tf.Tensor:
        mean = tf.reduce_mean(x, axes, keepdims=True)
        var = tf.reduce_mean(tf.math.squared_difference(x, mean), axes, keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + eps) * scale + bias

    return _apply_cl(c, norm)


@op("LayerNormalization")
def _layer_norm(c: NodeCtx) -> Any:
    x, rank = c.t(0), c.rank(0)
    axes = list(range(c.axis(int(c.attr("axis", -1)), rank), rank))
    eps = float(c.attr("epsilon", 1e-5))
    work = x if x.dtype == tf.float32 or int(c.attr("stash_type", 1)) != 1 else tf.cast(x, tf.float32)
    mean = tf.reduce_mean(work, axes, keepdims=True)
    centered = work - mean
    inv = tf.math.rsqrt(tf.reduce_mean(centered * centered, axes, keepdims=True) + eps)
    y = tf.cast(centered * inv, x.dtype) * c.t(1)
    if c.has(2):
        y = y + c.t(2)
    extra = [o for o in c.node.outputs[1:] if o]
    return (y, mean, inv) if extra else y


def _block_channels(c: NodeCtx, channels: int, block: int) -> np.ndarray | None:
    """For ``mode="CRD"`` (what ``nn.PixelShuffle`` exports), the channel order that turns it into TF's
    ``depth_to_space`` order (DCR: the block offset major, the output channel minor); None for DCR."""
    if str(c.attr("mode", "DCR")) != "CRD":
        return None
    out = channels // (block * block)
    return np.array([ch * block * block + k for k in range(block * block) for ch in range(out)], dtype=np.int32)


@op("DepthToSpace")
def _depth_to_space(c: NodeCtx) -> Any:
    """``nn.PixelShuffle`` (super-resolution heads) as TF's ``depth_to_space`` on channels-last (TFLite's
    DEPTH_TO_SPACE); a CRD graph first reorders its channels, once, with a constant gather."""
    block = int(c.attr("blocksize"))
    if c.rank(0) != 4:
        c.fail(f"handles 4-D inputs, not rank {c.rank(0)}")
    channels = c.shape(0)[1]
    if channels is None:
        c.fail("needs a static channel count")
    x = c.cl(0)
    order = _block_channels(c, int(channels), block)
    if order is not None:
        x = tf.gather(x, order, axis=3)
    return ChannelsLast(tf.nn.depth_to_space(x, block))


@op("SpaceToDepth")
def _space_to_depth(c: NodeCtx) -> Any:
    """``nn.PixelUnshuffle``: ONNX's one order is TF's ``space_to_depth`` on channels-last."""
    if c.rank(0) != 4:
        c.fail(f"handles 4-D inputs, not rank {c.rank(0)}")
    return ChannelsLast(tf.nn.space_to_depth(c.cl(0), int(c.attr("blocksize"))))
