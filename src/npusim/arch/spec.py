"""The hardware description: ``Arch`` and its parts, loaded from TOML and validated once.

Each part is a frozen dataclass; each field is declared once with its unit in
its metadata. ``from_mapping`` builds any of them from a TOML table, rejecting
unknown keys (listing the valid ones), wrong types and impossible values with a
message that names the file and the key. Each dataflow's own section (``[systolic]``,
``[input-reuse]``...) is a dataclass of the same kind in a module of ``arch.sections``, which
declares it (``declare_section``) when the loader first reads the section (``SECTIONS``); the
machine reads it as its ``Params``, so this package's modules import no machine and the
dependency runs one way, machines -> arch. ``describe_memory`` states a ``Memory`` in one line.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from ..errors import ConfigError
from ..lazy import LazyRegistry

# Upper bounds of the hardware sizes (docs/arch.md says why): far above any chip built,
# low enough that every count npusim derives stays exact in int64 and in float64.
MAX_SIDE = 2**12        # PEs along one side of an array: rows x cols <= 2**24 multipliers
MAX_UNITS = 2**24       # multipliers, lanes or words per cycle of one unit
MAX_KIB = 2**30         # one buffer: 1 TiB
MAX_REGION = 2**10      # pixels along one side of a region or grid read at once
MAX_LEVELS = 20         # shifter levels: a reach of 2**20 - 1 pixels spans MAX_DIM
MAX_CLOCK_MHZ = 1e6     # 1 THz
MAX_BYTES_PER_CYCLE = 2.0**20  # DRAM: 1 MiB per cycle, 1 PB/s at 1 GHz
MAX_PJ = 1e6            # energy of one action: 1 uJ
MAX_UM2 = 1e9           # area of one part: 1,000 mm^2
MAX_LATENCY = 2**30     # DRAM latency, cycles: about a second at 1 GHz
OBJECTIVES = ("cycles", "energy", "energy-delay")
"""What a compiler's choice for a layer may minimise (a hybrid's machine, group-tile's output
block width); ``stats.OBJECTIVES`` computes each."""
INT64_MAX = 2**63 - 1

SECTION_MODULES = {name: f"{__package__}.sections.{name.replace('-', '_')}"
                   for name in ("dilated-grid", "group-tile", "hybrid", "input-reuse",
                                "sparse-pairs", "systolic")}
"""The built-in sections: name -> the module (``arch.sections``) that declares it."""
SECTIONS = LazyRegistry(SECTION_MODULES)
"""Section name -> its dataclass, as declared (``declare_section``); a built-in section's
module is imported when the section is first read, so loading an arch file defines the
sections it holds, not every machine's."""

T = TypeVar("T")


def declare_section(name: str, params_cls: type) -> None:
    """Declare the arch section ``[name]`` and the frozen dataclass that holds it; the loader
    accepts and validates only declared sections (``arch_from_toml_text``)."""
    SECTIONS[name] = params_cls


def declared_sections() -> Mapping[str, type]:
    """``SECTIONS``: every declared section, each built-in one imported when first read."""
    return SECTIONS


def spec(default, unit: str, *, min=None, max=None, choices=None):
    """A spec field: its default, unit (for docs and errors) and rule (``min <= value <=
    max``, or one of ``choices``)."""
    return field(default=default, metadata={"unit": unit, "min": min, "max": max,
                                            "choices": choices})


TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}

Bandwidth = float | Literal["unlimited"]
"""A rate in bytes/cycle, or the word "unlimited" (no limit: the stall-free machine)."""


def _type_words(typ) -> str:
    """How an error names a type: 'a number', 'a number or "unlimited"'."""
    if typing.get_origin(typ) is Literal:
        return " or ".join(f'"{a}"' for a in typing.get_args(typ))
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        return " or ".join(_type_words(t) for t in typing.get_args(typ))
    return TYPE_WORDS.get(typ, getattr(typ, "__name__", str(typ)))


