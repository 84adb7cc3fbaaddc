"""Every op in ops.py against PyTorch's own functions, odd cases included.

Each case calls torch.nn.functional directly (not npusim's mirror), so the two
implementations are independent. Convolution arithmetic is judged in
test_engine / test_reference; here only its shape rule meets torch.
"""

import itertools

import numpy as np
import pytest

from npusim import ops
from npusim.errors import LayerError

torch = pytest.importorskip("torch")
F = torch.nn.functional


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def t(a):
    """``a`` as a tensor of its own (npusim's read-only arrays copied: torch warns of them)."""
    return torch.from_numpy(np.require(a, requirements=["C", "W"]))


def close(ours, theirs, tol=1e-6):
    theirs = theirs.numpy() if hasattr(theirs, "numpy") else theirs
    assert ours.shape == theirs.shape
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (3, 7)])
def test_activations(shape):
    x = rand(*shape) * 4
    close(ops.Relu()(x), F.relu(t(x)))
    close(ops.Relu6()(x), F.relu6(t(x)))
    close(ops.LeakyRelu(0.2)(x), F.leaky_relu(t(x), 0.2))
    close(ops.Identity()(x), t(x))


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (3, 3)])
def test_prelu_per_channel_and_shared(shape):
    x = rand(*shape)
    slope = np.array([0.1, -0.5, 2.0], np.float32)
    close(ops.PRelu(slope)(x), F.prelu(t(x), t(slope)))
    close(ops.PRelu(np.float32([0.25]))(x), F.prelu(t(x), torch.tensor([0.25])))


def test_batchnorm_from_stats_matches_eval_batch_norm():
    x = rand(2, 4, 3, 5)
    g, b, m, v = rand(4, seed=1), rand(4, seed=2), rand(4, seed=3), np.abs(rand(4, seed=4)) + .1
    ref = F.batch_norm(t(x), t(m), t(v), t(g), t(b), training=False, eps=1e-3)
    close(ops.BatchNorm.from_stats(g, b, m, v, eps=1e-3)(x), ref, 1e-5)


POOL_GRID = [  # (kernel, stride, padding, H, W)
    (2, 2, 0, 7, 6), (3, 2, 1, 7, 8), (3, 2, 0, 6, 9), (3, 3, 1, 8, 5), (2, 1, 1, 4, 4),
    ((3, 2), (2, 1), (1, 0), 9, 5), (5, 3, 2, 11, 7), (1, 2, 0, 5, 5),
]


@pytest.mark.parametrize("ceil", [False, True])
@pytest.mark.parametrize("k,s,p,d,h,w", [(k, s, p, 1, h, w) for k, s, p, h, w in POOL_GRID] + [
    (2, 2, 0, 2, 7, 6), (3, 2, 1, 2, 9, 8), (3, 1, 1, (1, 3), 6, 9),
    ((2, 3), (2, 1), (1, 0), (3, 2), 9, 7)])  # dilated
def test_maxpool_grid(k, s, p, d, h, w, ceil):
    x = rand(2, 3, h, w)
    ours = ops.MaxPool(k, s, p, ceil_mode=ceil, dilation=d)
    ref = F.max_pool2d(t(x), k, s, p, dilation=d, ceil_mode=ceil)
    assert ours.out_shape([x.shape], "pool") == tuple(ref.shape)
    close(ours(x), ref)
    assert ours.vector_ops([x.shape], tuple(ref.shape)) == ref.numel() * np.prod(ours.kernel)


