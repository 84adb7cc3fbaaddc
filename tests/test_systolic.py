"""The systolic baseline against SCALE-Sim 3.0.0's own per-layer numbers (ResNet-18, 32x32,
OS/WS/IS; data and regeneration command in tests/data/scalesim/, tools/scalesim_regen.sh),
and its outputs against the float64 reference and torch on random layers."""

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import conv_layers, rel_err, tensors, torch_conv

import npusim
from npusim import reference
from npusim.arch import load_arch
from npusim.dataflows.systolic import Params, Systolic, gemm_mapping, used_input_pixels
from npusim.frontends.topology import read_topology
from npusim.ir import ConvLayer
from npusim.simulate import simulate_shapes

DATA = Path(__file__).parent / "data" / "scalesim"
STATIONARY = ("os", "ws", "is")


def report(stationary: str, name: str) -> list[dict[str, float]]:
    """One of SCALE-Sim's report CSVs as rows of {column: number}."""
    with open(DATA / f"resnet18_32x32_{stationary}" / name, newline="") as f:
        rows = list(csv.reader(f))
    header = [h.strip() for h in rows[0]]
    return [{h: float(v) for h, v in zip(header, row, strict=True) if h} for row in rows[1:] if row]


def resnet18(stationary: str):
    """(ResNet-18 topology rows, npusim stats of them) on the 32x32 preset, int8 (1-byte
    words, as SCALE-Sim's word_size = 1), stall-free (SCALE-Sim's CALC bandwidth mode,
    in which this data was made)."""
    layers = read_topology(DATA / "Resnet18.csv")
    arch = load_arch(f"systolic-32x32-{stationary}").with_memory(dram_bytes_per_cycle="unlimited")
    res = simulate_shapes(layers, arch, dtype="int8")
    return layers, res.layers


@pytest.mark.parametrize("stationary", STATIONARY)
def test_compute_report_equals_scalesim_layer_by_layer(stationary):
    theirs = report(stationary, "COMPUTE_REPORT.csv")
    _, ours = resnet18(stationary)
    assert len(theirs) == len(ours) == 21
    for t, s in zip(theirs, ours, strict=True):
        assert t["Stall Cycles"] == 0                  # the stall-free count is compared
        assert s.cycles == t["Total Cycles"], s.name
        assert 100 * s.utilisation == pytest.approx(t["Overall Util %"], rel=1e-12), s.name
        assert 100 * s.mapping_efficiency == pytest.approx(t["Mapping Efficiency %"],
                                                           rel=1e-12), s.name


@pytest.mark.parametrize("stationary", STATIONARY)
def test_sram_accesses_equal_scalesim(stationary):
    """SRAM reads per operand and ofmap writes, in words; SCALE-Sim's OS ofmap count adds
    rows + cols per fold (the padded fold's edges, not writes)."""
    theirs = report(stationary, "DETAILED_ACCESS_REPORT.csv")
    layers, ours = resnet18(stationary)
    p = load_arch(f"systolic-32x32-{stationary}").params("systolic")
    for t, s, layer in zip(theirs, ours, layers, strict=True):
        assert s.sram_ifmap_bytes == t["SRAM IFMAP Reads"], s.name
        assert s.sram_filter_bytes == t["SRAM Filter Reads"], s.name
        edges = gemm_mapping(layer, p).folds * (p.rows + p.cols) if stationary == "os" else 0
        assert s.sram_ofmap_bytes + edges == t["SRAM OFMAP Writes"], s.name