def _check_type(value, typ, where: str, unit: str = ""):
    """``value`` as type ``typ`` (an int is a float; a union takes its first fitting arm,
    a ``Literal`` its listed words), or a ConfigError naming ``where``."""
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        errors = []
        for arm in typing.get_args(typ):
            try:
                return _check_type(value, arm, where, unit)
            except ConfigError as e:
                errors.append(e)
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise errors[0]  # a number the numeric arm refused: say why (not finite, ...)
        unit = f" ({unit})" if unit else ""
        raise ConfigError(f"{where}={value!r}: must be {_type_words(typ)}{unit}")
    if typing.get_origin(typ) is tuple:  # tuple[X, ...]: a TOML array of X
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}={value!r}: must be an array, each item "
                              f"{_type_words(typing.get_args(typ)[0])}{unit and f' ({unit})'}")
        return tuple(_check_type(v, typing.get_args(typ)[0], f"{where}[{i}]", unit)
                     for i, v in enumerate(value))
    if typing.get_origin(typ) is Literal:
        if value in typing.get_args(typ) and isinstance(value, str):
            return value
        raise ConfigError(f"{where}={value!r}: must be {_type_words(typ)}")
    given = value
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        try:  # a whole number past int64 is still a number, checked against its bounds
            value = float(value)
        except OverflowError:  # float(10**400)
            value = math.inf
    ok = isinstance(value, typ) and not (typ in (int, float) and isinstance(value, bool))
    if not ok:
        unit = f" ({unit})" if unit else ""
        raise ConfigError(f"{where}={value!r}: must be {_type_words(typ)}{unit}")
    if typ is float and not math.isfinite(value):
        raise ConfigError(f"{where}={given!r}: must be a finite number ({unit})")
    return value


def _check_rule(value, f: dataclasses.Field, key: str) -> None:
    """The field's ``min`` / ``max`` / ``choices`` rule; the message names key, value, rule."""
    meta = f.metadata
    low, high, choices = meta.get("min"), meta.get("max"), meta.get("choices")
    if isinstance(value, str):  # a word ("unlimited") has no numeric bound
        low = high = None
    if low is not None and value < low:
        raise ConfigError(f"{key}={value!r}: must be >= {low} ({meta['unit']})")
    if high is not None and value > high:
        raise ConfigError(f"{key}={value!r}: must be <= {_bound(high)} ({meta['unit']}; "
                          "see docs/arch.md, 'Bounds')")
    if choices is not None and value not in choices:
        raise ConfigError(f"{key}={value!r}: must be one of {', '.join(map(str, choices))}")
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:  # no max given
        raise ConfigError(f"{key}={value}: beyond 64-bit integers (|value| < 2**63)")


def _bound(value) -> str:
    """A bound as written in the docs: ``2**24 = 16777216`` for a power of two."""
    if isinstance(value, int) and value > 1024 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1} = {value}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _key(where: str, name: str) -> str:
    """``file.toml: clock_mhz`` at the top of a file, ``file.toml: memory.lanes`` in a section."""
    return f"{where} {name}" if where.endswith(":") else f"{where}.{name}"


@functools.cache
def _hints(cls) -> dict[str, Any]:
    """``cls``'s field types, resolved once per class (an arch file or sweep point reads each
    section's: resolving the annotations was most of a point's arch loading)."""
    return typing.get_type_hints(cls)


