"""Energy recomputed independently of ``stats.energy_pj``, on every preset and every machine.

docs/energy.md states the formula over a layer's documented fields:

    energy = products x (pJ per MAC of the dtype) + (sram_ifmap + sram_filter + sram_ofmap bytes)
             x pJ/SRAM byte + (dram_ifmap + dram_filter + dram_ofmap bytes) x pJ/DRAM byte
             + vector_ops x pJ/vector op

Here the table is rebuilt from Horowitz's ISSCC 2014 45 nm figures (written below, not read
from the presets) and the sum is done in exact rational arithmetic, so the only tolerance is
the rounding of the float64 result (one SRAM byte more is 2.5 pJ, far above it).
"""

import math
import zlib
from fractions import Fraction as F

import numpy as np
import pytest

import npusim
from npusim import GraphBuilder
from npusim.arch import load_arch

# M. Horowitz, "Computing's energy problem (and what we can do about it)", ISSCC 2014, 45 nm.
INT8_MUL, INT8_ADD = F("0.2"), F("0.03")  # pJ
FP32_MUL, FP32_ADD = F("3.7"), F("0.9")  # pJ
SRAM_64BIT_32KB = F(20)  # pJ per 64-bit read of a 32 KB SRAM
DRAM_64BIT = F(1300)  # pJ per 64-bit DRAM access (the low end of 1.3-2.6 nJ)
HOROWITZ = {"mac_int8": INT8_MUL + INT8_ADD, "mac_fp32": FP32_MUL + FP32_ADD,
            "sram_byte": SRAM_64BIT_32KB / 8, "dram_byte": DRAM_64BIT / 8, "vector_op": FP32_ADD}

PRESETS = npusim.presets()
# Small real layers (kwargs of conv2d with x, w shapes), each machine takes all of them.
LAYERS = {
    "3x3-pad": ((1, 4, 6, 6), (6, 4, 3, 3), dict(padding=1)),
    "depthwise-s2": ((1, 8, 7, 7), (8, 1, 3, 3), dict(stride=2, padding=1, groups=8)),
    "dilated": ((1, 3, 9, 9), (4, 3, 3, 3), dict(padding=2, dilation=2)),
    "1x1": ((1, 16, 4, 4), (8, 16, 1, 1), {}),
    "grouped-2x3-n2": ((2, 6, 5, 7), (4, 3, 2, 3), dict(groups=2)),
}


def expected_pj(st, dtype: str, table=HOROWITZ) -> F:
    """The documented formula over ``st``'s fields, exact."""
    mac = table["mac_int8"] if dtype == "int8" else table["mac_fp32"]
    sram = st.sram_ifmap_bytes + st.sram_filter_bytes + st.sram_ofmap_bytes
    dram = st.dram_ifmap_bytes + st.dram_filter_bytes + st.dram_ofmap_bytes
    return (F(st.products) * mac + F(sram) * table["sram_byte"] + F(dram) * table["dram_byte"]
            + F(st.vector_ops) * table["vector_op"])


def assert_energy(st, dtype: str, table=HOROWITZ) -> None:
    want = float(expected_pj(st, dtype, table))
    assert math.isclose(st.energy_pj, want, rel_tol=1e-12), (st.name, st.energy_pj, want)


def _sparse(rng, shape, density):
    a = rng.standard_normal(shape).astype(np.float32)
    return np.where(rng.random(shape) < density, a, 0).astype(np.float32)


def test_the_presets_carry_horowitz_numbers():
    for name in PRESETS:
        e = load_arch(name).energy
        got = (e.mac_int8_pj, e.mac_fp32_pj, e.sram_byte_pj, e.dram_byte_pj, e.vector_op_pj)
        assert got == tuple(float(HOROWITZ[k]) for k in
                            ("mac_int8", "mac_fp32", "sram_byte", "dram_byte", "vector_op"))


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("preset", PRESETS)
def test_conv2d_energy_is_the_documented_formula(preset, layer, dtype):
    arch = load_arch(preset)
    xs, ws, kw = LAYERS[layer]
    rng = np.random.default_rng(zlib.crc32(f"{preset}/{layer}".encode()))
    x, w = _sparse(rng, xs, 0.6), _sparse(rng, ws, 0.5)
    _, st = npusim.conv2d(x, w, dataflow=arch.dataflow, arch=arch, dtype=dtype, **kw)
    assert st.products >= st.macs > 0 and st.sram_bytes > 0 and st.dram_bytes > 0
    assert_energy(st, dtype)


