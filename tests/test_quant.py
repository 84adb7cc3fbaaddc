"""The int8 scheme: ranges, scales and rounding, checked against float64 arithmetic."""

import numpy as np

from npusim import quant


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
