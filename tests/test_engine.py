"""The dense engine (im2col + GEMM) against the float64 reference and the exact integer one."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import conv_layers, rel_err, tensors

from npusim import engine, reference
from npusim.errors import NpusimError
from npusim.ir import ConvLayer


@given(conv_layers(), st.integers(0, 2**16))
def test_float32_within_1e5_of_reference(layer, seed):
    x, w, b = tensors(layer, seed)
    out = engine.conv2d(x, w, b, layer)
    assert out.dtype == np.float32
    assert rel_err(out, reference.conv2d(x, w, b, layer)) < 1e-5


@given(conv_layers(), st.integers(0, 2**16))
def test_int8_bit_identical_to_exact_reference(layer, seed):
    x, w, b = tensors(layer, seed, "int8")
    out = engine.conv2d(x, w, b, layer.with_dtype("int8"))
    assert out.dtype == np.int32
    assert (out == reference.conv2d(x, w, b, layer)).all()


@pytest.mark.parametrize("layer", [
    ConvLayer(1, 48, 57, 57, 48, 3, 3, 1, 1, groups=48, name="wide rows"),
    ConvLayer(2, 24, 29, 31, 24, 5, 3, (2, 1), (2, 1, 0, 3), (1, 2), groups=24, name="strided"),
    ConvLayer(1, 16, 9, 70, 16, 3, 3, (1, 2), 2, (2, 2), groups=16, name="dilated"),
    ConvLayer(2, 8, 11, 40, 24, 3, 2, 1, (1, 0, 2, 1), groups=8, name="channel multiplier 3"),
])
def test_depthwise_layers_against_both_references(layer):
    """The depthwise kernel's rows (contiguous windows at stride 1, strided ones else) on
    maps wider than a vector: float32 within 1e-5 of float64, int8 exact."""
    x, w, b = tensors(layer, 11)
    assert rel_err(engine.conv2d(x, w, b, layer), reference.conv2d(x, w, b, layer)) < 1e-5
    x, w, b = tensors(layer, 12, "int8")
    out = engine.conv2d(x, w, b, layer.with_dtype("int8"))
    assert out.dtype == np.int32 and (out == reference.conv2d(x, w, b, layer)).all()


def test_int32_overflow_is_an_error_not_a_wrap():
    layer = ConvLayer(1, 16384, 3, 3, 1, 3, 3, name="big")  # 127*127*9*16384 > 2**31
    x = np.full(layer.input_shape, 127, np.int8)
    w = np.full(layer.weight_shape, 127, np.int8)
    with pytest.raises(NpusimError, match="big: int32 accumulator overflow"):
        engine.conv2d(x, w, None, layer.with_dtype("int8"))


@pytest.mark.parametrize("preset", ["systolic-2x2-ws", "input-reuse-1024", "sparse-pairs-32x32",
                                    "dilated-grid-2x2", "group-tile-32mac"])
@pytest.mark.parametrize("level", ["run", "emulate"])
def test_every_machine_names_the_layer_whose_int32_accumulator_overflows(preset, level):
    """127 x 127 x 2 channels on a bias of 2**31 - 100 passes 2**31 - 1, on every machine's
    fast model and emulator alike: one error naming the layer, not a wrapped output."""
    from npusim.arch import load_arch
    from npusim.dataflows import get

    layer = ConvLayer(1, 2, 3, 3, 2, 1, 1, name="hot").with_dtype("int8")
    x = np.full(layer.input_shape, 127, np.int8)
    w = np.full(layer.weight_shape, 127, np.int8)
    bias = np.full(2, 2**31 - 100, np.int64)
    arch = load_arch(preset)
    with pytest.raises(NpusimError, match=r"^hot: int32 accumulator overflow \(range "
                       r"2147515806\.\.2147515806\)$"):
        getattr(get(arch.dataflow), level)(layer, x, w, bias, arch)