@pytest.mark.parametrize("preset", ["systolic-2x2-ws", "input-reuse-1024", "sparse-pairs-32x32",
                                    "group-tile-32mac", "dilated-grid-2x2"])
def test_emulator_energy_is_the_documented_formula(preset):
    arch = load_arch(preset)
    rng = np.random.default_rng(3)
    x, w = _sparse(rng, (1, 3, 6, 6), 0.6), _sparse(rng, (4, 3, 3, 3), 0.5)
    _, st = npusim.conv2d(x, w, dataflow=arch.dataflow, arch=arch, padding=1, emulate=True)
    assert_energy(st, "float32")


def _network():
    rng = np.random.default_rng(11)
    g = GraphBuilder("tiny", (1, 3, 10, 10))
    h = g.relu(g.conv(g.input, _sparse(rng, (8, 3, 3, 3), 0.6), rng.standard_normal(8),
                      padding=1))
    h = g.maxpool(h, 2, 2)
    r = g.conv(h, _sparse(rng, (8, 1, 3, 3), 0.7), padding=1, groups=8)
    h = g.add(g.relu(r), h)
    h = g.flatten(g.globalavgpool(h))
    g.linear(h, rng.standard_normal((5, 8)))
    return g.build()


@pytest.mark.parametrize("mode, dtype", [("run", "float32"), ("estimate", "int8")])
@pytest.mark.parametrize("preset", PRESETS)
def test_simulate_energy_of_every_layer_and_the_total(preset, mode, dtype):
    x = np.maximum(np.random.default_rng(2).standard_normal((1, 3, 10, 10)), 0)
    res = npusim.simulate(_network(), x, preset, mode=mode, dtype=dtype)
    vector = [s for s in res.layers if s.dataflow == "vector"]
    assert len(res.conv_layers) == 3 and any(s.vector_ops for s in vector)
    for st in res.layers:
        assert_energy(st, dtype)
    want = sum(expected_pj(st, dtype) for st in res.layers)
    assert math.isclose(res.total.energy_pj, float(want), rel_tol=1e-12)


CUSTOM = {"mac_int8": F("0.11"), "mac_fp32": F("1.7"), "sram_byte": F("0.75"),
          "dram_byte": F("40"), "vector_op": F("0.05")}


@pytest.mark.parametrize("dataflow", ["sparse-pairs", "input-reuse"])
def test_a_custom_energy_table_in_an_arch_toml_is_what_is_charged(tmp_path, dataflow):
    toml = tmp_path / "custom.toml"
    toml.write_text(f'name = "custom"\ndataflow = "{dataflow}"\n\n[memory]\n'
                    "ifmap_sram_kb = 1\nfilter_sram_kb = 1\nofmap_sram_kb = 1\n\n[energy]\n"
                    + "".join(f"{k}_pj = {v}\n" for k, v in
                              (("mac_int8", "0.11"), ("mac_fp32", "1.7"),
                               ("sram_byte", "0.75"), ("dram_byte", "40.0"),
                               ("vector_op", "0.05"))))
    x = np.maximum(np.random.default_rng(4).standard_normal((1, 3, 10, 10)), 0)
    res = npusim.simulate(_network(), x, str(toml), dtype="int8")
    for st in res.layers:
        assert_energy(st, "int8", CUSTOM)
    assert res.total.energy_pj != pytest.approx(float(sum(expected_pj(s, "int8")
                                                          for s in res.layers)))