@pytest.mark.parametrize("ceil,include", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("k,s,p,h,w", POOL_GRID)
def test_avgpool_grid_ceil_and_count_include_pad(k, s, p, h, w, ceil, include):
    x = rand(2, 3, h, w)
    ours = ops.AvgPool(k, s, p, ceil_mode=ceil, count_include_pad=include)
    ref = F.avg_pool2d(t(x), k, s, p, ceil_mode=ceil, count_include_pad=include)
    assert ours.out_shape([x.shape], "pool") == tuple(ref.shape)
    close(ours(x), ref)


@pytest.mark.parametrize("pad", [(0, 1, 0, 1), (1, 0, 2, 0), (2, 1, 0, 3)])
def test_pools_with_asymmetric_padding(pad):
    """TensorFlow-style 'same' pads: torch needs F.pad first (-inf for max, 0 for average)."""
    x = rand(1, 2, 7, 6)
    top, bottom, left, right = pad
    close(ops.MaxPool(3, 2, pad)(x),
          F.max_pool2d(F.pad(t(x), (left, right, top, bottom), value=-np.inf), 3, 2))
    close(ops.AvgPool(3, 2, pad)(x), F.avg_pool2d(F.pad(t(x), (left, right, top, bottom)), 3, 2))


def test_global_avg_pool_add_concat_flatten_reshape():
    a, b, c = rand(2, 3, 5, 4, seed=1), rand(2, 3, 5, 4, seed=2), rand(2, 2, 5, 4, seed=3)
    close(ops.GlobalAvgPool()(a), F.adaptive_avg_pool2d(t(a), 1))
    close(ops.Add()(a, b, a), t(a) + t(b) + t(a))
    close(ops.Concat()(a, c), torch.cat([t(a), t(c)], 1))
    close(ops.Concat(axis=-1)(a, b), torch.cat([t(a), t(b)], -1))
    close(ops.Flatten()(a), torch.flatten(t(a), 1))
    close(ops.Reshape((5, -1))(a), t(a).reshape(2, 5, -1))


def test_concat_joins_constants_in_their_places_to_every_sample():
    """A class token of a batch of one before the tokens (ViT), a constant of the batch's own
    between two computed tensors; the shape rule as torch gives."""
    tokens, more = rand(2, 6, 4, seed=1), rand(2, 3, 4, seed=2)
    token, each = rand(1, 1, 4, seed=3), rand(2, 2, 4, seed=4)
    op = ops.Concat(1, ((0, token), (2, each)))
    ref = torch.cat([t(token).expand(2, -1, -1), t(tokens), t(each), t(more)], 1)
    close(op(tokens, more), ref)
    assert op.out_shape([tokens.shape, more.shape], "cat") == tuple(ref.shape)
    for bad in ((0, rand(3, 1, 4)), (0, rand(1, 1, 5)), (0, rand(1, 4))):
        with pytest.raises(LayerError, match="cat: Concat along axis 1 of mismatched shapes"):
            ops.Concat(1, (bad,)).out_shape([tokens.shape], "cat")
    with pytest.raises(LayerError, match="cat: Concat of a constant along the batch axis"):
        ops.Concat(0, ((0, token),)).out_shape([(2, 1, 4)], "cat")


@pytest.mark.parametrize("hw, size", [((9, 9), (4, 4)), ((5, 4), (3, 3)), ((7, 13), (7, 7)),
                                      ((3, 2), (5, 7)), ((1, 6), (1, 4)), ((8, 8), (8, 8))])
def test_adaptive_pools_are_torchs_and_cost_their_windows(hw, size):
    """Against torch's adaptive_avg_pool2d and adaptive_max_pool2d: unequal, overlapping and
    repeated windows; the vector ops are each output's window area (5 -> 3 rows: windows of
    2, 3, 2 pixels)."""
    x = rand(2, 3, *hw, seed=5)
    close(ops.AdaptiveMaxPool(size)(x), F.adaptive_max_pool2d(t(x), size))
    op = ops.AdaptiveAvgPool(size)
    close(op(x), F.adaptive_avg_pool2d(t(x), size))
    assert op.out_shape([x.shape], "p") == (2, 3, *size)
    windows = [[-(-(i + 1) * n // m) - i * n // m for i in range(m)]
               for n, m in zip(hw, size, strict=True)]
    assert op.vector_ops([x.shape], None) == 2 * 3 * sum(windows[0]) * sum(windows[1])
    if hw == (5, 4):
        assert windows == [[2, 3, 2], [2, 2, 2]] and op.vector_ops([x.shape], None) == 6 * 42


@pytest.mark.parametrize("axes, keepdims", [((2, 3), True), ((1,), False), ((1, 3), True)])
def test_reduce_sum_is_torchs(axes, keepdims):
    x = rand(2, 3, 5, 4, seed=6)
    close(ops.Reduce("sum", axes, keepdims)(x), torch.sum(t(x), dim=axes, keepdim=keepdims),
          1e-5)


@pytest.mark.parametrize("shape, to", [((2, 3, 1, 1), (3, 5, 4)), ((2, 1, 5, 1), (3, 5, 4)),
                                       ((2, 3, 5, 4), (3, 5, 4)), ((2, 1), (5,))])
def test_broadcast_is_torchs_expand_and_costs_its_output(shape, to):
    x = rand(*shape, seed=7)
    op = ops.Broadcast(to)
    close(op(x), t(x).expand(2, *to))
    assert op.out_shape([shape], "b") == (2, *to)
    assert op.vector_ops([shape], (2, *to)) == 2 * int(np.prod(to))


def test_broadcast_of_an_axis_that_is_not_one_is_refused():
    with pytest.raises(LayerError, match=r"b: Broadcast of \(2, 3, 5, 4\) to \(2, 6, 5, 4\): "
                                         r"only axes of size 1 can repeat"):
        ops.Broadcast((6, 5, 4)).out_shape([(2, 3, 5, 4)], "b")


@pytest.mark.parametrize("shape,axis", [((2, 5, 3, 3), 1), ((4, 10), -1), ((4, 10), 1)])
def test_softmax(shape, axis):
    x = rand(*shape) * 10
    close(ops.Softmax(axis)(x), F.softmax(t(x), dim=axis))


@pytest.mark.parametrize("size", [1, 2, 3, 5, 9])
def test_local_response_norm_is_torchs_in_float64(size):
    """AlexNet's LRN across 7 channels, windows of even and odd size and one wider than the
    channels: float64 PyTorch; cost: the square, the window's adds, four more."""
    x = rand(2, 7, 5, 4) * 3
    op = ops.LocalResponseNorm(size, 1e-2, 0.75, 2.0)
    close(op(x), F.local_response_norm(t(x).double(), size, 1e-2, 0.75, 2.0).float(), 1e-6)
    assert op.vector_ops([x.shape], x.shape) == (size + 4) * x.size


def test_local_response_norm_refuses_a_window_off_its_channel():
    with pytest.raises(LayerError, match=r"n: LocalResponseNorm of size 3 \(front 3\)"):
        ops.LocalResponseNorm(3, front=3).out_shape([(1, 4, 2, 2)], "n")


@pytest.mark.parametrize("shape,axis", [((2, 5, 3, 3), 1), ((4, 10), -1)])
def test_log_softmax_is_torchs_in_float64_and_finite_far_below_the_max(shape, axis):
    """Log-probabilities against float64 torch, on logits 200 apart: the log of a float32
    softmax would be -inf there; the log-softmax is finite."""
    x = rand(*shape) * 100
    close(ops.Softmax(axis, log=True)(x), F.log_softmax(t(x).double(), dim=axis).float(),
          tol=1e-5)
    assert np.isfinite(ops.Softmax(axis, log=True)(x)).all()
    assert ops.Softmax(axis, log=True).vector_ops([x.shape], x.shape) == 4 * x.size


@pytest.mark.parametrize("scale", [2, 3, (2, 1)])
def test_upsample_nearest_integer_scales(scale):
    x = rand(2, 3, 4, 5)
    close(ops.Upsample(scale)(x), F.interpolate(t(x), scale_factor=scale, mode="nearest"))


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("scale", [2, 1.5, 2.3, 0.6, (0.5, 3)])
def test_upsample_bilinear_scales_both_alignments(scale, align):
    """Fractional scales: npusim resizes to floor(H * scale) and samples at 1/scale steps, as
    torch's default and ONNX Resize with scales do."""
    x = rand(1, 2, 5, 7)
    ref = F.interpolate(t(x), scale_factor=scale, mode="bilinear", align_corners=align)
    close(ops.Upsample(scale, "bilinear", align)(x), ref, 2e-6)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("size", [(7, 3), (11, 16), (1, 1)])
def test_upsample_to_size(mode, size):
    x = rand(2, 3, 5, 7)
    extra = {"align_corners": False} if mode == "bilinear" else {}
    close(ops.Upsample(size=size, mode=mode)(x),
          F.interpolate(t(x), size=size, mode=mode, **extra), 2e-6)


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 0, 1, 1), (2, (1, 2), 1, 1),
                                                    (3, 1, 2, 2), (1, 2, 3, 4)])
