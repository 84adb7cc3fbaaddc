"""The area model: each machine's inventory priced by hand from the cited 45 nm table."""

import json

import numpy as np
import pytest

import npusim
from npusim.arch.spec import arch_from_toml_text
from npusim.area import area_of
from npusim.errors import ConfigError

MAC8, MAC32, KIB, FF, MUX = 282 + 137, 7700 + 4184, 8192 * 0.346 / 0.5, 4.522, 1.862


def mm2(um2: float) -> float:
    return um2 / 1e6


def test_systolic_area_by_hand():
    a = area_of(npusim.load_arch("systolic-32x32-ws"), dtype="int8")
    assert a.macs_mm2 == pytest.approx(mm2(1024 * MAC8))
    assert a.registers_mm2 == pytest.approx(mm2(1024 * (8 + 8 + 32) * FF))
    assert a.sram_mm2 == pytest.approx(mm2(3 * 64 * KIB), rel=1e-4)
    assert a.interconnect_mm2 == 0
    f = area_of(npusim.load_arch("systolic-32x32-ws"), dtype="float32")
    assert f.macs_mm2 == pytest.approx(mm2(1024 * MAC32))
    assert f.registers_mm2 == pytest.approx(mm2(1024 * (32 + 32 + 32) * FF))


def test_input_reuse_area_counts_first_and_second_buffers_and_bus():
    arch = arch_from_toml_text('dataflow = "input-reuse"\n[input-reuse]\noperation_units = 4\n'
                               'processing_units = 2\nregion_rows = 3\nregion_cols = 5\n'
                               'first_buffer_kb = 8\nbus_width = 16\naccumulators = 40\n'
                               'mux_fan_in = 6\noutput_units = 3\nsecond_buffer_kb = 5\n',
                               "t.toml")
    a = area_of(arch, dtype="int8")
    assert a.macs_mm2 == pytest.approx(mm2(4 * 2 * 15 * MAC8))
    assert a.registers_mm2 == pytest.approx(mm2((4 * 15 * 8 + 4 * 2 * 40 * 32) * FF))
    assert a.sram_mm2 == pytest.approx(mm2((3 * 64 + 4 * 8 + 3 * 5) * KIB), rel=1e-4)
    assert a.interconnect_mm2 == pytest.approx(mm2((4 * 2 * 15 * 5 * 8 + 3 * 16 * 32) * MUX))


@pytest.mark.parametrize("interconnect, ports", [("bus", 1), ("full", 3), ("chain", 1)])
def test_input_reuse_interconnect_has_a_port_per_server(interconnect, ports):
    """The bus is one 4-input multiplexer per bit of its 16 pixels; ``full`` gives each of
    the 3 output units a port of its own (3 of them); a chain's 3 links are a 2-input
    multiplexer each (own pixels or passed on), as many as one 4-input port's."""
    arch = arch_from_toml_text('dataflow = "input-reuse"\n[input-reuse]\noperation_units = 4\n'
                               'processing_units = 2\nregion_rows = 3\nregion_cols = 5\n'
                               'bus_width = 16\nmux_fan_in = 6\noutput_units = 3\n'
                               f'interconnect = "{interconnect}"\n', "t.toml")
    a = area_of(arch, dtype="int8")
    assert a.interconnect_mm2 == pytest.approx(
        mm2((4 * 2 * 15 * 5 * 8 + ports * 3 * 16 * 32) * MUX))


def test_dilated_grid_area_counts_the_shifter_links():
    arch = npusim.load_arch("dilated-grid-2x2-h3")
    p = arch.params("dilated-grid")
    a = area_of(arch, dtype="int8")
    assert p.double_buffer  # a shadow grid and coefficient storage beside the ones in use
    grid, coefs = 2 * p.grid_rows * p.grid_cols * 8, 2 * p.coef_rows * p.coef_cols * 8
    assert a.registers_mm2 == pytest.approx(mm2((grid + coefs + p.macs * 32) * FF))
    assert a.interconnect_mm2 == pytest.approx(mm2(p.links * 8 * MUX))
    assert a.interconnect_mm2 > 0
    single = arch_from_toml_text('dataflow = "dilated-grid"\n[dilated-grid]\n'
                                 'double_buffer = false\n', "t.toml")
    q = single.params("dilated-grid")
    assert area_of(single, dtype="int8").registers_mm2 == pytest.approx(
        mm2(((q.grid_rows * q.grid_cols + q.coef_rows * q.coef_cols) * 8 + q.macs * 32) * FF))


def test_sparse_pairs_area_counts_each_processors_operands_accumulator_and_kernel_store():
    """Per processor: a multiplier, a feature and a weight register of the data type, a
    32-bit accumulator and a kernel store of 300 bytes (docs/area.md); 6 groups x 5
    processors."""
    arch = arch_from_toml_text('dataflow = "sparse-pairs"\n[sparse-pairs]\n'
                               'processor_groups = 6\nprocessors_per_group = 5\n'
                               'kernel_store_bytes = 300\n', "t.toml")
    for dtype, mac, bits in (("int8", MAC8, 8), ("float32", MAC32, 32)):
        a = area_of(arch, dtype=dtype)
        assert a.macs_mm2 == pytest.approx(mm2(30 * mac))
        assert a.registers_mm2 == pytest.approx(mm2(30 * (bits + bits + 32) * FF))
        assert a.sram_mm2 == pytest.approx(mm2((3 * 64 + 30 * 300 / 1024) * KIB), rel=1e-4)


