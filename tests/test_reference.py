"""The judges judged: reference.conv2d against torch (float64) and against scalar loops (int)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import conv_layers, rel_err, tensors, torch_conv

from npusim import reference
from npusim.ir import ConvLayer
from npusim.reference import pad_input


@given(conv_layers(), st.integers(0, 2**16))
def test_float64_reference_equals_torch(layer, seed):
    x, w, b = tensors(layer, seed)
    out = reference.conv2d(x, w, b, layer)
    assert out.dtype == np.float64 and out.shape == layer.output_shape
    assert rel_err(out, torch_conv(layer, x, w, b)) < 1e-12


def scalar_conv(x, w, layer):
    """The definition, one output element at a time, in Python integers."""
    out = np.zeros(layer.output_shape, dtype=object)
    t, _, le, _ = layer.padding
    for n, k, p, q in np.ndindex(*layer.output_shape):
        g = k // layer.Kg
        acc = 0
        for c, r, s in np.ndindex(layer.Cg, layer.R, layer.S):
            i = p * layer.stride[0] + r * layer.dilation[0] - t
            j = q * layer.stride[1] + s * layer.dilation[1] - le
            if 0 <= i < layer.H and 0 <= j < layer.W:
                acc += int(x[n, g * layer.Cg + c, i, j]) * int(w[k, c, r, s])
        out[n, k, p, q] = acc
    return out


@given(conv_layers(max_hw=6, max_c=4, max_k=4, max_rs=3), st.integers(0, 2**16))
def test_integer_reference_is_exact(layer, seed):
    x, w, _ = tensors(layer, seed, "int8")
    out = reference.conv2d(x, w, None, layer)
    assert out.dtype == np.int64
    assert (out == scalar_conv(x, w, layer)).all()


def test_integer_reference_does_not_wrap_at_int8_or_int16():
    layer = ConvLayer(1, 64, 3, 3, 1, 3, 3)
    x = np.full(layer.input_shape, -127, np.int8)
    w = np.full(layer.weight_shape, -127, np.int8)
    assert reference.conv2d(x, w, None, layer)[0, 0, 0, 0] == 127 * 127 * 64 * 9


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.float32, np.float64])
@pytest.mark.parametrize("padding", [(0, 0, 0, 0), (1, 1, 1, 1), (0, 2, 3, 1), (2, 0, 0, 0)])
def test_padding_is_numpys_constant_pad(dtype, padding):
    """``pad_input`` against ``np.pad`` (which it replaced for speed), zeros and ones."""
    layer = ConvLayer(2, 3, 5, 4, 2, 3, 3, padding=padding)
    x = np.random.default_rng(0).integers(-3, 4, layer.input_shape).astype(dtype)
    t, b, left, right = padding
    for value in (0, 1):
        want = np.pad(x, ((0, 0), (0, 0), (t, b), (left, right)), constant_values=value)
        got = pad_input(x, layer, value)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, want)