def test_conv_shape_rule_matches_torch(stride, pad, dil, groups):
    x, w = rand(2, 4, 9, 8), rand(8, 4 // groups, 3, 2)
    conv = ops.Conv(w, None, stride, pad, dil, groups)
    ref = F.conv2d(t(x), t(w), None, stride, pad, dil, groups)
    assert conv.out_shape([x.shape], "c") == tuple(ref.shape)
    assert ops.Conv(rand(6, 10, 1, 1)).out_shape([(3, 10)], "fc") == (3, 6)


@pytest.mark.parametrize("op,shapes,match", [
    (ops.Add(), [(1, 2, 3, 3), (1, 3, 3, 3)], r"a: Add needs two or more inputs of one shape"),
    (ops.Concat(), [(1, 2, 3, 3), (1, 2, 4, 3)], r"a: Concat along axis 1 of mismatched"),
    (ops.MaxPool(5), [(1, 2, 3, 3)], r"a: pool window 5x5 does not fit input 3x3"),
    (ops.PRelu(np.ones(3)), [(1, 2, 3, 3)], r"a: PRelu has 3 slopes"),
    (ops.Reshape((7, -1)), [(1, 2, 3, 3)], r"a: cannot reshape \(1, 2, 3, 3\)"),
    (ops.Upsample(2, "lanczos"), [(1, 2, 3, 3)], r"a: Upsample mode 'lanczos': one of "
                                                 r"nearest, bilinear, bicubic"),
    (ops.Conv(rand(4, 3, 3, 3)), [(1, 2, 5, 5)], r"a: weight has 3 input channels per group"),
])
def test_shape_errors_name_the_node(op, shapes, match):
    with pytest.raises(LayerError, match=match):
        op.out_shape(shapes, "a")


@pytest.mark.parametrize("scale", [1.5, 2.3, 0.6, (1.7, 2.5)])
def test_upsample_nearest_fractional_scales_sample_like_torch(scale):
    x = rand(1, 2, 5, 7)
    close(ops.Upsample(scale)(x), F.interpolate(t(x), scale_factor=scale, mode="nearest"))


def test_average_pooling_takes_no_dilation():
    with pytest.raises(LayerError, match=r"average pooling of dilation \(2, 2\): the IR "
                                         r"dilates max pooling only"):
        ops.Pool(2, kind="avg", dilation=2)


def test_pool_padding_as_large_as_the_window_is_refused():
    with pytest.raises(LayerError, match=r"p: pool padding \(0, 0, 0, 2\) must be smaller than "
                                         r"the window 2x2"):
        ops.MaxPool(2, 2, (0, 0, 0, 2)).out_shape([(1, 1, 4, 4)], "p")


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("width, pad", [(5, (0, 0, 0, 1)), (6, (0, 0, 1, 1)), (7, (0, 0, 2, 0))])
def test_ceil_mode_never_gives_fewer_windows_than_floor(kind, width, pad):
    for k, s in [(2, 2), (3, 2), (3, 3)]:
        if max(pad) >= k:
            continue
        floor = ops.Pool(k, s, pad, False, kind).out_shape([(1, 1, 4, width)], "p")[3]
        ceil = ops.Pool(k, s, pad, True, kind).out_shape([(1, 1, 4, width)], "p")[3]
        assert floor <= ceil <= floor + 1
        out = ops.Pool(k, s, pad, True, kind)(rand(1, 1, 4, width))
        assert np.isfinite(out).all()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8])
