"""The ops a ``Graph`` holds: their parameters, shape rule, numpy arithmetic and vector work.

Convolution (``Conv``) is the only op a dataflow runs; the others run on the
NPU's vector unit. Each op has

- ``out_shape(in_shapes, name)``: the shape rule, raising ``LayerError`` naming the node;
- ``__call__(*arrays)``: float32 numpy arithmetic (NCHW);
- ``vector_ops(in_shapes, out_shape)``: element operations the vector unit performs,
  which ``simulate`` turns into cycles (one op per lane per cycle); docs/ops.md states
  each op's rule;
- for a few elementwise ops, ``in_place(x)``: ``__call__``'s values written over ``x``
  (float32), which ``simulate`` uses on a conv's output that nothing else reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .derived import frozen
from .errors import LayerError
from .geometry import Padding, Pair, padding4, pair, used_pixels
from .jit import njit

Shape = tuple[int, ...]


def _numel(shape: Shape) -> int:
    return int(math.prod(shape))


class Op:
    """Base op: elementwise on one input unless a subclass says otherwise."""

    ops_per_element = 1

    def out_shape(self, in_shapes: list[Shape], name: str) -> Shape:
        _expect_inputs(in_shapes, 1, name, type(self).__name__)
        return in_shapes[0]

    def vector_ops(self, in_shapes: list[Shape], out_shape: Shape) -> int:
        """Element operations on the vector unit (ops)."""
        return _numel(out_shape) * self.ops_per_element


def _expect_inputs(in_shapes, count: int, name: str, kind: str) -> None:
    if len(in_shapes) != count:
        raise LayerError(f"{name}: {kind} takes {count} input(s), got {len(in_shapes)}")


def _expect_4d(shape: Shape, name: str, kind: str) -> None:
    if len(shape) != 4:
        raise LayerError(f"{name}: {kind} needs an N x C x H x W input, got shape {shape}")


@dataclass(frozen=True, eq=False)
class Conv(Op):
    """Convolution weights (K, C/groups, R, S), optional bias (K,), and its geometry.

    On a 2-D (N, F) input it is a fully connected layer: a 1x1 conv on a 1x1 map.
    """

    weight: np.ndarray
    bias: np.ndarray | None = None
    stride: Pair = (1, 1)
    padding: Padding = (0, 0, 0, 0)  # (top, bottom, left, right) pixels
    dilation: Pair = (1, 1)
    groups: int = 1

    def __post_init__(self):  # an int or (h, w) given: normalised once, here
        # read-only (``derived.frozen``), so what machines derive from the weights and the
        # bias (their masks, layouts, finite checks) is kept
        object.__setattr__(self, "weight", frozen(self.weight))
        if self.bias is not None:
            object.__setattr__(self, "bias", frozen(self.bias))
        object.__setattr__(self, "stride", pair(self.stride, "stride", "conv"))
        object.__setattr__(self, "padding", padding4(self.padding, "conv"))
        object.__setattr__(self, "dilation", pair(self.dilation, "dilation", "conv"))
        object.__setattr__(self, "groups", int(self.groups))

    def __setstate__(self, state: dict):
        # unpickled (a Dask worker, a spawned process): numpy unpickles arrays writeable, so
        # the weights are made read-only again, or every call would derive their data anew
        bias = state.get("bias")
        self.__dict__.update(state, weight=frozen(state["weight"]),
                             bias=None if bias is None else frozen(bias))

    def layer(self, in_shapes: list[Shape], name: str):
        from .ir import ConvLayer

        _expect_inputs(in_shapes, 1, name, "Conv")
        shape = in_shapes[0]
        if len(shape) == 2:
            shape = shape + (1, 1)
        if len(shape) != 4 or self.weight.ndim != 4:
            raise LayerError(f"{name}: conv needs a 4-D input and weight, got input {in_shapes[0]} "
                             f"and weight {self.weight.shape}")
        n, c, h, w = shape
        k, cg, r, s = self.weight.shape
        if self.groups < 1:
            raise LayerError(f"{name}: groups={self.groups}: must be an integer >= 1 dividing "
                             f"the input's C={c} channels")
        if cg * self.groups != c:
            raise LayerError(f"{name}: weight has {cg} input channels per group x groups="
                             f"{self.groups}, but the input has C={c}")
        if self.bias is not None and self.bias.shape != (k,):
            raise LayerError(f"{name}: bias shape {self.bias.shape} must be ({k},)")
        return ConvLayer(n, c, h, w, k, r, s, self.stride, self.padding, self.dilation,
                         self.groups, self.bias is not None, name)

    def out_shape(self, in_shapes, name):
        layer = self.layer(in_shapes, name)
        return (layer.N, layer.K) if len(in_shapes[0]) == 2 else layer.output_shape


@dataclass(frozen=True)
class Relu(Op):
    def __call__(self, x):
        return np.maximum(x, 0, dtype=x.dtype)

    def in_place(self, x):
        return np.maximum(x, 0, out=x)


@dataclass(frozen=True)
class Relu6(Op):
    ops_per_element = 2

    def __call__(self, x):
        return np.clip(x, 0, 6).astype(x.dtype, copy=False)

    def in_place(self, x):
        return np.clip(x, 0, 6, out=x)


@dataclass(frozen=True)
class LeakyRelu(Op):
    alpha: float = 0.01
    ops_per_element = 2

    def __call__(self, x):
        return np.where(x >= 0, x, x * np.float32(self.alpha)).astype(x.dtype, copy=False)


@dataclass(frozen=True, eq=False)
class PRelu(Op):
    """Parametric ReLU with one slope per channel (or one shared slope)."""

    slope: np.ndarray
    ops_per_element = 2

    def _slope(self, ndim):
        s = np.asarray(self.slope, np.float32).reshape(-1)
        return s.reshape((1, -1) + (1,) * (ndim - 2)) if s.size > 1 else s.reshape(())

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "PRelu")
        s = np.asarray(self.slope).size
        if s != 1 and (len(in_shapes[0]) < 2 or in_shapes[0][1] != s):
            raise LayerError(f"{name}: PRelu has {s} slopes but the input has shape {in_shapes[0]}")
        return in_shapes[0]

    def __call__(self, x):
        return np.where(x >= 0, x, x * self._slope(x.ndim)).astype(x.dtype, copy=False)


@dataclass(frozen=True, eq=False)
class BatchNorm(Op):
    """Per-channel affine ``y = x * scale + shift``; ``fold_batchnorm`` merges it into a conv."""

    scale: np.ndarray
    shift: np.ndarray
    ops_per_element = 2

    @classmethod
    def from_stats(cls, gamma, beta, mean, var, eps=1e-5):
        scale = np.asarray(gamma, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
        shift = np.asarray(beta, np.float64) - np.asarray(mean, np.float64) * scale
        return cls(scale.astype(np.float32), shift.astype(np.float32))

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "BatchNorm")
        if in_shapes[0][1] != self.scale.size:
            raise LayerError(f"{name}: BatchNorm has {self.scale.size} channels, "
                             f"input {in_shapes[0]}")
        return in_shapes[0]

    def __call__(self, x):
        """``x * scale + shift`` as float32; the shift added in place into the product (a
        new array: ``x`` is never written), rounded as the expression would be."""
        shape = (1, -1) + (1,) * (x.ndim - 2)
        out = x * self.scale.reshape(shape)
        out += self.shift.reshape(shape)
        return out.astype(np.float32, copy=False)


@dataclass(frozen=True)
class Pool(Op):
    """Max or average pooling; ``padding`` is (top, bottom, left, right).

    Max pooling pads with -inf, and may be dilated (``dilation``: the window's taps that many
    pixels apart, as ``nn.MaxPool2d`` and ONNX ``MaxPool`` take it). Average pooling divides
    by the window area when ``count_include_pad``, else by the number of real pixels in the
    window.
    """

    kernel: Pair
    stride: Pair | None = None  # None: the kernel
    padding: Padding = (0, 0, 0, 0)
    ceil_mode: bool = False
    kind: str = "max"
    count_include_pad: bool = True
    dilation: Pair = (1, 1)

    def __post_init__(self):  # an int or (h, w) given: normalised once, here
        object.__setattr__(self, "kernel", pair(self.kernel, "kernel", "pool"))
        object.__setattr__(self, "stride", self.kernel if self.stride is None
                           else pair(self.stride, "stride", "pool"))
        object.__setattr__(self, "padding", padding4(self.padding, "pool"))
        object.__setattr__(self, "dilation", pair(self.dilation, "dilation", "pool"))
        if self.kind != "max" and self.dilation != (1, 1):
            raise LayerError(f"average pooling of dilation {self.dilation}: the IR dilates "
                             "max pooling only")

    def geometry(self) -> tuple[Pair, Pair, Padding]:
        """(kernel, stride, padding) in pixels."""
        return self.kernel, self.stride, self.padding

    def span(self) -> Pair:
        """Pixels (h, w) one window spans: (kernel - 1) * dilation + 1."""
        return tuple(used_pixels(1, k, 1, d) for k, d in zip(self.kernel, self.dilation,
                                                             strict=True))

    def _out(self, size, k, s, lo, hi):
        """Windows along an axis of ``size`` (padded by ``lo``, ``hi``) of ``k`` pixels'
        span at stride ``s``."""
        room = size + lo + hi - k
        out = room // s + 1
        if self.ceil_mode and room % s and room // s * s + s < size + lo:
            out += 1  # an extra window that starts inside the input or its left padding
        return out

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "Pool")
        _expect_4d(in_shapes[0], name, "Pool")
        (kh, kw), (sh, sw), (t, b, l, r) = self.span(), self.stride, self.padding
        if max(t, b) >= kh or max(l, r) >= kw:
            raise LayerError(f"{name}: pool padding {(t, b, l, r)} must be smaller than the "
                             f"window {kh}x{kw} (a window may not lie wholly in the padding)")
        n, c, h, w = in_shapes[0]
        p, q = self._out(h, kh, sh, t, b), self._out(w, kw, sw, l, r)
        if p < 1 or q < 1:
            raise LayerError(f"{name}: pool window {kh}x{kw} does not fit input {h}x{w}")
        return (n, c, p, q)

    def vector_ops(self, in_shapes, out_shape):
        (kh, kw), _, _ = self.geometry()
        return _numel(out_shape) * kh * kw

    def __call__(self, x):
        (kh, kw), (sh, sw), (t, b, l, r) = self.span(), self.stride, self.padding
        n, c, h, w = x.shape
        p, q = self._out(h, kh, sh, t, b), self._out(w, kw, sw, l, r)
        # extra bottom/right padding so that ceil-mode windows exist
        eb = max(0, used_pixels(p, kh, sh) - (h + t + b))
        er = max(0, used_pixels(q, kw, sw) - (w + l + r))
        pad = ((0, 0), (0, 0), (t, b + eb), (l, r + er))
        fill = -np.inf if self.kind == "max" else 0.0
        xp = np.pad(x, pad, constant_values=fill)
        taps = self.kernel, self.dilation
        if self.kind == "max":
            return _window_reduce(xp, *taps, (sh, sw), (p, q), np.maximum, x.dtype)
        total = _window_reduce(xp, *taps, (sh, sw), (p, q), np.add, np.float64)
        ones = np.pad(np.ones((1, 1, h, w)), pad)
        if self.count_include_pad:  # the window clipped to the padded (not ceil-extended) input
            ones = np.pad(np.ones((1, 1, h + t + b, w + l + r)), ((0, 0), (0, 0), (0, eb), (0, er)))
        count = _window_reduce(ones, *taps, (sh, sw), (p, q), np.add, np.float64)
        return (total / count).astype(x.dtype)


def _window_reduce(xp: np.ndarray, kernel, dilation, stride, out_hw, op: np.ufunc,
                   dtype) -> np.ndarray:
    """``op`` over every kh x kw window (taps ``dilation`` apart, stride sh, sw) of ``xp``
    (N x C x H x W), P x Q windows, in ``dtype``: one whole-map ``op`` per window tap, in
    row-major tap order (a reduction over two short window axes is many times slower)."""
    (kh, kw), (dh, dw), (sh, sw), (p, q) = kernel, dilation, stride, out_hw
    out = None
    for i in range(0, kh * dh, dh):
        for j in range(0, kw * dw, dw):
            tap = xp[:, :, i:i + (p - 1) * sh + 1:sh, j:j + (q - 1) * sw + 1:sw]
            out = tap.astype(dtype) if out is None else op(out, tap, out=out)
    return out


def MaxPool(kernel, stride=None, padding=0, ceil_mode=False, dilation=1) -> Pool:
    return Pool(kernel, stride, padding, ceil_mode, "max", dilation=dilation)


def AvgPool(kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True) -> Pool:
    return Pool(kernel, stride, padding, ceil_mode, "avg", count_include_pad)


@dataclass(frozen=True)
class GlobalAvgPool(Op):
    """Mean over H and W, output N x C x 1 x 1."""

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "GlobalAvgPool")
        _expect_4d(in_shapes[0], name, "GlobalAvgPool")
        return in_shapes[0][:2] + (1, 1)

    def vector_ops(self, in_shapes, out_shape):
        return _numel(in_shapes[0])

    def __call__(self, x):
        return x.mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(x.dtype)


@dataclass(frozen=True)
class AdaptivePool(Op):
    """Mean or max (``kind``) over windows that cut H x W into ``size`` (P x Q) as
    PyTorch's adaptive pooling does: output row i pools input rows floor(i H / P) to
    ceil((i + 1) H / P) - 1 (so windows differ by a pixel and may overlap; P > H repeats
    rows), columns alike. The importers give ``GlobalAvgPool`` or a ``Pool`` where the
    windows are equal."""

    size: tuple[int, int]
    kind: str = "avg"

    def __post_init__(self):
        object.__setattr__(self, "size", pair(self.size, "size", "adaptive pool"))

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "AdaptivePool")
        _expect_4d(in_shapes[0], name, "AdaptivePool")
        if self.kind not in ("avg", "max"):
            raise LayerError(f"{name}: AdaptivePool kind {self.kind!r}: must be 'avg' or 'max'")
        return in_shapes[0][:2] + self.size

    def vector_ops(self, in_shapes, out_shape):
        """One per pixel of each output's window."""
        n, c, h, w = in_shapes[0]
        rows, cols = _adaptive_lengths(h, w, self.size)
        return n * c * int(rows.sum()) * int(cols.sum())

    def __call__(self, x):
        """avg: window sums from a summed-area table in float64, divided by the windows'
        areas; max: each window's rows, then its columns (a rectangle's max is the max of
        its rows' maxima)."""
        n, c, h, w = x.shape
        (r0, r1), (c0, c1) = adaptive_edges(h, self.size[0]), adaptive_edges(w, self.size[1])
        if self.kind == "max":
            rows = np.stack([x[:, :, a:b].max(axis=2) for a, b in zip(r0, r1, strict=True)], 2)
            return np.stack([rows[:, :, :, a:b].max(axis=3)
                             for a, b in zip(c0, c1, strict=True)], 3)
        table = np.zeros((n, c, h + 1, w + 1))
        table[:, :, 1:, 1:] = x.astype(np.float64).cumsum(axis=2).cumsum(axis=3)
        sums = (table[:, :, r1][:, :, :, c1] - table[:, :, r0][:, :, :, c1]
                - table[:, :, r1][:, :, :, c0] + table[:, :, r0][:, :, :, c0])
        return (sums / np.outer(r1 - r0, c1 - c0)).astype(x.dtype)