def test_sparse_pairs_preset_prices_its_two_mib_of_kernel_stores():
    """The preset's 1,024 processors hold 2,048 bytes each: 2 MiB of SRAM beside the three
    64 KiB ones, more area than a systolic array of as many multipliers."""
    a = area_of(npusim.load_arch("sparse-pairs-32x32"), dtype="int8")
    assert a.sram_mm2 == pytest.approx(mm2((3 * 64 + 2048) * KIB), rel=1e-4)
    assert a.total_mm2 > 7 * area_of(npusim.load_arch("systolic-32x32-ws"), dtype="int8").total_mm2


def test_group_tile_area_counts_each_tiles_memories():
    arch = arch_from_toml_text('dataflow = "group-tile"\n[group-tile]\ntiles = 3\nnarrow_kb = 8\n'
                               'wide_kb = 16\n', "t.toml")
    a = area_of(arch, dtype="int8")
    assert a.sram_mm2 == pytest.approx(mm2((3 * (8 + 16) + 64) * KIB), rel=1e-4)
    assert a.macs_mm2 == pytest.approx(mm2(3 * 64 * MAC8))
    # per MAC cell a weight, a sum and a shift register (624); per tile one bus lane
    assert a.registers_mm2 == pytest.approx(mm2((3 * 64 * (8 + 32 + 32) + 3 * 8) * FF))


@pytest.mark.parametrize("preset", npusim.presets())
def test_every_preset_has_an_area_that_grows_with_its_sram(preset):
    arch = npusim.load_arch(preset)
    a = area_of(arch)
    bigger = area_of(arch.with_memory(ofmap_sram_kb=arch.memory.ofmap_sram_kb + 100))
    assert a.total_mm2 > 0
    assert bigger.sram_mm2 - a.sram_mm2 == pytest.approx(mm2(100 * KIB), rel=1e-4)
    assert bigger.macs_mm2 == a.macs_mm2


def test_area_table_is_an_arch_section_with_bounds():
    arch = arch_from_toml_text("[area]\nmac_int8_um2 = 100.0\n", "t.toml")
    assert area_of(arch).macs_mm2 == pytest.approx(mm2(1024 * 100.0))
    with pytest.raises(ConfigError, match="area.sram_kib_um2"):
        arch_from_toml_text("[area]\nsram_kib_um2 = -1.0\n", "t.toml")
    with pytest.raises(ConfigError, match="colour"):
        arch_from_toml_text("[area]\ncolour = 1\n", "t.toml")


def test_run_reports_area_in_table_and_json(tmp_path):
    from npusim.cli import main

    out = tmp_path / "r.json"
    assert main(["run", "lenet-digits", "--arch", "sparse-pairs-32x32", "--json", str(out)]) == 0
    totals = json.loads(out.read_text())["totals"]
    expected = area_of(npusim.load_arch("sparse-pairs-32x32"), "sparse-pairs", "float32")
    assert totals["area_mm2"] == pytest.approx(expected.total_mm2)
    assert totals["area_sram_mm2"] == pytest.approx(expected.sram_mm2)
    assert np.isclose(sum(totals[k] for k in ("area_macs_mm2", "area_registers_mm2",
                                             "area_sram_mm2", "area_interconnect_mm2")),
                      totals["area_mm2"])


def test_hybrid_area_is_its_members_behind_one_memory():
    arch = npusim.load_arch("hybrid-3x1024")
    members = arch.params("hybrid").machines
    alone = [area_of(arch, m) for m in members]
    hybrid = area_of(arch)
    assert hybrid.macs_mm2 == pytest.approx(sum(a.macs_mm2 for a in alone))
    assert hybrid.registers_mm2 == pytest.approx(sum(a.registers_mm2 for a in alone))
    gt = arch.params("group-tile")  # the one member that may have memories of its own
    assert gt.narrow_kb == gt.wide_kb == 0  # here its tiles' shares of the shared SRAMs
    shared = arch.memory.ifmap_sram_kb + arch.memory.filter_sram_kb + arch.memory.ofmap_sram_kb
    sp = arch.params("sparse-pairs")
    stores = sp.processors * sp.kernel_store_bytes / 1024  # sparse-pairs' own
    assert hybrid.sram_mm2 == pytest.approx(mm2((shared + stores) * KIB), rel=1e-4)  # once
    from npusim.arch.spec import PRESET_DIR

    text = (PRESET_DIR / "hybrid-3x1024.toml").read_text()
    sized = arch_from_toml_text(text.replace("[group-tile]\n", "[group-tile]\nnarrow_kb = 2\n"),
                                "h.toml")
    own = sized.params("group-tile").tiles * 2  # narrow memories of its own, beside the shared
    assert area_of(sized).sram_mm2 == pytest.approx(mm2((shared + stores + own) * KIB),
                                                    rel=1e-4)