def from_mapping(cls, table: Mapping[str, Any], where: str):
    """Build the frozen dataclass ``cls`` from ``table``; errors name ``where.key``. A class
    with a ``validate(where)`` method checks its rules across fields there."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: must be a table, got {table!r}")
    hints = _hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"{where.rstrip(':')}: unknown key(s) {', '.join(unknown)}; valid keys: "
                          f"{', '.join(sorted(known))}")
    values = {}
    for name, value in table.items():
        f, typ = known[name], hints[name]
        key = _key(where, name)
        if dataclasses.is_dataclass(typ):
            values[name] = from_mapping(typ, value, key)
            continue
        value = _check_type(value, typ, key, f.metadata.get("unit", ""))
        _check_rule(value, f, key)
        values[name] = value
    try:
        built = cls(**values)
    except ConfigError as e:  # a rule the class checks across its fields: name the file too
        raise ConfigError(f"{where.split(':')[0]}: {e}") from None
    if hasattr(built, "validate"):  # rules across fields, e.g. [hybrid] machines
        built.validate(where.rstrip(":"))
    return built


@dataclass(frozen=True)
class Memory:
    """On-chip SRAM sizes and the DRAM interface, as ``npusim.memory`` times them.

    ``dram_bytes_per_cycle = "unlimited"`` is the stall-free machine (SCALE-Sim's
    ``CALC`` bandwidth mode); the SRAM ports are unlimited unless a rate is given.
    """

    ifmap_sram_kb: int = spec(64, "KiB", min=1, max=MAX_KIB)
    filter_sram_kb: int = spec(64, "KiB", min=1, max=MAX_KIB)
    ofmap_sram_kb: int = spec(64, "KiB", min=1, max=MAX_KIB)
    # one LPDDR4X-4266 x32 channel (JEDEC JESD209-4): 4266 MT/s x 4 bytes at 1000 MHz
    dram_bytes_per_cycle: Bandwidth = spec(4266 * 4 / 1000, "bytes/cycle", min=1e-9,
                                           max=MAX_BYTES_PER_CYCLE)
    dram_latency_cycles: int = spec(0, "cycles per DRAM transfer", min=0, max=MAX_LATENCY)
    sram_bytes_per_cycle: Bandwidth = spec("unlimited", "bytes/cycle, all SRAM ports", min=1e-9,
                                           max=MAX_BYTES_PER_CYCLE)
    double_buffered: bool = spec(True, "fetch of the next step overlaps this one")
    dram_channels: str = spec("shared", "one DRAM channel, or one per operand",
                              choices=("shared", "per-operand"))
    model: str = spec("npusim", "memory discipline: npusim's block model, or SCALE-Sim 3.0.0's "
                      "address-trace replay (systolic, os)", choices=("npusim", "scalesim"))
    reconfig_cycles: int = spec(0, "cycles per unit to load a layer's kernels, coefficients "
                                "and mappings when the layer starts", min=0, max=MAX_LATENCY)


UNLIMITED = "unlimited"


def unlimited(value) -> bool:
    """Whether a bandwidth setting is ``"unlimited"`` (the only word a bandwidth takes)."""
    return value == UNLIMITED


def describe_memory(memory: Memory) -> str:
    """One line stating a memory: buffers, DRAM bandwidth and latency, SRAM ports, and where
    they are not the defaults the configuration load and the timing model (every field, so
    two memories that differ read differently)."""
    bw = memory.dram_bytes_per_cycle
    dram = "unlimited DRAM bandwidth (no DRAM stall)" if unlimited(bw) else f"DRAM {bw:g} B/cycle"
    if not unlimited(bw) and memory.dram_latency_cycles:
        dram += f", {memory.dram_latency_cycles} cycles latency"
    sram = memory.sram_bytes_per_cycle
    ports = "" if unlimited(sram) else f", SRAM ports {sram:g} B/cycle"
    buffering = "double-buffered" if memory.double_buffered else "single-buffered"
    if not unlimited(bw) and (memory.dram_channels == "per-operand" or memory.model == "scalesim"):
        dram += " per operand"  # SCALE-Sim's replay has a channel per operand, whatever is set
    reconfig = (f"; {memory.reconfig_cycles} cycles a unit to load a layer's configuration"
                if memory.reconfig_cycles else "")
    model = "; SCALE-Sim's trace replay" if memory.model == "scalesim" else ""
    return (f"SRAM ifmap {memory.ifmap_sram_kb} KiB, filter {memory.filter_sram_kb} KiB, "
            f"ofmap {memory.ofmap_sram_kb} KiB ({buffering}); {dram}{ports}{reconfig}{model}")


def same_memory(archs) -> bool:
    """Whether every arch in ``archs`` has the same memory (buffers and bandwidths)."""
    mems = [a.memory for a in archs]
    return all(m == mems[0] for m in mems)


@dataclass(frozen=True)
class VectorUnit:
    """The unit that runs non-conv ops (activation, pooling, add...): one op per lane per cycle."""

    lanes: int = spec(32, "element ops/cycle", min=1, max=MAX_UNITS)


@dataclass(frozen=True)
class Energy:
    """Energy per action; the defaults are Horowitz, ISSCC 2014, 45 nm (see docs/energy.md)."""

    source: str = spec("Horowitz, 'Computing's energy problem', ISSCC 2014, 45 nm", "citation")
    mac_int8_pj: float = spec(0.23, "pJ per 8-bit multiply + add", min=0.0, max=MAX_PJ)
    mac_fp32_pj: float = spec(4.6, "pJ per fp32 multiply + add", min=0.0, max=MAX_PJ)
    sram_byte_pj: float = spec(2.5, "pJ per SRAM byte (32 KiB array)", min=0.0, max=MAX_PJ)
    dram_byte_pj: float = spec(162.5, "pJ per DRAM byte", min=0.0, max=MAX_PJ)
    vector_op_pj: float = spec(0.9, "pJ per vector-unit op (fp32 add)", min=0.0, max=MAX_PJ)


@dataclass(frozen=True)
class AreaTable:
    """Area per part, 45 nm by default (docs/area.md); ``npusim.area`` prices a machine's
    parts with it."""

    source: str = spec("Horowitz ISSCC 2014 (arithmetic); 6T cell 0.346 um^2 at 50 % array "
                       "efficiency (SRAM); NanGate FreePDK45 DFF_X1, MUX2_X1 (registers, "
                       "multiplexers); 45 nm", "citation")
    mac_int8_um2: float = spec(419.0, "um^2 per 8-bit multiplier + 32-bit adder", min=0.0,
                               max=MAX_UM2)
    mac_fp32_um2: float = spec(11884.0, "um^2 per fp32 multiplier + fp32 adder", min=0.0,
                               max=MAX_UM2)
    sram_kib_um2: float = spec(5669.0, "um^2 per KiB of SRAM array", min=0.0, max=MAX_UM2)
    register_bit_um2: float = spec(4.522, "um^2 per flip-flop (bit)", min=0.0, max=MAX_UM2)
    mux_bit_um2: float = spec(1.862, "um^2 per 2-input multiplexer bit", min=0.0, max=MAX_UM2)


@dataclass(frozen=True)
class Arch:
    """One accelerator: its default dataflow, clock, memories, vector unit, energy table,
    and one validated parameter section per dataflow it describes."""

    name: str = spec("custom", "preset name")
    description: str = spec("", "free text")
    dataflow: str = spec("systolic", "default dataflow name")
    clock_mhz: float = spec(1000.0, "MHz", min=1e-6, max=MAX_CLOCK_MHZ)
    memory: Memory = field(default_factory=Memory)
    vector: VectorUnit = field(default_factory=VectorUnit)
    energy: Energy = field(default_factory=Energy)
    area: AreaTable = field(default_factory=AreaTable)
    sections: Mapping[str, Any] = field(default_factory=dict, metadata={"unit": "per dataflow"})

    def params(self, kind: type[T] | str) -> T:
        """This arch's section ``kind``: a machine's ``Params`` dataclass (what machine code
        passes, and gets that type back), or a declared section's name (for reports); the
        dataclass's defaults if the arch file has no such section."""
        if isinstance(kind, str):
            if kind in self.sections:
                return self.sections[kind]
            sections = declared_sections()
            if kind not in sections:
                raise ConfigError(f"{self.name}: no section [{kind}]; declared sections: "
                                  f"{', '.join(sorted(sections))}")
            kind = sections[kind]
        found = [p for p in self.sections.values() if type(p) is kind]
        return found[0] if found else kind()

    def seconds(self, cycles: int) -> float:
        return cycles / (self.clock_mhz * 1e6)

    def with_memory(self, **changes) -> Arch:
        """This arch with some ``Memory`` fields changed, e.g.
        ``with_memory(dram_bytes_per_cycle="unlimited")`` for the stall-free machine."""
        where = f"{self.name}: memory"
        table = {**dataclasses.asdict(self.memory), **changes}
        return dataclasses.replace(self, memory=from_mapping(Memory, table, where))