def AdaptiveAvgPool(size) -> AdaptivePool:
    return AdaptivePool(size, "avg")


def AdaptiveMaxPool(size) -> AdaptivePool:
    return AdaptivePool(size, "max")


def adaptive_edges(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """Each adaptive window's first pixel and one past its last, along one axis."""
    i = np.arange(out)
    return i * size // out, -(-(i + 1) * size // out)


def _adaptive_lengths(h: int, w: int, size) -> tuple[np.ndarray, np.ndarray]:
    """The adaptive windows' lengths along H and along W."""
    (r0, r1), (c0, c1) = adaptive_edges(h, size[0]), adaptive_edges(w, size[1])
    return r1 - r0, c1 - c0


@dataclass(frozen=True)
class Add(Op):
    """Elementwise sum of two or more inputs of one shape."""

    def out_shape(self, in_shapes, name):
        if len(in_shapes) < 2 or any(s != in_shapes[0] for s in in_shapes):
            raise LayerError(f"{name}: Add needs two or more inputs of one shape, got {in_shapes}")
        return in_shapes[0]

    def vector_ops(self, in_shapes, out_shape):
        return _numel(out_shape) * (len(in_shapes) - 1)

    def __call__(self, *xs):
        out = xs[0].copy()
        for x in xs[1:]:
            out += x
        return out


@dataclass(frozen=True, eq=False)
class Concat(Op):
    """Concatenation along ``axis`` (channels by default); a data move, one op per element.

    ``constants``: (position, array) pairs, each a constant joined at that place among the
    parts (ViT's class token before the patches' tokens), batch first: of a batch of one,
    the same for every sample, or of the inputs' batch."""

    axis: int = 1
    constants: tuple = ()

    def out_shape(self, in_shapes, name):
        if not in_shapes:
            raise LayerError(f"{name}: Concat needs inputs")
        a = self.axis % len(in_shapes[0])
        if a == 0 and self.constants:
            raise LayerError(f"{name}: Concat of a constant along the batch axis")
        n = in_shapes[0][0]  # a constant of a batch of one is every sample's
        shapes = self._parts(list(in_shapes), [
            (n, *np.shape(c)[1:]) if np.ndim(c) and np.shape(c)[0] == 1 else np.shape(c)
            for _, c in self.constants])
        rest = [s[:a] + s[a + 1:] for s in shapes]
        if any(len(s) != len(shapes[0]) for s in shapes) or any(r != rest[0] for r in rest):
            raise LayerError(f"{name}: Concat along axis {self.axis} of mismatched shapes "
                             f"{shapes}")
        return in_shapes[0][:a] + (sum(s[a] for s in shapes),) + in_shapes[0][a + 1:]

    def _parts(self, inputs: list, constants: list) -> list:
        """The inputs with the constants in their places."""
        for (at, _), c in zip(self.constants, constants, strict=True):
            inputs.insert(at, c)
        return inputs

    def __call__(self, *xs):
        n = xs[0].shape[0]
        constants = [np.broadcast_to(np.asarray(c, np.float32), (n, *np.shape(c)[1:]))
                     for _, c in self.constants]
        return np.concatenate(self._parts(list(xs), constants), axis=self.axis)


@dataclass(frozen=True)
class Flatten(Op):
    """N x ... to N x (product of the rest). A free reinterpretation: no vector work."""

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "Flatten")
        return (in_shapes[0][0], _numel(in_shapes[0][1:]))

    def vector_ops(self, in_shapes, out_shape):
        return 0

    def __call__(self, x):
        return x.reshape(x.shape[0], -1)