def test_batchnorm_equals_its_expression_bit_for_bit_and_keeps_its_input(dtype):
    """``BatchNorm`` (the shift added in place into the product) against the plain
    expression ``(x * scale + shift).astype(float32)``: the same bits, and ``x`` unchanged."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 5, 4, 3)) * 50).astype(dtype)
    bn = ops.BatchNorm.from_stats(rng.random(5) + 0.5, rng.standard_normal(5),
                                  rng.standard_normal(5), rng.random(5) + 0.1)
    before = x.copy()
    shape = (1, -1, 1, 1)
    ref = (x * bn.scale.reshape(shape) + bn.shift.reshape(shape)).astype(np.float32)
    out = bn(x)
    assert out.dtype == np.float32 and out.tobytes() == ref.tobytes()
    assert x.tobytes() == before.tobytes()


@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 4, 7, 5), (2, 4, 5, 3)),   # heads x tokens: queries by keys
    ((2, 1, 6, 5), (2, 3, 5, 6)),   # a broadcast axis before the matrices
    ((3, 9, 16), (3, 16, 9)),       # one matrix an image (torch.bmm)
    ((1, 2, 3, 1, 4), (1, 2, 1, 4, 2)),
])
def test_matmul_is_torchs_within_float32_and_costs_its_products_and_sums(a_shape, b_shape):
    a, b = rand(*a_shape), rand(*b_shape, seed=1)
    op = ops.MatMul()
    out = op(a, b)
    assert out.dtype == np.float32 and op.out_shape([a_shape, b_shape], "m") == out.shape
    close(out, torch.matmul(t(a), t(b)), tol=1e-5)
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert np.abs(out - exact).max() <= 1e-5 * np.abs(exact).max()
    k = a_shape[-1]  # K products and K - 1 sums per output element
    assert op.vector_ops([a_shape, b_shape], out.shape) == out.size * (2 * k - 1)


@pytest.mark.parametrize("shapes, match", [
    ([(2, 7, 5), (2, 4, 3)], r"m: MatMul of shapes \(2, 7, 5\) and \(2, 4, 3\): the first's "
                             r"last axis \(5\) must equal the second's next-to-last \(4\)"),
    ([(2, 5), (2, 5, 3)], r"each needs the batch axis and a matrix \(at least 3-D\)"),
    ([(2, 3, 7, 5), (2, 4, 5, 3)], r"the axes before the matrices do not broadcast"),
    ([(2, 7, 5)], r"m: MatMul takes 2 input\(s\), got 1"),
])
def test_matmul_shapes_it_cannot_multiply_are_refused_by_node(shapes, match):
    with pytest.raises(LayerError, match=match):
        ops.MatMul().out_shape(shapes, "m")
