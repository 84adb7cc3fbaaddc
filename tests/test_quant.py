"""The int8 scheme: ranges, scales and rounding, checked against float64 arithmetic."""

import numpy as np
import pytest

from npusim import quant
from npusim.errors import NpusimError


def test_activation_quantisation_is_symmetric_and_bounded():
    x = np.array([-2.0, -1.0, 0.0, 0.5, 1.0], np.float32)
    q, s = quant.quantize_activations(x)
    assert s == 2.0 / 127 and q.dtype == np.int8
    assert q.tolist() == [-127, -64, 0, 32, 64]  # round half to even: 31.75 -> 32, 63.5 -> 64


def test_weight_scales_are_per_output_channel():
    w = np.zeros((3, 2, 1, 1), np.float32)
    w[0, 0], w[1, 1], w[2] = 1.0, -0.25, 0.0
    q, s = quant.quantize_weights(w)
    assert np.allclose(s, [1 / 127, 0.25 / 127, 1.0])
    assert q[0, 0, 0, 0] == 127 and q[1, 1, 0, 0] == -127 and not q[2].any()


def test_requantise_maps_the_largest_output_to_127():
    acc = np.array([[[[100]], [[-50]]]], np.int32)
    r = quant.requantize(acc, 0.5, np.array([0.1, 0.4]))
    real = np.array([5.0, -10.0])
    assert r.q.ravel().tolist() == [64, -127]  # 5 / (10/127) = 63.5 -> 64
    assert np.allclose(r.dequantize().ravel(), np.rint(real / (10 / 127)) * (10 / 127))


def test_a_bias_too_large_for_its_kernels_scale_raises_the_scale_not_an_overflow():
    """A trained network's dead kernel (weights of 1e-34 beside a bias of 5e-28, as in
    PP-OCRv4's detector) put its bias at 1e10 accumulator units: an int32 overflow. Its
    weight scale is raised until the bias fits; the other kernels' scales stay."""
    sx = 0.01
    w = np.ones((3, 4, 1, 1), np.float32)
    w[1] = 1.2e-34
    bias = np.array([0.5, -4.9e-28, 0.0], np.float32)
    _, sw = quant.quantize_weights(w)
    assert abs(float(bias[1]) / (sx * sw[1])) > 2**31  # what overflowed
    fitted = quant.bias_fitted_scales(sw, bias, sx)
    assert fitted[0] == sw[0] and fitted[2] == sw[2] and fitted[1] > sw[1]
    b = quant.quantize_bias(bias, sx, fitted)
    assert np.abs(b.astype(np.int64)).max() <= quant.BIAS_LIMIT
    assert abs(b[1] * sx * fitted[1] - float(bias[1])) <= sx * fitted[1] / 2  # still the bias
    assert quant.bias_fitted_scales(sw, np.zeros(3, np.float32), sx) is sw
    assert quant.bias_fitted_scales(sw, None, sx) is sw


def test_a_network_with_a_dead_kernel_runs_in_int8_within_the_rounding_bound():
    """On a conv with a dead kernel: the int8 run against float64 maths, within the int8
    scheme's rounding bound (``report.check.int8_bound``) on every output."""
    from npusim import reference, simulate
    from npusim.ir import GraphBuilder
    from npusim.report.check import int8_bound

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    w[2] = 1.2e-34
    bias = np.array([0.1, -0.2, -4.9e-28, 0.3], np.float32)
    gb = GraphBuilder("dead kernel", (1, 3, 10, 10))
    gb.conv(gb.input, w, bias, padding=1)
    graph = gb.build()
    x = rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
    got = simulate(graph, x, "systolic-32x32-ws", mode="run", dtype="int8").output
    node = graph.conv_nodes[0]
    want = reference.conv2d(x, w, bias, graph.layers[node.name])
    assert (np.abs(got - want) <= int8_bound(node, x, got) + 1e-6).all()


def test_compiled_quantisation_is_the_numpy_formula_bit_for_bit():
    """The compiled passes against the scheme's formulas written in numpy: activations
    ``clip(rint(x / s))`` with the division in float32, accumulators ``clip(rint(acc * (s_x
    s_w[k]) / s))`` in float64, on random tensors and on exact ties (half-way values, which
    round to even)."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 6, 9, 11)) * rng.uniform(0.01, 50)).astype(np.float32)
    ties = np.array([127.0, 0.5, 1.5, 2.5, -2.5, -0.5, 126.5], np.float32)  # s == 1 exactly
    for t in (x, -x, ties, np.zeros(5, np.float32)):
        s = float(quant._scale(np.abs(t).max()))
        expect = np.clip(np.rint(t / np.float32(s)), -127, 127).astype(np.int8)
        q, got = quant.quantize_activations(t)
        assert got == s and q.dtype == np.int8 and np.array_equal(q, expect)
    assert quant.quantize_activations(ties)[0].tolist() == [127, 0, 2, 2, -2, 0, 126]

    acc = rng.integers(-2**31, 2**31, (2, 5, 7, 3)).astype(np.int32)
    x_scale, w_scales = 0.0173, rng.uniform(1e-4, 1e-2, 5)
    tie_acc = np.array([254, 1, 3, 5, -5, -1, 253], np.int32).reshape(1, 7, 1, 1)
    for a, sx, sw in ((acc, x_scale, w_scales), (tie_acc, 0.5, np.full(7, 2.0))):
        real = a.astype(np.float64) * (sx * sw).reshape(1, -1, 1, 1)
        s = float(quant._scale(np.abs(real).max()))
        r = quant.requantize(a, sx, sw)
        assert r.scale == s
        assert np.array_equal(r.q, np.clip(np.rint(real / s), -127, 127).astype(np.int8))
    assert quant.requantize(tie_acc, 0.5, np.full(7, 2.0)).q.ravel().tolist() == [
        127, 0, 2, 2, -2, 0, 126]  # s = 2: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 126.5 -> 126


def test_exact_int32_adds_the_bias_rounds_and_refuses_an_overflow():
    rng = np.random.default_rng(6)
    bias = rng.integers(-2**20, 2**20, 4).astype(np.int32)
    for sums in (rng.integers(-2**30, 2**30, (2, 4, 3, 5)).astype(np.float64),
                 rng.integers(-2**30, 2**30, (2, 4, 3, 5)).astype(np.int64),
                 (2**24 - rng.integers(0, 16, (2, 4, 3, 5))).astype(np.float32)):
        # float32 sums near 2**24: their bias added in float32 would round
        wide = np.int64 if sums.dtype == np.int64 else np.float64
        expect = np.rint(sums.astype(wide) + bias.astype(wide).reshape(1, -1, 1, 1)
                         ).astype(np.int64)
        got = quant.exact_int32(sums, bias, "conv")
        assert got.dtype == np.int32 and np.array_equal(got, expect)
        assert np.array_equal(quant.exact_int32(sums, None, "conv"), sums.astype(np.int64))
    sums = np.zeros((1, 2, 2, 2))
    sums[0, 1, 1, 0] = 2.0**31
    sums[0, 0, 0, 1] = -5.0
    with pytest.raises(NpusimError, match=r"conv7: int32 accumulator overflow "
                                          r"\(range -5\.\.2147483648\)"):
        quant.exact_int32(sums, None, "conv7")