@dataclass(frozen=True)
class Reshape(Op):
    """Reshape keeping the batch axis; ``shape`` excludes it (-1 allowed once)."""

    shape: tuple = ()

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "Reshape")
        n, total = in_shapes[0][0], _numel(in_shapes[0][1:])
        dims = list(self.shape)
        if dims.count(-1) > 1:
            raise LayerError(f"{name}: Reshape to {self.shape}: at most one -1")
        known = _numel(tuple(d for d in dims if d != -1))
        if -1 in dims:
            if known == 0 or total % known:
                raise LayerError(f"{name}: cannot reshape {in_shapes[0]} to (N, *{self.shape})")
            dims[dims.index(-1)] = total // known
        if _numel(tuple(dims)) != total:
            raise LayerError(f"{name}: cannot reshape {in_shapes[0]} to (N, *{self.shape})")
        return (n, *dims)

    def vector_ops(self, in_shapes, out_shape):
        return 0

    def __call__(self, x):
        return x.reshape((x.shape[0], *self.shape))


@dataclass(frozen=True)
class Softmax(Op):
    """Softmax over ``axis``, or with ``log`` its logarithm (a classifier's log-probabilities,
    ``x - max - log(sum(exp(x - max)))``, finite where the log of a softmax would
    underflow). 4 per element: max, subtract, exp, and a divide (softmax) or subtract (log)."""

    axis: int = 1
    log: bool = False
    ops_per_element = 4

    def __call__(self, x):
        shifted = x - x.max(axis=self.axis, keepdims=True)
        e = np.exp(shifted)
        if self.log:
            return (shifted - np.log(e.sum(axis=self.axis, keepdims=True))).astype(x.dtype)
        return (e / e.sum(axis=self.axis, keepdims=True)).astype(x.dtype)


def _bilinear_axis(in_size: int, out_size: int, align_corners: bool, step: float):
    """Source indices (lo, hi) and weight of hi for 1-D linear resampling.

    ``step`` is input pixels per output pixel (1/scale, or in/out for a given size);
    half-pixel centres unless ``align_corners`` (then corners map to corners).
    """
    dst = np.arange(out_size, dtype=np.float64)
    if align_corners:
        src = dst * ((in_size - 1) / (out_size - 1)) if out_size > 1 else np.zeros(out_size)
    else:
        src = np.maximum((dst + 0.5) * step - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    hi = np.minimum(lo + 1, in_size - 1)
    return lo, hi, (src - lo).astype(np.float32)


CUBIC_A = -0.75  # the cubic convolution's coefficient: PyTorch's, and ONNX Resize's default


def _cubic_axis(in_size: int, out_size: int, align_corners: bool, step: float):
    """Source indices and weights (each 4 x out_size) of 1-D bicubic resampling, PyTorch's:
    Keys' cubic convolution of ``CUBIC_A`` over the 4 pixels around each source position,
    half-pixel centres (not clamped at 0) unless ``align_corners``, indices beyond the axis
    read its edge pixel."""
    dst = np.arange(out_size, dtype=np.float64)
    if align_corners:
        src = dst * ((in_size - 1) / (out_size - 1)) if out_size > 1 else np.zeros(out_size)
    else:
        src = (dst + 0.5) * step - 0.5
    left = np.floor(src)
    taps = left.astype(np.int64) + np.arange(-1, 3)[:, None]
    return np.clip(taps, 0, in_size - 1), cubic_kernel(src - taps)


def cubic_kernel(d, a: float = CUBIC_A) -> np.ndarray:
    """Keys' cubic convolution weight of a tap at distance ``d`` (|d| < 2) from the source
    position, coefficient ``a``."""
    d = np.abs(d)
    return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                    ((a * d - 5 * a) * d + 8 * a) * d - 4 * a)


@dataclass(frozen=True)
class Upsample(Op):
    """Resize H, W by an integer-or-float ``scale`` (or to ``size``): ``nearest``,
    ``bilinear`` or ``bicubic`` (PyTorch's sampling of each)."""

    scale: object = 2
    mode: str = "nearest"
    align_corners: bool = False
    size: tuple | None = None

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "Upsample")
        _expect_4d(in_shapes[0], name, "Upsample")
        if self.mode not in UPSAMPLE_OPS:
            raise LayerError(f"{name}: Upsample mode {self.mode!r}: one of "
                             f"{', '.join(UPSAMPLE_OPS)}")
        n, c, h, w = in_shapes[0]
        if self.size is not None:
            return (n, c, int(self.size[0]), int(self.size[1]))
        sh, sw = (self.scale, self.scale) if np.isscalar(self.scale) else self.scale
        return (n, c, int(math.floor(h * sh)), int(math.floor(w * sw)))

    @property
    def ops_per_element(self):
        return UPSAMPLE_OPS[self.mode]

    def _steps(self, h, w, p, q):
        """Input pixels per output pixel on each axis: 1/scale, or in/out when sized."""
        if self.size is not None:
            return h / p, w / q
        sh, sw = (self.scale, self.scale) if np.isscalar(self.scale) else self.scale
        return 1.0 / sh, 1.0 / sw

    def __call__(self, x):
        n, c, h, w = x.shape
        _, _, p, q = self.out_shape([x.shape], "upsample")
        step_h, step_w = self._steps(h, w, p, q)
        if self.mode == "nearest":
            rows = np.minimum(np.floor(np.arange(p) * step_h).astype(np.int64), h - 1)
            cols = np.minimum(np.floor(np.arange(q) * step_w).astype(np.int64), w - 1)
            return x[:, :, rows][:, :, :, cols]
        if self.mode == "bicubic":
            rows, wr = _cubic_axis(h, p, self.align_corners, step_h)
            cols, wc = _cubic_axis(w, q, self.align_corners, step_w)
            tall = sum(x[:, :, r] * k[:, None] for r, k in zip(rows, wr, strict=True))
            return sum(tall[..., c] * k for c, k in zip(cols, wc, strict=True)).astype(x.dtype)
        r0, r1, fr = _bilinear_axis(h, p, self.align_corners, step_h)
        c0, c1, fc = _bilinear_axis(w, q, self.align_corners, step_w)
        top = x[:, :, r0] * (1 - fr)[:, None] + x[:, :, r1] * fr[:, None]
        return (top[..., c0] * (1 - fc) + top[..., c1] * fc).astype(x.dtype)


# vector ops per output pixel: a copy; 4 taps (4 multiplies, 3 adds); 16 taps (16, 15)
UPSAMPLE_OPS = {"nearest": 1, "bilinear": 7, "bicubic": 31}