PARTS = {"memory": Memory, "vector": VectorUnit, "energy": Energy, "area": AreaTable}


def _reject_unknown(table: Mapping[str, Any], where: str, dataflows: list[str]) -> None:
    """Refuse a top-level key or section the arch format does not have, listing the valid."""
    scalars = [f.name for f in dataclasses.fields(Arch) if f.name not in {*PARTS, "sections"}]
    valid = ", ".join(f"[{s}]" for s in [*PARTS, *dataflows])
    for key, value in sorted(table.items()):
        if isinstance(value, Mapping):
            raise ConfigError(f"{where}: unknown section [{key}]; valid sections: {valid} "
                              "(a dataflow section is named after its dataflow)")
        if key not in scalars:
            raise ConfigError(f"{where}: unknown key {key!r}; valid keys: {', '.join(scalars)}, "
                              f"and the sections {valid}")


def arch_from_toml_text(text: str, where: str,
                        sections: Mapping[str, type] | None = None) -> Arch:
    """Parse and validate a TOML hardware description; ``where`` names it in errors.
    ``sections`` maps each section a file may hold (and each valid ``dataflow``) to its
    dataclass; by default every machine's (``declared_sections``)."""
    known = declared_sections() if sections is None else sections
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: not valid TOML: {e}") from None
    found = {k: table.pop(k) for k in list(table) if k in known}
    parts = {k: table.pop(k) for k in PARTS if k in table}
    _reject_unknown(table, where, sorted(known))
    arch = from_mapping(Arch, table, f"{where}:")
    built = {k: from_mapping(PARTS[k], v, f"{where}: {k}") for k, v in parts.items()}
    params = {k: from_mapping(known[k], v, f"{where}: {k}") for k, v in found.items()}
    if arch.dataflow not in known:
        raise ConfigError(f"{where}: dataflow={arch.dataflow!r}: must be one of "
                          f"{', '.join(sorted(known))}")
    _check_scalesim_memory(built.get("memory", arch.memory), arch.dataflow, where)
    return dataclasses.replace(arch, sections=params, **built)


