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