@dataclass(frozen=True, eq=False)
class GridSample(Op):
    """The input map sampled at a grid of points (``F.grid_sample``, ONNX ``GridSample``: a
    spatial transformer's warp, an optical-flow network's warping of features by the
    flow). The grid, N x Ho x Wo x 2, holds each output pixel's point as (x, y) in [-1, 1]
    across the input's width and height: -1 and 1 the corner pixels' centres with
    ``align_corners``, their outer edges without. ``bilinear`` weighs the four pixels
    around the point, ``nearest`` takes the closest (ties to even); a point outside reads
    ``zeros``, or is moved to the ``border`` or reflected into the map (``reflection``)
    first. Inputs: the N x C x H x W map, then the grid (computed, or the constant ``grid``,
    of one image or N). In float32 as PyTorch's CPU kernel rounds it, its multiply-adds
    fused. Cost: per output pixel its point's coordinates (``GRID_PIXEL_OPS``, and the
    padding's ``GRID_PADDING_OPS``), per output element its taps (``GRID_ELEMENT_OPS``)."""

    mode: str = "bilinear"
    padding: str = "zeros"
    align_corners: bool = False
    grid: np.ndarray | None = None

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1 if self.grid is not None else 2, name, "GridSample")
        _expect_4d(in_shapes[0], name, "GridSample")
        if self.mode not in GRID_ELEMENT_OPS or self.padding not in GRID_PADDING_OPS:
            raise LayerError(f"{name}: GridSample mode {self.mode!r}, padding {self.padding!r}:"
                             f" modes {', '.join(GRID_ELEMENT_OPS)}; paddings "
                             f"{', '.join(GRID_PADDING_OPS)}")
        n, c = in_shapes[0][:2]
        grid = tuple(np.shape(self.grid)) if self.grid is not None else tuple(in_shapes[1])
        batches = (n,) if self.grid is None else (n, 1)  # a constant's may be one image's
        if len(grid) != 4 or grid[3] != 2 or grid[0] not in batches:
            raise LayerError(f"{name}: GridSample grid of shape {grid} for an input of shape "
                             f"{tuple(in_shapes[0])}: must be N x Ho x Wo x 2")
        return (n, c, grid[1], grid[2])

    def vector_ops(self, in_shapes, out_shape):
        pixels = _numel(out_shape) // out_shape[1]
        return (pixels * (GRID_PIXEL_OPS[self.mode] + GRID_PADDING_OPS[self.padding])
                + _numel(out_shape) * GRID_ELEMENT_OPS[self.mode])

    def __call__(self, x, grid=None):
        points = np.asarray(self.grid if grid is None else grid, np.float32)
        points = np.broadcast_to(points, (x.shape[0], *points.shape[1:]))  # a constant's
        h, w = x.shape[2:]
        ix = _grid_axis(points[..., 0], w, self.padding, self.align_corners)
        iy = _grid_axis(points[..., 1], h, self.padding, self.align_corners)
        if self.mode == "nearest":
            return _taps(x, np.rint(iy).astype(np.int64), np.rint(ix).astype(np.int64))
        left, top = np.floor(ix), np.floor(iy)
        east, south = ix - left, iy - top  # the point's offsets from its top-left pixel
        west, north = np.float32(1) - east, np.float32(1) - south
        col, row = left.astype(np.int64), top.astype(np.int64)
        corners = [(row, col, north * west), (row, col + 1, north * east),
                   (row + 1, col, south * west), (row + 1, col + 1, south * east)]
        total = None  # PyTorch's order: each tap's product added to the sum so far, fused
        for r, c, weight in corners:
            term = _taps(x, r, c).astype(np.float64) * weight[:, None]
            total = term if total is None else total.astype(np.float64) + term
            total = total.astype(np.float32)
        return total


# vector ops of GridSample per output element (a copy; 4 multiplies, 3 adds), per output
# pixel (its point: unnormalised, rounded or floored, the 4 weights), and per output pixel
# for the padding (a clamp of each axis; a reflection: |x - low|, fmod, floor, select, clamp)
GRID_ELEMENT_OPS = {"bilinear": 7, "nearest": 1}
GRID_PIXEL_OPS = {"bilinear": 14, "nearest": 6}
GRID_PADDING_OPS = {"zeros": 0, "border": 4, "reflection": 16}


def _grid_axis(g: np.ndarray, size: int, padding: str, align_corners: bool) -> np.ndarray:
    """Grid coordinates along one axis (in [-1, 1] across ``size`` pixels) as pixel
    positions, float32: (g + 1) (size - 1) / 2 with ``align_corners``, else
    (g + 1) size / 2 - 0.5 (one fused multiply-add), then moved in by ``padding``."""
    one = g + np.float32(1)
    if align_corners:
        at = one * np.float32((size - 1) / 2)
    else:
        at = (one.astype(np.float64) * np.float32(size / 2) - 0.5).astype(np.float32)
    if padding == "reflection":
        low, high = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        at = _reflect(at, low, high)
    if padding != "zeros":
        at = np.clip(at, np.float32(0), np.float32(size - 1))
    return at


def _reflect(at: np.ndarray, twice_low: int, twice_high: int) -> np.ndarray:
    """``at`` reflected into [twice_low / 2, twice_high / 2] off its ends, as often as it
    takes (PyTorch's ``reflect_coordinates``)."""
    if twice_low == twice_high:
        return np.zeros_like(at)
    low, span = np.float32(twice_low / 2), np.float32((twice_high - twice_low) / 2)
    away = np.abs(at - low)
    extra = np.fmod(away, span)
    flips = np.floor(away / span)
    return np.where(flips % 2 == 0, extra + low, span - extra + low).astype(np.float32)


