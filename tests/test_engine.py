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


@given(conv_layers(max_hw=12), st.integers(1, 5), st.integers(0, 2**16))
def test_patches_a_band_of_rows_at_a_time_against_both_references(layer, rows, seed):
    """With the band thresholds at their lowest, every layer with patches to copy goes a band
    of ``rows`` output rows at a time (the last band shorter when ``rows`` does not divide
    P; batches and conv groups in one buffer): float32 within 1e-5 of float64, int8 exact."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "BAND_FROM", 0)
        mp.setattr(engine, "BAND_BYTES", rows * layer.groups * layer.Cg * layer.R * layer.S
                   * layer.Q * 4)
        if layer.Cg > 1 and not engine._unit_kernel(layer):
            assert engine.band_rows(layer, 4) == min(rows, layer.P)
        x, w, b = tensors(layer, seed)
        assert rel_err(engine.conv2d(x, w, b, layer), reference.conv2d(x, w, b, layer)) < 1e-5
        x, w, b = tensors(layer, seed, "int8")
        out = engine.conv2d(x, w, b, layer.with_dtype("int8"))
        assert out.dtype == np.int32 and (out == reference.conv2d(x, w, b, layer)).all()


@pytest.mark.parametrize("banded", [False, True])
def test_int8_sums_past_2_to_24_stay_exact(banded):
    """Operands near the int8 extremes (126 and 127 x -128, 127): each of 2,304 products is
    about 2**14, so the sums pass 2**24, where float32 no longer holds every whole number (a
    single float32 GEMM of them rounds); the engine's runs of ``EXACT_TERMS`` terms, added in
    float64, give the exact sums, at once and a band of rows at a time."""
    layer = ConvLayer(1, 256, 6, 7, 5, 3, 3, 1, 1, bias=True, dtype="int8")
    rng = np.random.default_rng(3)
    x = rng.choice(np.array([126, 127], np.int8), layer.input_shape)
    w = rng.choice(np.array([-128, 127], np.int8), layer.weight_shape)
    w[0] = 127  # kernel 0: every product 126 or 127 x 127, its sums near 2**25
    b = rng.integers(-2**20, 2**20, layer.K).astype(np.int32)
    ref = reference.conv2d(x, w, b, layer)
    assert np.abs(ref).max() > 2**24 and layer.Cg * layer.R * layer.S > engine.EXACT_TERMS
    with pytest.MonkeyPatch.context() as mp:
        if banded:
            mp.setattr(engine, "BAND_FROM", 0)
            mp.setattr(engine, "BAND_BYTES", 2 * layer.Cg * layer.R * layer.S * layer.Q * 4)
            assert engine.band_rows(layer, 4) == 2
        out = engine.conv2d(x, w, b, layer)
    assert out.dtype == np.int32 and np.array_equal(out, ref)
    cols = engine.im2col(x.astype(np.float32), layer)[0]
    one_gemm = np.matmul(w.astype(np.float32).reshape(1, layer.K, -1), cols)
    assert not np.array_equal(one_gemm.reshape(ref.shape).astype(np.int64) + b[:, None, None],
                              ref)  # what the runs avoid


def test_large_patches_of_few_kernels_go_in_bands_and_many_kernels_at_once():
    """VGG-16's conv1_2 (115 MB of float32 patches, 64 kernels) goes about 1 MB of patches a
    band; its conv5 (512 kernels), a 1x1 layer (no patches to copy) and a small layer go all
    at once."""
    conv1_2 = ConvLayer(1, 64, 224, 224, 64, 3, 3, 1, 1)
    rows = engine.band_rows(conv1_2, 4)
    assert rows < conv1_2.P and rows * 64 * 9 * 224 * 4 <= engine.BAND_BYTES
    assert engine.band_rows(ConvLayer(1, 512, 28, 28, 512, 3, 3, 1, 1), 4) == 28
    assert engine.band_rows(ConvLayer(1, 64, 224, 224, 64, 1, 1), 4) == 224
    assert engine.band_rows(ConvLayer(1, 64, 14, 14, 64, 3, 3, 1, 1), 4) == 14


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


def _tap_order_sums(x, w, layer, taps):
    """numpy's float32 depthwise sums, tap by tap in the order ``taps``: each window times its
    weight rounded to float32, then added to the float32 sums (numpy never fuses the two)."""
    xp = reference.pad_input(x, layer)
    wk = w.reshape(layer.K, layer.R, layer.S)
    channel = np.arange(layer.K) // layer.Kg
    out = np.zeros(layer.output_shape, np.float32)
    for r, s in taps:
        window = reference.tap_window(xp, layer, r, s)[:, channel]
        with np.errstate(invalid="ignore"):  # inf x 0, inf - inf: NaN, as in the engine
            out += window * wk[:, r, s].reshape(1, -1, 1, 1)
    return out


def _depthwise_layer(rng) -> ConvLayer:
    """A random valid depthwise layer: maps from 1 to 130 pixels wide, strides and dilations
    1-3, asymmetric pads, channel multipliers 1-3, batches of 1-2."""
    kg, c = int(rng.integers(1, 4)), int(rng.integers(1, 7))
    r, s = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    dh, dw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    pad = tuple(int(v) for v in rng.integers(0, 3, 4))
    h = max(1, dh * (r - 1) + 1 - pad[0] - pad[1]) + int(rng.integers(0, 40))
    width = max(1, dw * (s - 1) + 1 - pad[2] - pad[3]) + int(rng.integers(0, 130))
    stride = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    return ConvLayer(int(rng.integers(1, 3)), c, h, width, c * kg, r, s, stride, pad, (dh, dw),
                     groups=c)


def test_depthwise_float32_bit_identical_to_numpy_in_any_tap_order():
    """The engine's depthwise sums (wide rows of stride phases, in vector registers) are
    numpy's product-then-sum, bit for bit, in a shuffled tap order, on 150 random layers
    whose inputs hold NaN, infinities, -0 and subnormals: every output at its place."""
    rng = np.random.default_rng(2026)
    for _ in range(150):
        layer = _depthwise_layer(rng)
        x, w, _ = tensors(layer, int(rng.integers(2**31)))
        specials = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40], np.float32)
        flat = x.reshape(-1)
        at = rng.integers(0, flat.size, max(1, flat.size // 50))
        flat[at] = specials[rng.integers(0, specials.size, at.size)]
        taps = [(r, s) for r in range(layer.R) for s in range(layer.S)]
        taps = [taps[i] for i in rng.permutation(len(taps))]
        out = engine.depthwise(x, w, layer, np.float32, taps)
        ref = _tap_order_sums(x, w, layer, taps)
        same = (out.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(out) & np.isnan(ref))
        assert same.all(), layer


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
