"""The arch TOML loader: presets, defaults, and every kind of bad file with its message pinned."""

import re

import pytest

from npusim import ConfigError, load_arch, presets
from npusim.arch import Arch, Memory
from npusim.dataflows import names as dataflow_names

FULL = """
name = "my-npu"
description = "a 16x8 output-stationary array"
dataflow = "systolic"
clock_mhz = 700

[memory]
ifmap_sram_kb = 128
filter_sram_kb = 32
ofmap_sram_kb = 16
dram_bytes_per_cycle = 4

[vector]
lanes = 64

[energy]
mac_fp32_pj = 3.0

[systolic]
rows = 16
cols = 8
stationary = "os"
"""


def write(tmp_path, text: str, name: str = "npu.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_preset_loads_and_names_itself():
    assert presets(), "no built-in presets"
    for name in presets():
        arch = load_arch(name)
        assert arch.name == name
        assert arch.dataflow in [*dataflow_names(), "hybrid"]
        assert arch.description
        assert "Horowitz" in arch.energy.source


@pytest.mark.parametrize("stationary", ["os", "ws", "is"])
def test_systolic_presets_are_scalesim_default_config(stationary):
    """SCALE-Sim's scale.cfg: 32 x 32 array, 64 KiB per SRAM; DRAM one LPDDR4X-4266 x32
    channel (17.064 GB/s at 1 GHz), as every preset."""
    arch = load_arch(f"systolic-32x32-{stationary}")
    p = arch.params("systolic")
    assert (p.rows, p.cols, p.stationary) == (32, 32, stationary)
    assert arch.memory == Memory(64, 64, 64, 17.064)


def test_every_preset_has_the_same_memory():
    """Fair charging: every machine meets the same buffers and DRAM channel."""
    memories = {load_arch(name).memory for name in presets()}
    assert memories == {Memory(64, 64, 64, 4266 * 4 / 1000)}


def test_default_arch_is_a_preset():
    assert load_arch(None).name in presets()


def test_file_values_take_effect_and_missing_keys_default(tmp_path):
    arch = load_arch(write(tmp_path, FULL))
    assert (arch.name, arch.clock_mhz, arch.vector.lanes) == ("my-npu", 700.0, 64)
    assert arch.memory == Memory(128, 32, 16, 4.0)
    assert arch.params("systolic").rows == 16 and arch.params("systolic").stationary == "os"
    assert arch.energy.mac_fp32_pj == 3.0
    assert arch.energy.mac_int8_pj == Arch().energy.mac_int8_pj  # not in the file: default
    assert arch.seconds(700) == pytest.approx(1e-6)  # 700 cycles at 700 MHz


def test_a_file_saved_with_a_byte_order_mark_reads_as_without(tmp_path):
    # Windows editors save UTF-8 with a BOM, which TOML's grammar does not allow
    plain = load_arch(write(tmp_path, FULL))
    marked = tmp_path / "marked.toml"
    marked.write_bytes(b"\xef\xbb\xbf" + FULL.encode())
    assert load_arch(marked) == plain


def test_load_arch_accepts_a_path_string_and_an_arch(tmp_path):
    path = write(tmp_path, FULL)
    arch = load_arch(str(path))
    assert load_arch(arch) is arch
    assert arch.params("systolic").cols == 8


def test_an_empty_file_is_the_default_machine(tmp_path):
    arch = load_arch(write(tmp_path, ""))
    assert arch.memory == Memory() and arch.dataflow == "systolic"


# ---- bad files: one case per kind of mistake, the message pinned -------------------------------

BAD = [
    ("malformed", 'name = "x"\nclock_mhz = = 3\n',
     r"npu\.toml: not valid TOML: .*line 2"),
    ("unclosed table", "[memory\nlanes = 3\n", r"npu\.toml: not valid TOML"),
    ("unknown top key", "rows = 32\n",
     r"npu\.toml: unknown key 'rows'; valid keys: name, description, dataflow, clock_mhz, "
     r"and the sections \[memory\], \[vector\], \[energy\], .*\[systolic\]"),
    ("unknown section", "[systolik]\nrows = 4\n",
     r"npu\.toml: unknown section \[systolik\]; valid sections: \[memory\], \[vector\], "
     r"\[energy\], .*\[systolic\]"),
    ("unknown key in part", "[memory]\nsram_kb = 4\n",
     r"npu\.toml: memory: unknown key\(s\) sram_kb; valid keys: double_buffered, "
     r"dram_bytes_per_cycle, dram_channels, dram_latency_cycles, filter_sram_kb, ifmap_sram_kb, "
     r"model, ofmap_sram_kb, reconfig_cycles, sram_bytes_per_cycle"),
    ("word for a bandwidth", '[memory]\ndram_bytes_per_cycle = "fast"\n',
     r"npu\.toml: memory\.dram_bytes_per_cycle='fast': must be a number or \"unlimited\" "
     r"\(bytes/cycle\)"),
    ("unknown key in dataflow section", "[systolic]\nrows = 4\nheight = 2\n",
     r"npu\.toml: systolic: unknown key\(s\) height; valid keys: cols, rows, stationary"),
    ("string for a number", 'clock_mhz = "fast"\n',
     r"npu\.toml: clock_mhz='fast': must be a number \(MHz\)"),
    ("float for an integer", "[systolic]\nrows = 1.5\n",
     r"npu\.toml: systolic\.rows=1\.5: must be an integer \(PEs\)"),
    ("bool for a number", "[vector]\nlanes = true\n",
     r"npu\.toml: vector\.lanes=True: must be an integer"),
    ("number for a string", "name = 3\n", r"npu\.toml: name=3: must be a string"),
    ("value for a table", "memory = 64\n", r"npu\.toml: memory: must be a table, got 64"),
    ("zero size", "[systolic]\nrows = 0\n",
     r"npu\.toml: systolic\.rows=0: must be >= 1 \(PEs\)"),
    ("negative clock", "clock_mhz = -5\n", r"npu\.toml: clock_mhz=-5\.0: must be >= "),
    ("negative energy", "[energy]\ndram_byte_pj = -1\n",
     r"npu\.toml: energy\.dram_byte_pj=-1\.0: must be >= 0\.0 \(pJ per DRAM byte\)"),
    ("zero bandwidth", "[memory]\ndram_bytes_per_cycle = 0\n",
     r"npu\.toml: memory\.dram_bytes_per_cycle=0\.0: must be >= .*bytes/cycle"),
    ("bad choice", '[systolic]\nstationary = "rs"\n',
     r"npu\.toml: systolic\.stationary='rs': must be one of os, ws, is"),
    ("unknown dataflow", 'dataflow = "tpu"\n',
     r"npu\.toml: dataflow='tpu': must be one of .*systolic"),
    ("beyond int64", "[systolic]\nrows = 99999999999999999999\n",
     r"npu\.toml: systolic\.rows=99999999999999999999: must be <= 2\*\*12 = 4096 \(PEs; "
     r"see docs/arch\.md, 'Bounds'\)"),
    ("too many multipliers", "[sparse-pairs]\nprocessor_groups = 8192\n",
     r"npu\.toml: sparse-pairs\.processor_groups=8192: must be <= 2\*\*12 = 4096"),
    ("input-reuse's product past 2**24 multipliers",
     "[input-reuse]\noperation_units = 4096\nprocessing_units = 4096\nregion_rows = 2\n",
     r"npu\.toml: input-reuse: operation_units x processing_units x region_rows x "
     r"region_cols x region_channels = 134,217,728 multipliers: must be <= 2\*\*24"),
    ("SRAM above 1 TiB", "[memory]\nofmap_sram_kb = 1073741825\n",
     r"npu\.toml: memory\.ofmap_sram_kb=1073741825: must be <= 2\*\*30 = 1073741824 \(KiB"),
    ("first buffer above 1 TiB", "[input-reuse]\nfirst_buffer_kb = 2147483648\n",
     r"npu\.toml: input-reuse\.first_buffer_kb=2147483648: must be <= 2\*\*30"),
    ("huge clock", "clock_mhz = 1e7\n", r"npu\.toml: clock_mhz=10000000\.0: must be <= 1e\+06"),
    ("infinite clock", "clock_mhz = inf\n", r"npu\.toml: clock_mhz=inf: must be a finite number"),
    ("nan energy", "[energy]\nsram_byte_pj = nan\n",
     r"npu\.toml: energy\.sram_byte_pj=nan: must be a finite number"),
    ("integer beyond int64 for a number", "[memory]\ndram_bytes_per_cycle = 99999999999999999999\n",
     r"memory\.dram_bytes_per_cycle=1e\+20: must be <= 1\.04858e\+06 \(bytes/cycle"),
    ("integer beyond a float", f"clock_mhz = 1{'0' * 400}\n",
     r"npu\.toml: clock_mhz=10{400}: must be a finite number"),
]


@pytest.mark.parametrize("text, message", [(t, m) for _, t, m in BAD],
                         ids=[case for case, _, _ in BAD])
def test_bad_file_is_refused_naming_file_key_and_rule(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_arch(write(tmp_path, text))


def numeric_spec_fields():
    """(class name, field) of every number an arch file sets: the parts and every dataflow's
    section."""
    import dataclasses

    from npusim.arch.spec import PARTS
    from npusim.dataflows import REGISTRY

    classes = [Arch, *PARTS.values(), *(df.Params for df in REGISTRY.values())]
    return [(cls.__qualname__ + " of " + cls.__module__, f) for cls in classes
            for f in dataclasses.fields(cls) if f.type in ("int", "float")]


def test_every_numeric_field_has_an_upper_bound_inside_int64():
    fields = numeric_spec_fields()
    assert len(fields) > 30
    for where, f in fields:
        high = f.metadata.get("max")
        assert high is not None and f.metadata["min"] <= f.default <= high <= 2**62, \
            (where, f.name)


def test_messages_are_one_line(tmp_path):
    for _, text, _ in BAD:
        with pytest.raises(ConfigError) as info:
            load_arch(write(tmp_path, text))
        assert "\n" not in str(info.value)


def test_missing_file_and_unknown_preset(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=re.escape(f"{missing}: no such arch file (or a preset: ")
                       + r".*systolic-32x32-ws"):
        load_arch(missing)
    with pytest.raises(ConfigError, match=r"arch 'big-npu': not a preset \(.*systolic-32x32-ws"
                                          r".*\) nor a \.toml file"):
        load_arch("big-npu")


def test_a_folder_or_a_special_file_is_not_an_arch_file(tmp_path):
    """A device that never ends (/dev/zero read until out of memory) or a FIFO (a read that
    waits for a writer) is refused before it is read."""
    import os

    folder = tmp_path / "archs.toml"
    folder.mkdir()
    with pytest.raises(ConfigError, match=r"archs\.toml: a folder; give an arch TOML file"):
        load_arch(folder)
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    for special in (fifo, "/dev/zero"):
        with pytest.raises(ConfigError, match=r": not a regular file; give an arch TOML file"):
            load_arch(special)


def test_a_binary_file_is_not_an_arch_file(tmp_path):
    path = tmp_path / "arch.toml"
    path.write_bytes(bytes([0x98, 0xff, 0x00, 0x41]))
    with pytest.raises(ConfigError, match=r"arch\.toml: not a TOML text file \(UTF-8: invalid "
                                          r"start byte\)"):
        load_arch(path)


def test_bandwidth_unlimited_and_memory_options(tmp_path):
    text = ('[memory]\ndram_bytes_per_cycle = "unlimited"\ndram_latency_cycles = 40\n'
            'sram_bytes_per_cycle = 64\ndouble_buffered = false\n')
    m = load_arch(write(tmp_path, text)).memory
    assert (m.dram_bytes_per_cycle, m.dram_latency_cycles) == ("unlimited", 40)
    assert (m.sram_bytes_per_cycle, m.double_buffered) == (64.0, False)
    assert Memory().sram_bytes_per_cycle == "unlimited" and Memory().double_buffered


ALONE = """
import sys, types
from dataclasses import dataclass
pkg = types.ModuleType("npusim")
pkg.__path__ = [sys.argv[1]]
sys.modules["npusim"] = pkg
from npusim.arch.spec import arch_from_toml_text, spec

@dataclass(frozen=True)
class Toy:
    lanes: int = spec(4, "lanes", min=1)

arch = arch_from_toml_text('dataflow = "toy"\\n[toy]\\nlanes = 8\\n', "t.toml", {"toy": Toy})
assert arch.params(Toy).lanes == 8 and arch.params("toy").lanes == 8
print(" ".join(sorted(m for m in sys.modules if m.startswith("npusim"))))
"""


def test_the_arch_package_imports_no_machine():
    """The dependency runs one way: ``npusim.arch`` alone (the package's own ``__init__``,
    which imports simulate, left out), loading a file and reading its sections, imports
    neither the machines nor their emulators."""
    import subprocess
    import sys
    from pathlib import Path

    import npusim

    src = str(Path(npusim.__file__).parent)
    loaded = subprocess.run([sys.executable, "-c", ALONE, src], capture_output=True, text=True,
                            check=True).stdout.split()
    assert "npusim.arch.spec" in loaded
    assert not [m for m in loaded if m.startswith(("npusim.dataflows", "npusim.emulate"))]


def test_the_machines_read_the_sections_the_loader_declares():
    """``arch.sections`` declares each machine's section without importing it: each registered
    machine's ``Params`` is the declared class, the hybrid reads its section by name
    (``dataflows.machines``), the compilers' objectives are the words the sections accept, and no
    section is declared for a machine that does not exist."""
    from npusim import stats
    from npusim.arch import sections
    from npusim.arch.sections.hybrid import Hybrid
    from npusim.arch.spec import OBJECTIVES, SECTIONS
    from npusim.dataflows import REGISTRY

    assert {name: df.Params for name, df in REGISTRY.items()} | {"hybrid": Hybrid} == SECTIONS
    assert tuple(stats.OBJECTIVES) == OBJECTIVES
    assert sections.machine_names() == dataflow_names()


def test_the_loader_takes_the_sections_it_is_handed():
    from dataclasses import dataclass

    from npusim.arch.spec import arch_from_toml_text, spec

    @dataclass(frozen=True)
    class Toy:
        lanes: int = spec(4, "lanes", min=1)
        names: tuple[str, ...] = spec(("a",), "names")

    text = 'dataflow = "toy"\n[toy]\nlanes = 8\nnames = ["b", "c"]\n'
    arch = arch_from_toml_text(text, "t.toml", {"toy": Toy})
    assert arch.params(Toy) == Toy(8, ("b", "c")) and arch.params("toy") is arch.params(Toy)
    assert arch_from_toml_text('dataflow = "toy"\n', "t.toml", {"toy": Toy}).params(Toy) == Toy()
    with pytest.raises(ConfigError, match=r"t.toml: unknown section \[systolic\]; valid "
                                          r"sections: \[memory\], \[vector\], \[energy\], "
                                          r"\[area\], \[toy\]"):
        arch_from_toml_text('dataflow = "toy"\n[systolic]\nrows = 2\n', "t.toml", {"toy": Toy})
    with pytest.raises(ConfigError, match=r"t.toml: toy.names\[1\]=3: must be a string"):
        arch_from_toml_text('dataflow = "toy"\n[toy]\nnames = ["b", 3]\n', "t.toml",
                            {"toy": Toy})
    with pytest.raises(ConfigError,
                       match=r"t.toml: toy.names='b': must be an array, each item a string"):
        arch_from_toml_text('dataflow = "toy"\n[toy]\nnames = "b"\n', "t.toml", {"toy": Toy})


def test_an_arch_file_is_parsed_once_until_it_is_edited(tmp_path):
    path = write(tmp_path, FULL)
    arch = load_arch(path)
    assert load_arch(str(path)) is arch  # later calls share what is kept per arch
    path.write_text(FULL.replace("rows = 16", "rows = 24"))  # the same size: noticed by its text
    edited = load_arch(path)
    assert edited.params("systolic").rows == 24 and arch.params("systolic").rows == 16
    write(tmp_path, "[memory]\nifmap_sram_kbb = 64\n")
    with pytest.raises(ConfigError, match="npu.toml"):
        load_arch(path)


def test_a_preset_is_parsed_once_and_equals_its_file():
    from npusim.arch.spec import PRESET_DIR, arch_from_toml_text

    name = "input-reuse-1024"
    path = PRESET_DIR / f"{name}.toml"
    assert load_arch(name) is load_arch(name)
    assert load_arch(name) == arch_from_toml_text(path.read_text(), str(path))


@pytest.mark.parametrize("text, message", [
    ('[memory]\nmodel = "scalesim"\n',
     r'^mine.toml: memory.model = "scalesim": dram_bytes_per_cycle = 17.064 \(the default\): '
     r"SCALE-Sim's Bandwidth is a whole number of words per cycle"),
    ('dataflow = "input-reuse"\n[memory]\nmodel = "scalesim"\ndram_bytes_per_cycle = 16\n',
     r'^mine.toml: memory.model = "scalesim" replays SCALE-Sim\'s systolic array; dataflow = '
     r'"input-reuse" describes its layers as steps: use model = "npusim"'),
    ('[memory]\nmodel = "scalesim"\ndram_bytes_per_cycle = 16\ndram_latency_cycles = 100\n'
     'double_buffered = false\n',
     r'^mine.toml: memory.model = "scalesim": dram_latency_cycles = 100, double_buffered = '
     r"false: SCALE-Sim's replay has no DRAM latency"),
    ('dataflow = "dilated-grid"\n[dilated-grid]\ngrid_rows = 2\nmac_rows = 4\n',
     r"^mine.toml: dilated-grid.mac_rows=4: must be <= grid_rows=2")])
def test_what_scalesim_s_replay_cannot_time_is_refused_naming_the_file(text, message):
    """Once found by the first layer run, in a message that named no file."""
    from npusim.arch.spec import arch_from_toml_text

    with pytest.raises(ConfigError, match=message):
        arch_from_toml_text(text, "mine.toml")
    fine = arch_from_toml_text('[memory]\nmodel = "scalesim"\ndram_bytes_per_cycle = 16\n',
                               "mine.toml")
    assert (fine.memory.model, fine.memory.dram_bytes_per_cycle) == ("scalesim", 16)


@pytest.mark.parametrize("channels", ["shared", "per-operand"])
def test_scalesim_memory_is_described_as_it_is_timed_a_channel_per_operand(channels):
    """SCALE-Sim's replay gives each operand a channel of the bandwidth whatever
    ``dram_channels`` says: the memory line must say per operand, as the timing is (a shared
    channel's 10 B/cycle read as three times the bandwidth timed)."""
    from npusim.arch.spec import arch_from_toml_text, describe_memory

    arch = arch_from_toml_text(f'[memory]\nmodel = "scalesim"\ndram_bytes_per_cycle = 10\n'
                               f'dram_channels = "{channels}"\n', "mine.toml")
    assert "DRAM 10 B/cycle per operand" in describe_memory(arch.memory)
    npusim_model = arch.with_memory(model="npusim")
    assert ("per operand" in describe_memory(npusim_model.memory)) == (channels == "per-operand")