def _taps(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """x[n, :, rows, cols] of each image n (``rows``, ``cols``: N x Ho x Wo), 0 outside the
    map: N x C x Ho x Wo."""
    n, _, h, w = x.shape
    inside = (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)
    picked = x[np.arange(n)[:, None, None], :, np.clip(rows, 0, h - 1), np.clip(cols, 0, w - 1)]
    return np.moveaxis(np.where(inside[..., None], picked, np.float32(0)), -1, 1)


@dataclass(frozen=True)
class Identity(Op):
    def vector_ops(self, in_shapes, out_shape):
        return 0

    def __call__(self, x):
        return x


# ---- activations: one input, elementwise, float32 ------------------------------------------
# Cost rule: ``ops_per_element`` vector operations per output element, counting each add,
# multiply, divide, compare/select, and each transcendental (exp, tanh, erf) as one.


@dataclass(frozen=True)
class Sigmoid(Op):
    """``1 / (1 + exp(-x))``: exp, add, divide."""

    ops_per_element = 3

    def __call__(self, x):
        return _sigmoid(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Overflow-free logistic in x's float dtype: ``exp(-|x|)`` never overflows."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


@dataclass(frozen=True)
class HardSigmoid(Op):
    """``clip(alpha * x + beta, 0, 1)``; PyTorch's is alpha = 1/6, beta = 1/2 (ONNX's default
    alpha is 0.2). Multiply, add, two compares."""

    alpha: float = 1 / 6
    beta: float = 0.5
    ops_per_element = 4

    def __call__(self, x):
        y = x * np.float32(self.alpha) + np.float32(self.beta)
        return np.clip(y, 0, 1).astype(x.dtype, copy=False)


@dataclass(frozen=True)
class HardSwish(Op):
    """``x * relu6(x + 3) / 6``: hard sigmoid (4) and a multiply. A contiguous float array
    takes one compiled pass (``_hard_swish``) where numpy takes four, each value rounded
    as numpy's passes round it."""

    ops_per_element = 5

    def __call__(self, x):
        if _one_pass(x):
            return self.in_place(x.copy())
        return (x * np.clip(x + np.float32(3), 0, 6) / np.float32(6)).astype(x.dtype, copy=False)

    def in_place(self, x):
        if _one_pass(x):
            _hard_swish(x.ravel())
            return x
        gate = np.add(x, np.float32(3))
        np.clip(gate, 0, 6, out=gate)
        x *= gate
        x /= np.float32(6)
        return x


def _one_pass(x: np.ndarray) -> bool:
    """Whether ``x`` is an array ``_hard_swish`` takes: float32 or float64, C-contiguous (its
    ``ravel`` a view, written in place)."""
    return (type(x) is np.ndarray and x.dtype in (np.float32, np.float64)
            and x.flags.c_contiguous)


@njit(cache=True, nogil=True)
def _hard_swish(x):  # pragma: no cover
    """``x[i] = x[i] * min(max(x[i] + 3, 0), 6) / 6`` over a flat array, in its float type:
    the add, the clip, the multiply and the divide each rounded once, as numpy's passes
    round them (float32 constants: a float32 array stays float32). In place, one array:
    with a second one that might be it, the compiler keeps the loop scalar (4-5x slower)."""
    three, zero, six = np.float32(3), np.float32(0), np.float32(6)
    for i in range(x.size):
        v = x[i]
        x[i] = v * min(max(v + three, zero), six) / six


@dataclass(frozen=True)
class Silu(Op):
    """SiLU / swish ``x * sigmoid(x)``: sigmoid (3) and a multiply."""

    ops_per_element = 4

    def __call__(self, x):
        return (x * _sigmoid(x)).astype(x.dtype, copy=False)


@dataclass(frozen=True)
class Softplus(Op):
    """``log(1 + exp(beta x)) / beta``, and x itself where beta x > ``threshold`` (PyTorch's
    rule; ONNX's Softplus is beta 1, where past 20 the two differ by under float32's
    rounding): exp, add, log, the threshold's select, and with beta != 1 a multiply and a
    divide."""

    beta: float = 1.0
    threshold: float = 20.0

    @property
    def ops_per_element(self):
        return 4 if self.beta == 1 else 6

    def __call__(self, x):
        return _softplus(x, self.beta, self.threshold)


def _softplus(x: np.ndarray, beta: float, threshold: float) -> np.ndarray:
    """Softplus in float64, exp taken only below the threshold (no overflow)."""
    y = np.asarray(x, np.float64) * beta
    soft = np.log1p(np.exp(np.minimum(y, threshold))) / beta
    return np.where(y > threshold, x, soft).astype(x.dtype, copy=False)


@dataclass(frozen=True)
class Mish(Op):
    """``x * tanh(softplus(x))`` (YOLOv4's activation): softplus (4), tanh, a multiply."""

    ops_per_element = 6

    def __call__(self, x):
        x64 = np.asarray(x, np.float64)
        return (x64 * np.tanh(_softplus(x64, 1.0, 20.0))).astype(x.dtype)


@dataclass(frozen=True)
class Elu(Op):
    """``x`` where x > 0, else ``alpha (exp(x * input_scale) - 1)``: a compare and select,
    exp, a subtract, a multiply (and a multiply more when ``input_scale`` is not 1). CELU
    of ``alpha`` is the ``input_scale`` 1 / alpha (PyTorch computes both as its ``elu``)."""

    alpha: float = 1.0
    input_scale: float = 1.0

    @property
    def ops_per_element(self) -> int:
        return 4 if self.input_scale == 1.0 else 5

    def __call__(self, x):
        scaled = np.minimum(np.asarray(x, np.float64), 0.0) * self.input_scale
        return np.where(x > 0, x, self.alpha * np.expm1(scaled)).astype(x.dtype, copy=False)


@dataclass(frozen=True)
class Tanh(Op):
    """``tanh(x)``: one transcendental."""

    def __call__(self, x):
        return np.tanh(x)


@dataclass(frozen=True)
class Sqrt(Op):
    """Square root (ONNX ``Sqrt``, in a decomposed layer norm): one op."""

    def __call__(self, x):
        return np.sqrt(x)


@dataclass(frozen=True)
class Exp(Op):
    """``exp(x)``: one transcendental (inf past float32's range, as in PyTorch)."""

    def __call__(self, x):
        with np.errstate(over="ignore"):
            return np.exp(x)


@dataclass(frozen=True)
class Log(Op):
    """Natural logarithm: one transcendental (-inf at 0, NaN below, as in PyTorch)."""

    def __call__(self, x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(x)


@dataclass(frozen=True)
class Abs(Op):
    """``|x|``: one op."""

    def __call__(self, x):
        return np.abs(x)


# the trigonometric and hyperbolic functions ``Trig`` computes, by name (PyTorch's and
# ONNX's: sin, asin, sinh...)
TRIG = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
        "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
        "acosh": np.arccosh, "atanh": np.arctanh}


@dataclass(frozen=True)
class Trig(Op):
    """A trigonometric or hyperbolic function of x (``fn``, a key of ``TRIG``): one
    transcendental, as ``Exp``. Outside its domain NaN, atanh(+-1) +-inf and past float32's
    range inf, as in PyTorch (a non-finite conv input is then refused by name)."""

    fn: str = "sin"

    def __post_init__(self):
        if self.fn not in TRIG:
            raise LayerError(f"Trig function {self.fn!r}: one of {', '.join(TRIG)}")

    def __call__(self, x):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return TRIG[self.fn](x)


@dataclass(frozen=True)
class Erf(Op):
    """The error function (ONNX ``Erf``): one transcendental."""

    def __call__(self, x):
        return _erf(x).astype(x.dtype, copy=False)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 (scipy's: numpy has none)."""
    from scipy.special import erf

    return erf(np.asarray(x, np.float64))


@dataclass(frozen=True)
class Gelu(Op):
    """GELU, exact ``x/2 * (1 + erf(x / sqrt 2))`` (5 ops) or ``approximate='tanh'``
    ``x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`` (9 ops)."""

    approximate: str = "none"

    @property
    def ops_per_element(self):
        return 9 if self.approximate == "tanh" else 5

    def out_shape(self, in_shapes, name):
        if self.approximate not in ("none", "tanh"):
            raise LayerError(f"{name}: Gelu approximate={self.approximate!r}: must be 'none' "
                             "or 'tanh'")
        return super().out_shape(in_shapes, name)

    def __call__(self, x):
        x64 = np.asarray(x, np.float64)
        if self.approximate == "tanh":
            inner = np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3))
        else:
            inner = _erf(x64 / math.sqrt(2))
        return (0.5 * x64 * (1 + inner)).astype(x.dtype)


@dataclass(frozen=True)
class Clip(Op):
    """``min(max(x, lo), hi)``, either bound None (unbounded): one compare per bound."""

    lo: float | None = None
    hi: float | None = None

    @property
    def ops_per_element(self):
        return (self.lo is not None) + (self.hi is not None)

    def __call__(self, x):
        return np.clip(x, self.lo, self.hi).astype(x.dtype, copy=False)


@dataclass(frozen=True, eq=False)
class FakeQuant(Op):
    """A tensor rounded to an integer grid and back: a quantised model's activation (ONNX
    ``QuantizeLinear`` then ``DequantizeLinear``). ``q = clip(round(x / scale) +
    zero_point, lo, hi)`` (round half to even), ``out = (q - zero_point) * scale``, in
    float32 as onnxruntime computes them; with ``by_reciprocal``, ``round(x * (1 /
    scale))``, the float32 reciprocal, as PyTorch's fake-quantize kernels compute it (a value
    near half a step can round the other way). ``scale`` (> 0) and ``zero_point`` (an
    integer in [lo, hi]) are one value, or one per index of ``axis``. Cost 4 per element:
    the divide, the round, the add and clip, the subtract and multiply back."""

    scale: np.ndarray
    zero_point: np.ndarray
    lo: int = -128
    hi: int = 127
    axis: int = 1
    by_reciprocal: bool = False
    ops_per_element = 4

    def __post_init__(self):
        scale = frozen(np.asarray(self.scale, np.float32).reshape(-1))
        zero = frozen(np.asarray(self.zero_point, np.float32).reshape(-1))
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "zero_point", zero)
        if not (np.isfinite(scale).all() and (scale > 0).all()):
            raise LayerError(f"FakeQuant: scale {scale.tolist()[:4]}: must be finite and > 0")
        if not self.lo <= self.hi:
            raise LayerError(f"FakeQuant: range [{self.lo}, {self.hi}] is empty")
        if (zero != np.rint(zero)).any() or zero.min() < self.lo or zero.max() > self.hi:
            raise LayerError(f"FakeQuant: zero point {zero.tolist()[:4]}: must be integers in "
                             f"[{self.lo}, {self.hi}]")
        if zero.size not in (1, scale.size):
            raise LayerError(f"FakeQuant: {zero.size} zero points for {scale.size} scales")

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "FakeQuant")
        shape, n = in_shapes[0], max(self.scale.size, self.zero_point.size)
        if n > 1 and not (-len(shape) <= self.axis < len(shape) and shape[self.axis] == n):
            raise LayerError(f"{name}: FakeQuant has {n} scales along axis {self.axis} but "
                             f"the input has shape {tuple(shape)}")
        return shape

    def along(self, values: np.ndarray, ndim: int) -> np.ndarray:
        """``values`` shaped to broadcast along ``axis`` of an ``ndim``-axis tensor."""
        if values.size == 1:
            return values.reshape(())
        shape = [1] * ndim
        shape[self.axis % ndim] = values.size
        return values.reshape(shape)

    def __call__(self, x):
        scale = self.along(self.scale, x.ndim)
        zero = self.along(self.zero_point, x.ndim)
        steps = x * (np.float32(1) / scale) if self.by_reciprocal else x / scale
        q = np.clip(np.rint(steps) + zero, self.lo, self.hi)
        return ((q - zero) * scale).astype(np.float32, copy=False)


