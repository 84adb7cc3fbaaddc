"""The group-tile fast path's outputs against the cycle emulator's, bit for bit, on layers
whose partitions are wide enough for the channel-vectorised loop and on narrow ones."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import conv_layers, tensors

from npusim import reference
from npusim.dataflows.group_tile import CHANNEL_LOOP, Params, broadcast_conv
from npusim.emulate.group_tile import run_tiles
from npusim.ir import ConvLayer


@st.composite
def wide_partitions(draw):
    """A layer of 1-2 groups with CHANNEL_LOOP to 70 outputs per group (up to three blocks of
    kernels in registers, the last one part full) and rows of 1-9 columns (rows narrower
    than a block of columns, whole blocks, a last block part full)."""
    base = draw(conv_layers(max_hw=9, max_c=6, max_k=1, max_rs=3))
    kg = draw(st.integers(CHANNEL_LOOP, 70))
    return ConvLayer(base.N, base.Cg * base.groups, base.H, base.W, kg * base.groups, base.R,
                     base.S, base.stride, base.padding, base.dilation, base.groups, base.bias)


@settings(max_examples=60, deadline=None)
@given(st.one_of(wide_partitions(), conv_layers(max_hw=5, max_c=4, max_k=4, max_rs=3)),
       st.integers(0, 99), st.sampled_from(["float32", "int8"]))
def test_fast_outputs_equal_the_emulators_bit_for_bit(layer, seed, dtype):
    layer = layer.with_dtype(dtype)
    x, w, b = tensors(layer, seed, dtype)
    fast = broadcast_conv(layer, x, w, b)
    emulated = run_tiles(layer, x, w, b, Params(macs=64)).output
    assert fast.dtype == emulated.dtype
    assert np.array_equal(fast, emulated)
    if dtype == "int8":
        assert np.array_equal(fast, reference.conv2d(x, w, b, layer))


def test_int8_sums_beyond_float32_precision_stay_exact():
    """127 x 127 x 2048 taps = 33,032,192 > 2**24: exact only if summed wider than float32."""
    layer = ConvLayer(1, 2048, 1, 1, CHANNEL_LOOP, 1, 1, dtype="int8")
    x = np.full(layer.input_shape, 127, np.int8)
    w = np.full(layer.weight_shape, 127, np.int8)
    w[0, 0] = -127  # 2046 x 16129: also odd multiples of 16129, not a power-of-two count
    out = broadcast_conv(layer, x, w, None)
    assert out.dtype == np.int32
    assert out[0, 0, 0, 0] == 2046 * 16129 and out[0, 1, 0, 0] == 2048 * 16129