def _check_scalesim_memory(memory: Memory, dataflow: str, where: str) -> None:
    """Refuse, naming the file, what SCALE-Sim's replay (``[memory] model = "scalesim"``)
    cannot time, before a run finds it layer by layer: another machine than the systolic
    array, a DRAM latency or single buffering (the replay has neither), or a DRAM bandwidth
    that is not whole words a cycle (as the default 17.064 is). What only a layer tells (its
    dtype, batch, groups) ``memory_scalesim.check_layer`` refuses."""
    if memory.model != "scalesim":
        return
    if dataflow != "systolic":
        raise ConfigError(f'{where}: memory.model = "scalesim" replays SCALE-Sim\'s systolic '
                          f'array; dataflow = "{dataflow}" describes its layers as steps: use '
                          'model = "npusim"')
    unread = [f"{key} = {value}" for key, value, replayed in (
        ("dram_latency_cycles", memory.dram_latency_cycles, 0),
        ("double_buffered", str(memory.double_buffered).lower(), "true")) if value != replayed]
    if unread:
        raise ConfigError(f"{where}: memory.model = \"scalesim\": {', '.join(unread)}: "
                          "SCALE-Sim's replay has no DRAM latency and double-buffers its read "
                          'buffers, one DRAM channel per operand; use model = "npusim" to time '
                          "these")
    bandwidth = memory.dram_bytes_per_cycle
    if not unlimited(bandwidth) and bandwidth != int(bandwidth):
        default = " (the default)" if bandwidth == Memory().dram_bytes_per_cycle else ""
        raise ConfigError(f'{where}: memory.model = "scalesim": dram_bytes_per_cycle = '
                          f"{bandwidth}{default}: SCALE-Sim's Bandwidth is a whole number of "
                          'words per cycle; set a whole number or "unlimited"')


PRESET_DIR = Path(__file__).parent / "presets"


def presets() -> list[str]:
    """Names of the built-in presets."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def load_arch(name_or_path: str | Path | Arch | None = None,
              sections: Mapping[str, type] | None = None) -> Arch:
    """An ``Arch`` from a preset name, a TOML file path, or ``None`` (the default preset);
    ``sections`` as in ``arch_from_toml_text``."""
    if isinstance(name_or_path, Arch):
        return name_or_path
    if name_or_path is None:
        name_or_path = DEFAULT_PRESET
    text = str(name_or_path)
    path = Path(text)
    if _is_preset(text):
        path = PRESET_DIR / f"{text}.toml"
    elif not (path.suffix == ".toml" or path.exists()):
        raise ConfigError(f"arch {text!r}: not a preset ({', '.join(presets())}) nor a .toml file")
    elif not path.exists():
        raise ConfigError(f"{path}: no such arch file (or a preset: {', '.join(presets())})")
    elif not path.is_file():  # a folder, a FIFO (read would wait), a device (/dev/zero: no end)
        raise ConfigError(f"{path}: {'a folder' if path.is_dir() else 'not a regular file'}; "
                          "give an arch TOML file or a preset")
    try:
        content = path.read_text(encoding="utf-8-sig")  # UTF-8, a leading BOM dropped
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a TOML text file (UTF-8: {e.reason})") from None
    if sections is not None:
        return arch_from_toml_text(content, str(path), sections)
    return _parsed(content, str(path), tuple(SECTIONS))


@functools.lru_cache(maxsize=64)
def _parsed(content: str, where: str, sections: tuple[str, ...]) -> Arch:
    """An arch file's text (a preset's or the user's, named ``where`` in errors) parsed
    once per text and set of known sections: an ``Arch`` is frozen, so every call may
    share it, and what is kept per arch (``simulate.kept_costs``) serves every later call
    on the same file, until it is edited."""
    return arch_from_toml_text(content, where)


def _is_preset(text: str) -> bool:
    """Whether ``text`` names a built-in preset (``text in presets()``, by one look at its
    file rather than a listing of them all: a run of a preset pays it on every call)."""
    return Path(text).name == text and (PRESET_DIR / f"{text}.toml").is_file()


DEFAULT_PRESET = "systolic-32x32-ws"