# ---- elementwise arithmetic with broadcasting -------------------------------------------

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "max": np.maximum, "min": np.minimum, "pow": np.power,
           # PyTorch's float division modes: a // b, the remainder of b's sign and that of
           # a's. NumPy's float32 kernels and PyTorch's both derive them from fmod, and agree
           # bit for bit; floor(a / b) does not where a / b rounds up to a whole number
           # (1 // 0.1 is 9, floor(1 / 0.1) is 10)
           "floordiv": np.floor_divide, "remainder": np.remainder, "fmod": np.fmod}
# comparisons: a mask, 1.0 where it holds and 0.0 elsewhere (the IR carries float32 only)
_COMPARE = {"greater": np.greater, "less": np.less, "greater_equal": np.greater_equal,
            "less_equal": np.less_equal, "equal": np.equal, "not_equal": np.not_equal}
_BINARY.update(_COMPARE)


@dataclass(frozen=True, eq=False)
class Elementwise(Op):
    """``a <kind> b`` with NumPy broadcasting, ``kind`` one of add, sub, mul, div, max, min,
    pow, floordiv, remainder (of b's sign), fmod (of a's sign), or a comparison (greater,
    less, greater_equal, less_equal, equal, not_equal) whose result is a mask of 1.0 and 0.0
    (a framework's bool tensor, carried as float32: ``Where`` reads it, and a logical and /
    or / not is a mul / max / 1 - x of it).

    Two inputs, or one and the constant ``const`` (``const <kind> x`` when ``const_first``,
    else ``x <kind> const``). A squeeze-excitation scale is ``mul`` of an N x C x H x W map by
    an N x C x 1 x 1 vector. Cost: one op per output element.
    """

    kind: str
    const: np.ndarray | None = None
    const_first: bool = False

    def out_shape(self, in_shapes, name):
        if self.kind not in _BINARY:
            raise LayerError(f"{name}: Elementwise kind {self.kind!r}: must be one of "
                             f"{', '.join(_BINARY)}")
        _expect_inputs(in_shapes, 2 if self.const is None else 1, name, f"Elementwise {self.kind}")
        shapes = list(in_shapes) + ([] if self.const is None else [np.shape(self.const)])
        return _broadcast(shapes, name, self.kind)

    def __call__(self, *xs):
        if self.const is not None:
            c = np.asarray(self.const, np.float32)
            xs = (c, xs[0]) if self.const_first else (xs[0], c)
        with np.errstate(divide="ignore", invalid="ignore"):  # by 0: inf or NaN, as torch's
            return _BINARY[self.kind](xs[0], xs[1]).astype(np.float32, copy=False)


def _broadcast(shapes: list, name: str, what: str) -> Shape:
    """The shape ``shapes`` broadcast to (NumPy rules), or a ``LayerError`` naming them."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise LayerError(f"{name}: {what} of shapes {shapes} that do not broadcast (NumPy "
                         "rules)") from None


@dataclass(frozen=True, eq=False)
class Where(Op):
    """``a`` where ``cond`` is non-zero, else ``b`` (ONNX ``Where``, ``torch.where``), NumPy
    broadcasting: ``cond`` a mask of 1.0 and 0.0 (a comparison's ``Elementwise``). Each of
    ``cond``, ``a``, ``b`` is a computed input, in that order, or the constant given here.
    Cost: one select per output element."""

    cond: np.ndarray | None = None
    a: np.ndarray | None = None
    b: np.ndarray | None = None

    def _operands(self, xs) -> list:
        rest = iter(xs)
        return [next(rest) if c is None else np.asarray(c, np.float32)
                for c in (self.cond, self.a, self.b)]

    def out_shape(self, in_shapes, name):
        given = (self.cond, self.a, self.b)
        _expect_inputs(in_shapes, sum(c is None for c in given), name, "Where")
        computed = iter(in_shapes)
        return _broadcast([next(computed) if c is None else np.shape(c) for c in given], name,
                          "Where")

    def __call__(self, *xs):
        cond, a, b = self._operands(xs)
        return np.where(np.asarray(cond) != 0, a, b).astype(np.float32, copy=False)


ROUNDINGS = {"floor": np.floor, "ceil": np.ceil, "nearest": np.rint, "trunc": np.trunc}


@dataclass(frozen=True)
class Round(Op):
    """``x`` to an integer value: down (``floor``), up (``ceil``), to the nearest with ties to
    even (``nearest``: ONNX ``Round``, ``torch.round``) or toward zero (``trunc``). One op."""

    mode: str = "nearest"

    def __post_init__(self):
        if self.mode not in ROUNDINGS:
            raise LayerError(f"Round mode {self.mode!r}: one of {', '.join(ROUNDINGS)}")

    def __call__(self, x):
        return ROUNDINGS[self.mode](x)


@dataclass(frozen=True)
class Sign(Op):
    """-1, 0 or 1 by the sign of x (0 at zero): one op."""

    def __call__(self, x):
        return np.sign(x)


# ---- reductions and data movement -------------------------------------------------------


def _axes(axes, ndim: int, name: str, kind: str) -> tuple[int, ...]:
    """``axes`` (an int or a sequence, negatives allowed) as sorted non-negative axes."""
    axes = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    if any(not -ndim <= int(a) < ndim for a in axes):
        raise LayerError(f"{name}: {kind} axes {axes} out of range for a {ndim}-D input")
    return tuple(sorted({int(a) % ndim for a in axes}))


@dataclass(frozen=True)
class MatMul(Op):
    """``a @ b`` of two computed tensors (attention's queries by keys, its scores by
    values), by NumPy's matmul rules: each input's last two axes a matrix, the axes before
    them broadcast; both at least 3-D, the batch axis first. In float32, each output a sum
    of K products (K: ``a``'s last axis), in BLAS's order. Cost: K multiplies and K - 1 adds
    per output element."""

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 2, name, "MatMul")
        a, b = (tuple(int(d) for d in s) for s in in_shapes)
        if len(a) < 3 or len(b) < 3:
            raise LayerError(f"{name}: MatMul of shapes {a} and {b}: each needs the batch axis "
                             "and a matrix (at least 3-D)")
        if a[-1] != b[-2]:
            raise LayerError(f"{name}: MatMul of shapes {a} and {b}: the first's last axis "
                             f"({a[-1]}) must equal the second's next-to-last ({b[-2]})")
        try:
            front = np.broadcast_shapes(a[:-2], b[:-2])
        except ValueError:
            raise LayerError(f"{name}: MatMul of shapes {a} and {b}: the axes before the "
                             "matrices do not broadcast (NumPy rules)") from None
        return (*(int(d) for d in front), a[-2], b[-1])

    def vector_ops(self, in_shapes, out_shape):
        return _numel(out_shape) * (2 * int(in_shapes[0][-1]) - 1)

    def __call__(self, a, b):
        return np.matmul(np.asarray(a, np.float32), np.asarray(b, np.float32))


@dataclass(frozen=True)
class Reduce(Op):
    """Mean, sum, max, min, L1 norm (sum of magnitudes) or L2 norm (square root of the sum of
    squares) over ``axes`` (``keepdims`` keeps them as size 1). A mean over H, W of an
    N x C x H x W map is a global average pool. Cost: one op per input element; two for a
    norm (the magnitude or square, the add), and the L2 norm's square root per output."""

    kind: str = "mean"
    axes: tuple = (2, 3)
    keepdims: bool = True

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "Reduce")
        if self.kind not in REDUCE_KINDS:
            raise LayerError(f"{name}: Reduce kind {self.kind!r}: must be one of "
                             f"{', '.join(map(repr, REDUCE_KINDS))}")
        shape, axes = in_shapes[0], _axes(self.axes, len(in_shapes[0]), name, "Reduce")
        if self.keepdims:
            return tuple(1 if i in axes else d for i, d in enumerate(shape))
        return tuple(d for i, d in enumerate(shape) if i not in axes)

    def vector_ops(self, in_shapes, out_shape):
        if self.kind in ("l1", "l2"):
            return 2 * _numel(in_shapes[0]) + (_numel(out_shape) if self.kind == "l2" else 0)
        return _numel(in_shapes[0])

    def __call__(self, x):
        axes = _axes(self.axes, x.ndim, "reduce", "Reduce")
        if self.kind in ("max", "min"):
            return (x.max if self.kind == "max" else x.min)(axis=axes, keepdims=self.keepdims)
        if self.kind in ("mean", "sum"):  # sums in float64, rounded once
            reduce = np.sum if self.kind == "sum" else np.mean
            return reduce(x, axis=axes, keepdims=self.keepdims, dtype=np.float64).astype(x.dtype)
        wide = np.asarray(x, np.float64)
        wide = np.abs(wide) if self.kind == "l1" else wide * wide
        total = wide.sum(axis=axes, keepdims=self.keepdims)
        return (total if self.kind == "l1" else np.sqrt(total)).astype(x.dtype)


REDUCE_KINDS = ("mean", "sum", "max", "min", "l1", "l2")


@dataclass(frozen=True)
class CumSum(Op):
    """Running sums along ``axis`` (negatives count from the end): element i the sum of
    elements 0 to i, or 0 to i - 1 (``exclusive``), or from the end (``reverse``). Summed in
    float64 and rounded once per element, as PyTorch computes a float32 ``cumsum``. One add
    per element."""

    axis: int = 1
    exclusive: bool = False
    reverse: bool = False

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "CumSum")
        _axes(self.axis, len(in_shapes[0]), name, "CumSum")
        return in_shapes[0]

    def __call__(self, x):
        axis = _axes(self.axis, x.ndim, "cumsum", "CumSum")[0]
        wide = np.moveaxis(np.asarray(x, np.float64), axis, -1)  # summed along the last axis
        if self.reverse:
            wide = wide[..., ::-1]
        sums = np.cumsum(wide, axis=-1)
        if self.exclusive:  # shifted one along, 0 first
            sums = np.concatenate([np.zeros_like(sums[..., :1]), sums[..., :-1]], axis=-1)
        if self.reverse:
            sums = sums[..., ::-1]
        return np.moveaxis(sums, -1, axis).astype(x.dtype)