# SCALE-Sim's read buffer holds 100 sets of floor(64 KiB / 100) addresses, half of them active
SCALESIM_ACTIVE_WORDS = 50 * (64 * 1024 // 100)


@pytest.mark.parametrize("stationary", STATIONARY)
def test_dram_reads_where_the_models_match(stationary):
    """An operand that fits SCALE-Sim's active buffer crosses DRAM once: its used words."""
    theirs = report(stationary, "DETAILED_ACCESS_REPORT.csv")
    layers, ours = resnet18(stationary)
    checked = 0
    for t, s, layer in zip(theirs, ours, layers, strict=True):
        ifmap = layer.C * used_input_pixels(layer)
        filt = layer.K * layer.Cg * layer.R * layer.S
        if ifmap <= SCALESIM_ACTIVE_WORDS:
            assert s.dram_ifmap_bytes == ifmap == t["DRAM IFMAP Reads"], s.name
            checked += 1
        if filt <= SCALESIM_ACTIVE_WORDS:
            assert s.dram_filter_bytes == filt == t["DRAM Filter Reads"], s.name
            checked += 1
    assert checked == 8  # Conv1, Conv3_s filters; Conv4_s, Conv5_* and FC ifmaps


@pytest.mark.parametrize("stationary", STATIONARY)
def test_dram_totals_within_a_quarter_of_scalesim(stationary):
    """Where the models differ (operands refetched), npusim's pass counts and SCALE-Sim's
    trace-driven buffer agree on the network's DRAM reads to within 25 %."""
    theirs = report(stationary, "DETAILED_ACCESS_REPORT.csv")
    _, ours = resnet18(stationary)
    for ours_field, their_field in (("dram_ifmap_bytes", "DRAM IFMAP Reads"),
                                    ("dram_filter_bytes", "DRAM Filter Reads")):
        a = sum(getattr(s, ours_field) for s in ours)
        b = sum(t[their_field] for t in theirs)
        assert 0.75 < a / b < 1.25, (their_field, a, b)


@pytest.mark.parametrize("stationary", STATIONARY)
def test_ofmap_dram_writes(stationary):
    """SCALE-Sim drains every ofmap SRAM write to DRAM (WS/IS: each reduction fold's partial
    sums), plus at most one write line of padding; npusim writes each output once while a
    column fold's partial sums (4-byte accumulators) fit the active half of the ofmap SRAM.
    Where they do not, every reduction fold but the last spills them and every one but
    the first reads them back (SCALE-Sim writes them at word size and never reads back)."""
    theirs = report(stationary, "DETAILED_ACCESS_REPORT.csv")
    layers, ours = resnet18(stationary)
    arch = load_arch(f"systolic-32x32-{stationary}")
    p, half = arch.params("systolic"), arch.memory.ofmap_sram_kb * 512
    spilled = 0
    for t, s, layer in zip(theirs, ours, layers, strict=True):
        m = gemm_mapping(layer, p)
        out = layer.K * layer.P * layer.Q  # int8: one byte per output
        passes = 1 if stationary == "os" else m.row_folds
        psum = 4 * layer.P * layer.Q * min(p.cols, layer.K) if stationary == "ws" else \
            4 * layer.K * min(p.cols, layer.P * layer.Q)
        if stationary == "os" or psum <= half:
            assert s.dram_ofmap_bytes == out, s.name
            assert 0 <= t["DRAM OFMAP Writes"] - out * passes < p.cols, s.name
        else:
            per_fold = 4 * layer.P * layer.Q * layer.K  # all column folds' partial sums
            assert s.dram_ofmap_bytes == out + 2 * (passes - 1) * per_fold, s.name
            spilled += 1
    # WS: outputs of more than 256 pixels (Conv1, Conv2_*, Conv3_*); IS: 512 filters (Conv5_*)
    assert spilled == {"os": 0, "ws": 10, "is": 5}[stationary]


def _array(stationary: str, side: int):
    """The 32x32 preset of ``stationary`` with a ``side`` x ``side`` array."""
    base = load_arch(f"systolic-32x32-{stationary}")
    sections = {**base.sections, "systolic": dataclasses.replace(
        base.params("systolic"), rows=side, cols=side)}
    return dataclasses.replace(base, sections=sections)


@pytest.mark.parametrize("side", [2, 5, 24, 32, 48])
@pytest.mark.parametrize("x_shape, k", [((1, 40, 8, 8), 16), ((2, 3, 3, 8), 2),
                                        ((1, 48, 7, 7), 64)])
def test_ws_reads_an_input_that_fits_once_whatever_the_rows(side, x_shape, k):
    """An input that fits the ifmap buffer crosses DRAM once (every pixel of these layers
    is read by some window: the tensor's own bytes), on the fast model and the emulator,
    also where the array's rows do not divide the reduction terms. The row folds' channel
    sets then overlap and each set was held whole: 2-9x the input on the preset, 99-198x
    on ResNet-18's layer4_0_conv2 at 24 and 48 rows."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((k, x_shape[1], 3, 3)).astype(np.float32)
    assert x.nbytes <= 32 * 1024  # the active half of the preset's 64 KiB ifmap SRAM
    for emulate in (False, True):
        _, st = npusim.conv2d(x, w, padding=1, arch=_array("ws", side), emulate=emulate,
                              emulate_limit=None)
        assert st.dram_ifmap_bytes == x.nbytes, (side, emulate)


@pytest.mark.parametrize("side", [16, 24, 32, 48])
def test_resnet18_s_last_stage_input_crosses_dram_once_on_any_ws_array(side):
    """layer4_0_conv2's int8 input, 512 x 7 x 7 = 25,088 bytes, fits the 32 KiB active
    half: read once however many rows the array has (it read 198x at 24 rows and 99x at
    48, which made the layer DRAM-bound there)."""
    from npusim.frontends import zoo

    layer = zoo.build("resnet18").layers["layer4_0_conv2"]
    st = simulate_shapes([layer], _array("ws", side), dtype="int8").layers[0]
    assert st.dram_ifmap_bytes == 512 * 7 * 7 and st.bound == "compute"


def test_stats_are_additive_and_scale_with_dtype():
    layers = read_topology(DATA / "Resnet18.csv")
    arch = load_arch("systolic-32x32-ws").with_memory(dram_bytes_per_cycle="unlimited")
    f32 = simulate_shapes(layers, arch)
    i8 = simulate_shapes(layers, arch, dtype="int8")
    assert f32.output is None and f32.total.cycles == sum(s.cycles for s in f32.layers)
    assert f32.total.mapped_pe_cycles == pytest.approx(sum(s.mapped_pe_cycles
                                                           for s in f32.layers))
    assert [s.cycles for s in f32.layers] == [s.cycles for s in i8.layers]
    assert f32.total.sram_bytes == 4 * i8.total.sram_bytes


def test_simulate_shapes_rejects_a_bad_dtype():
    with pytest.raises(npusim.NpusimError, match=r"dtype='int4': must be one of float32, int8"):
        simulate_shapes([ConvLayer(1, 3, 8, 8, 4, 3, 3)], dtype="int4")


def test_groups_fold_per_group():
    """A grouped conv costs its groups' GEMMs one after another (stall-free)."""
    arch = load_arch("systolic-32x32-os").with_memory(dram_bytes_per_cycle="unlimited")
    dw = ConvLayer(1, 64, 14, 14, 64, 3, 3, padding=1, groups=64)
    one = ConvLayer(1, 1, 14, 14, 1, 3, 3, padding=1)
    s_dw, s_one = Systolic().stats(dw, arch), Systolic().stats(one, arch)
    assert s_dw.cycles + 1 == 64 * (s_one.cycles + 1)
    assert s_dw.extra["folds"] == 64 * s_one.extra["folds"]


@pytest.mark.parametrize("stationary, layer", [
    ("os", ConvLayer(1, 100, 20000, 20000, 100, 1, 1)),
    ("ws", ConvLayer(1, 100, 20000, 20000, 100, 1, 1)),
    ("is", ConvLayer(1, 64, 3000, 3000, 64, 3, 3, padding=1))])
def test_a_large_layer_s_fold_bytes_are_its_exact_shares(stationary, layer):
    """Inputs of 160 GB and 2.3 GB, whose shares per fold were once products of the bytes and
    running counts of billions in int64, wrapped round (negative bytes, or 30 % too few
    without a word). On a 1024 x 1024 array every column (and, WS, row) fits one fold, so
    the folds' input bytes add up to the input once; each of the first folds' is its span's
    exact share (Fractions) within the rounding."""
    from fractions import Fraction

    from npusim.dataflows.systolic import fold_steps

    m = gemm_mapping(layer, Params(1024, 1024, stationary))
    got = fold_steps(layer, m, 4).ifmap_bytes
    total = layer.C * used_input_pixels(layer) * 4
    assert got.min() >= 0 and int(got.sum()) == total
    if stationary != "ws":  # OS: a row fold of pixels; IS: a fold of columns x reduction
        units = min(m.rows, m.a) * (1 if stationary == "os" else m.cols)
        share = Fraction(total * units, layer.P * layer.Q * (1 if stationary == "os"
                                                             else m.a))
        assert all(abs(int(b) - share) <= 1 for b in got[:3])


def test_a_one_pe_output_stationary_array_is_fully_used_not_more():
    """1x1, OS: one MAC a cycle, no fill or drain, so the array is busy for exactly the
    layer's MACs; SCALE-Sim's count (the last busy cycle's index) is one fewer, and the
    utilisation is 1, not MACs over that count."""
    arch = load_arch("systolic-32x32-os").with_memory(dram_bytes_per_cycle="unlimited")
    arch = dataclasses.replace(arch, sections={"systolic": Params(1, 1, "os")})
    layer = ConvLayer(1, 4, 6, 6, 2, 3, 3)
    s = Systolic().stats(layer, arch)
    assert s.macs == 2 * 4 * 4 * 4 * 9 and s.cycles == s.macs - 1
    assert s.utilisation == 1.0 and s.mapping_efficiency == 1.0


@given(conv_layers(max_hw=11, max_c=8, max_k=8, max_n=3), st.sampled_from(["float32", "int8"]),
       st.integers(0, 99))
def test_conv2d_systolic_equals_reference_and_torch(layer, dtype, seed):
    x, w, b = tensors(layer, seed, dtype)
    out, stats = npusim.conv2d(x, w, b, layer.stride, layer.padding, layer.dilation,
                               layer.groups, dataflow="systolic", dtype=dtype)
    ref = reference.conv2d(x, w, b, layer)
    tref = torch_conv(layer, x, w, b)
    assert out.shape == layer.output_shape
    if dtype == "int8":
        assert out.dtype == np.int32
        assert np.array_equal(out, ref) and np.array_equal(out, tref)
    else:
        assert rel_err(out, ref) < 1e-5 and rel_err(out, tref) < 1e-5
    assert stats.macs == layer.macs and stats.cycles > 0