@dataclass(frozen=True)
class CumExtreme(Op):
    """Running maxima (``kind`` max) or minima (min) along ``axis`` (negatives count from the
    end): element i the largest or least of elements 0 to i, as PyTorch's ``cummax`` /
    ``cummin`` values (CornerNet's corner pooling, a flip and a cummax along H or W). One
    comparison per element."""

    kind: str = "max"
    axis: int = 1

    def out_shape(self, in_shapes, name):
        if self.kind not in _RUNNING:
            raise LayerError(f"{name}: CumExtreme kind {self.kind!r}: one of max, min")
        _expect_inputs(in_shapes, 1, name, "CumExtreme")
        _axes(self.axis, len(in_shapes[0]), name, "CumExtreme")
        return in_shapes[0]

    def __call__(self, x):
        return _RUNNING[self.kind].accumulate(x, axis=_axes(self.axis, x.ndim, "cumextreme",
                                                            "CumExtreme")[0])


_RUNNING = {"max": np.maximum, "min": np.minimum}


@dataclass(frozen=True)
class Broadcast(Op):
    """The input repeated along its size-1 axes to ``shape`` (the batch axis excluded), by
    NumPy's broadcasting rules (``expand``, ONNX ``Expand``). A data move: one op per
    output element."""

    shape: tuple = ()

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "Broadcast")
        want = (in_shapes[0][0], *self.shape)
        try:
            if np.broadcast_shapes(tuple(in_shapes[0]), want) == want:
                return want
        except ValueError:
            pass
        raise LayerError(f"{name}: Broadcast of {tuple(in_shapes[0])} to {want}: only axes of "
                         "size 1 can repeat (NumPy's broadcasting, the batch kept)")

    def __call__(self, x):
        return np.ascontiguousarray(np.broadcast_to(x, (x.shape[0], *self.shape)))


@dataclass(frozen=True)
class Transpose(Op):
    """Axes permuted (``perm[i]`` is the input axis of output axis i). A data move: one op
    per element."""

    perm: tuple = ()

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "Transpose")
        shape = in_shapes[0]
        if sorted(self.perm) != list(range(len(shape))):
            raise LayerError(f"{name}: Transpose perm {self.perm} is not a permutation of the "
                             f"{len(shape)} axes of {shape}")
        return tuple(shape[p] for p in self.perm)

    def __call__(self, x):
        return np.ascontiguousarray(np.transpose(x, self.perm))


@dataclass(frozen=True, eq=False)
class GatherND(Op):
    """ONNX ``GatherND`` (``batch_dims`` 0) by constant ``indices``: each output element is
    the input's at an index tuple over its first k axes (``indices``: ... x k, non-negative),
    the remaining axes kept: output shape ``indices.shape[:-1] + x.shape[k:]``. The dynamo
    exporter gathers an adaptive pool's windows so. A data move: one op per output
    element."""

    indices: np.ndarray

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "GatherND")
        shape, idx = in_shapes[0], np.asarray(self.indices)
        k = idx.shape[-1] if idx.ndim else 0
        if idx.ndim < 1 or not 1 <= k <= len(shape) or not np.issubdtype(idx.dtype, np.integer):
            raise LayerError(f"{name}: GatherND indices of shape {idx.shape}: need integer "
                             f"index tuples of 1 to {len(shape)} axes (the last axis)")
        if idx.size and (idx.min() < 0 or np.any(idx.reshape(-1, k).max(axis=0)
                                                  >= np.asarray(shape[:k]))):
            raise LayerError(f"{name}: GatherND indices out of range for the axes {shape[:k]}")
        return tuple(int(d) for d in idx.shape[:-1]) + tuple(shape[k:])

    def __call__(self, x):
        idx = np.asarray(self.indices)
        return np.ascontiguousarray(x[tuple(idx[..., i] for i in range(idx.shape[-1]))])


@dataclass(frozen=True)
class Slice(Op):
    """``x[start:stop:step]`` along ``axis`` (Python slice rules; a negative step walks back,
    ``step`` -1 over the whole axis is a flip); Split and chunk are one Slice per part. A data
    move: one op per output element."""

    axis: int = 1
    start: int = 0
    stop: int | None = None
    step: int = 1

    def _slice(self, size: int) -> slice:
        """The slice in non-negative bounds (a stop of None: past the start of the axis)."""
        start, stop, step = slice(self.start, self.stop, self.step).indices(size)
        return slice(start, None if stop < 0 else stop, step)

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "Slice")
        shape = in_shapes[0]
        axis = _axes(self.axis, len(shape), name, "Slice")[0]
        if self.step == 0:
            raise LayerError(f"{name}: Slice step 0: must be non-zero")
        size = len(range(*self._slice(shape[axis]).indices(shape[axis])))
        if size < 1:
            raise LayerError(f"{name}: Slice {self.start}:{self.stop}:{self.step} of axis {axis} "
                             f"(size {shape[axis]}) is empty")
        return shape[:axis] + (size,) + shape[axis + 1:]

    def __call__(self, x):
        axis = self.axis % x.ndim
        index = (slice(None),) * axis + (self._slice(x.shape[axis]),)
        return np.ascontiguousarray(x[index])


@dataclass(frozen=True)
class ZeroInsert(Op):
    """``stride - 1`` zeros between neighbouring pixels of H and W: output (H - 1) * sh + 1 by
    (W - 1) * sw + 1. A transposed convolution is the convolution of this (padded) map, so a
    zero-skipping machine skips the inserted zeros. A data move: one op per output element."""

    stride: tuple = (2, 2)

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "ZeroInsert")
        _expect_4d(in_shapes[0], name, "ZeroInsert")
        n, c, h, w = in_shapes[0]
        sh, sw = self.stride
        return (n, c, (h - 1) * sh + 1, (w - 1) * sw + 1)

    def __call__(self, x):
        n, c, h, w = x.shape
        sh, sw = self.stride
        out = np.zeros((n, c, (h - 1) * sh + 1, (w - 1) * sw + 1), x.dtype)
        out[:, :, ::sh, ::sw] = x
        return out


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
              "circular": "wrap"}


@dataclass(frozen=True)
class Pad(Op):
    """H, W padded by ``padding`` (top, bottom, left, right) pixels: ``constant`` (``value``),
    ``reflect`` (mirrored, the edge not repeated), ``replicate`` (the edge repeated) or
    ``circular`` (the map wrapped around: the top pad is its last rows; a panorama's). The
    padding a conv or pool absorbs never becomes this op; a constant pad its reader cannot
    absorb does. A data move: one op per output element."""

    padding: tuple = (0, 0, 0, 0)
    mode: str = "constant"
    value: float = 0.0

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "Pad")
        shape = in_shapes[0]
        t, b, l, r = self.padding
        if self.mode not in _PAD_MODES or len(shape) < 3 or min(self.padding) < 0:
            raise LayerError(f"{name}: Pad {self.padding} mode {self.mode!r} of shape {shape}: "
                             f"non-negative padding of the last two axes, mode one of "
                             f"{', '.join(_PAD_MODES)}")
        if self.mode == "reflect" and (max(t, b) >= shape[-2] or max(l, r) >= shape[-1]):
            raise LayerError(f"{name}: reflect padding {self.padding} must be smaller than the "
                             f"map {shape[-2]}x{shape[-1]}")
        if self.mode == "circular" and (max(t, b) > shape[-2] or max(l, r) > shape[-1]):
            raise LayerError(f"{name}: circular padding {self.padding} must be at most the "
                             f"map {shape[-2]}x{shape[-1]}")
        return shape[:-2] + (shape[-2] + t + b, shape[-1] + l + r)

    def __call__(self, x):
        t, b, l, r = self.padding
        widths = ((0, 0),) * (x.ndim - 2) + ((t, b), (l, r))
        mode = _PAD_MODES[self.mode]
        if mode == "constant":
            return np.pad(x, widths, constant_values=np.float32(self.value))
        return np.pad(x, widths, mode=mode)


# ---- normalisation ----------------------------------------------------------------------


def _standardise(x64: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (biased variance), in float64: the
    arithmetic LayerNorm and GroupNorm share."""
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x64 - mean) / np.sqrt(var + eps)


@dataclass(frozen=True, eq=False)
class LayerNorm(Op):
    """Normalise over the last ``weight.ndim`` axes: ``(x - mean) / sqrt(var + eps) * weight
    + bias`` (biased variance, float64 statistics). Cost 6 ops per element: mean, subtract,
    square-accumulate, normalise, scale, shift."""

    weight: np.ndarray
    bias: np.ndarray
    eps: float = 1e-5
    ops_per_element = 6

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "LayerNorm")
        shape = in_shapes[0]
        tail = tuple(np.shape(self.weight))
        if shape[len(shape) - len(tail):] != tail or len(tail) >= len(shape):
            raise LayerError(f"{name}: LayerNorm over {tail} on an input of shape {shape}: the "
                             "normalised shape must be the input's last axes (not the batch)")
        return shape

    def __call__(self, x):
        axes = tuple(range(x.ndim - np.ndim(self.weight), x.ndim))
        y = _standardise(np.asarray(x, np.float64), axes, self.eps) * self.weight + self.bias
        return y.astype(x.dtype)


@dataclass(frozen=True, eq=False)
class GroupNorm(Op):
    """Normalise each of ``groups`` channel groups over its channels and H, W, then a
    per-channel ``weight``, ``bias`` (C,). Cost 6 ops per element, as LayerNorm."""

    groups: int
    weight: np.ndarray
    bias: np.ndarray
    eps: float = 1e-5
    ops_per_element = 6

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "GroupNorm")
        shape = in_shapes[0]
        if len(shape) < 3 or shape[1] % self.groups or np.size(self.weight) != shape[1]:
            raise LayerError(f"{name}: GroupNorm of {self.groups} groups with "
                             f"{np.size(self.weight)} channel weights on an input of shape "
                             f"{shape}: groups must divide C and weight be (C,)")
        return shape

    def __call__(self, x):
        n, c = x.shape[:2]
        g = np.asarray(x, np.float64).reshape(n, self.groups, -1)
        y = _standardise(g, (2,), self.eps).reshape(x.shape)
        per = (1, c) + (1,) * (x.ndim - 2)
        return (y * self.weight.reshape(per) + self.bias.reshape(per)).astype(x.dtype)


@dataclass(frozen=True)
class LocalResponseNorm(Op):
    """AlexNet's and GoogLeNet's local response normalisation across channels:
    ``x[c] / (k + alpha / size * sum of x[j]^2)^beta``, j over the ``size`` channels from
    ``c - front`` (channels past either end count 0; ``front``: PyTorch ``size // 2``, ONNX
    ``(size - 1) // 2``), in float64. Cost per element: the square, the window's ``size``
    adds, the scale and offset, the power, the divide."""

    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    k: float = 1.0
    front: int | None = None  # None: size // 2

    @property
    def ops_per_element(self):
        return self.size + 4

    @property
    def before(self) -> int:
        """Channels of the window before its own."""
        return self.size // 2 if self.front is None else self.front

    def out_shape(self, in_shapes, name):
        _expect_inputs(in_shapes, 1, name, "LocalResponseNorm")
        if len(in_shapes[0]) < 3 or self.size < 1 or not 0 <= self.before < self.size:
            raise LayerError(f"{name}: LocalResponseNorm of size {self.size} (front "
                             f"{self.before}) on shape {in_shapes[0]}: needs N x C x ..., "
                             "size >= 1 and 0 <= front < size")
        return in_shapes[0]

    def __call__(self, x):
        squares = np.square(np.asarray(x, np.float64))
        c = x.shape[1]
        running = np.zeros((x.shape[0], c + 1, *x.shape[2:]))  # prefix sums over channels
        np.cumsum(squares, axis=1, out=running[:, 1:])
        lo = np.clip(np.arange(c) - self.before, 0, c)
        hi = np.clip(np.arange(c) - self.before + self.size, 0, c)
        window = running[:, hi] - running[:, lo]
        return (x / (self.k + self.alpha / self.size * window) ** self.beta).astype(x.dtype)


@dataclass(frozen=True, eq=False)
class Fallback(Op):
    """An op the IR does not model, computed by the framework it came from: ``compute``
    maps float32 numpy inputs to the output (a torch call, an onnxruntime session on the
    one node). ``source`` names it as the framework does ('nn.Softplus', 'ONNX Softplus');
    ``in_shapes`` and ``shape`` are the shapes it was imported at (another batch size is
    allowed). Costed as vector work: one op per input and per output element."""

    source: str
    compute: object
    in_shapes: tuple
    shape: Shape

    def out_shape(self, in_shapes, name):
        batch = in_shapes[0][0] if in_shapes and in_shapes[0] else None
        if len(in_shapes) != len(self.in_shapes) or any(
                tuple(a[1:]) != tuple(b[1:])
                for a, b in zip(in_shapes, self.in_shapes, strict=True)):
            raise LayerError(f"{name}: fallback op {self.source} was imported for inputs "
                             f"{list(self.in_shapes)}, got {list(in_shapes)} (only the batch "
                             "size may change)")
        return (batch,) + tuple(self.shape[1:]) if batch is not None else tuple(self.shape)

    def vector_ops(self, in_shapes, out_shape):
        return sum(_numel(s) for s in in_shapes) + _numel(out_shape)

    def __call__(self, *xs):
        return np.asarray(self.compute(*[np.asarray(x, np.float32) for x in xs]), np.float32)


OPS: dict[str, type] = {
    "relu": Relu, "relu6": Relu6, "leakyrelu": LeakyRelu, "prelu": PRelu,
    "maxpool": MaxPool, "avgpool": AvgPool, "globalavgpool": GlobalAvgPool,
    "adaptiveavgpool": AdaptiveAvgPool, "adaptivemaxpool": AdaptiveMaxPool, "add": Add,
    "concat": Concat, "flatten": Flatten, "reshape": Reshape, "softmax": Softmax,
    "upsample": Upsample, "gridsample": GridSample, "identity": Identity, "sigmoid": Sigmoid,
    "hardsigmoid": HardSigmoid,
    "hardswish": HardSwish, "silu": Silu, "softplus": Softplus, "mish": Mish, "elu": Elu,
    "tanh": Tanh, "trig": Trig, "erf": Erf, "sqrt": Sqrt, "exp": Exp, "log": Log, "abs": Abs,
    "gelu": Gelu, "clip": Clip, "fakequant": FakeQuant,
    "elementwise": Elementwise, "where": Where, "sign": Sign, "round": Round, "matmul": MatMul,
    "reduce": Reduce, "cumsum": CumSum, "cumextreme": CumExtreme, "broadcast": Broadcast,
    "transpose": Transpose, "slice": Slice, "gathernd": GatherND,
    "layernorm": LayerNorm, "groupnorm": GroupNorm, "localresponsenorm": LocalResponseNorm,
    "pad": Pad,
    "zeroinsert": ZeroInsert,
}
