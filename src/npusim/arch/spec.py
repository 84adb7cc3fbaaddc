"""The hardware description: ``Arch`` and its parts, loaded from TOML and validated once.

Each part is a frozen dataclass; each field is declared once with its unit in
its metadata. ``from_mapping`` builds any of them from a TOML table, rejecting
unknown keys (listing the valid ones), wrong types and impossible values with a
message that names the file and the key. Each dataflow declares its own
section (``[systolic]``, ``[input-reuse]``...) as a dataclass of the same kind.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError


def spec(default, unit: str, *, min=None, choices=None):
    """A spec field: its default, unit (for docs and errors) and rule."""
    return field(default=default, metadata={"unit": unit, "min": min, "choices": choices})


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
        for arm in typing.get_args(typ):
            try:
                return _check_type(value, arm, where, unit)
            except ConfigError:
                pass
        unit = f" ({unit})" if unit else ""
        raise ConfigError(f"{where}={value!r}: must be {_type_words(typ)}{unit}")
    if typing.get_origin(typ) is Literal:
        if value in typing.get_args(typ) and isinstance(value, str):
            return value
        raise ConfigError(f"{where}={value!r}: must be {_type_words(typ)}")
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    ok = isinstance(value, typ) and not (typ in (int, float) and isinstance(value, bool))
    if not ok:
        unit = f" ({unit})" if unit else ""
        raise ConfigError(f"{where}={value!r}: must be {_type_words(typ)}{unit}")
    return value


def _key(where: str, name: str) -> str:
    """``file.toml: clock_mhz`` at the top of a file, ``file.toml: memory.lanes`` in a section."""
    return f"{where} {name}" if where.endswith(":") else f"{where}.{name}"


def from_mapping(cls, table: Mapping[str, Any], where: str):
    """Build the frozen dataclass ``cls`` from ``table``; errors name ``where.key``."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: must be a table, got {table!r}")
    hints = typing.get_type_hints(cls)
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
        rule_min, choices = f.metadata.get("min"), f.metadata.get("choices")
        if rule_min is not None and not isinstance(value, str) and value < rule_min:
            raise ConfigError(f"{key}={value!r}: must be >= {rule_min} ({f.metadata['unit']})")
        if choices is not None and value not in choices:
            raise ConfigError(f"{key}={value!r}: must be one of {', '.join(map(str, choices))}")
        values[name] = value
    return cls(**values)


@dataclass(frozen=True)
class Memory:
    """On-chip SRAM sizes and the DRAM interface, as ``npusim.memory`` times them.

    ``dram_bytes_per_cycle = "unlimited"`` is the stall-free machine (SCALE-Sim's
    ``CALC`` bandwidth mode); the SRAM ports are unlimited unless a rate is given.
    """

    ifmap_sram_kb: int = spec(64, "KiB", min=1)
    filter_sram_kb: int = spec(64, "KiB", min=1)
    ofmap_sram_kb: int = spec(64, "KiB", min=1)
    dram_bytes_per_cycle: Bandwidth = spec(10.0, "bytes/cycle", min=1e-9)
    dram_latency_cycles: int = spec(0, "cycles per DRAM transfer", min=0)
    sram_bytes_per_cycle: Bandwidth = spec("unlimited", "bytes/cycle, all SRAM ports", min=1e-9)
    double_buffered: bool = spec(True, "fetch of the next step overlaps this one")
    dram_channels: str = spec("shared", "one DRAM channel, or one per operand",
                              choices=("shared", "per-operand"))


@dataclass(frozen=True)
class VectorUnit:
    """The unit that runs non-conv ops (activation, pooling, add...): one op per lane per cycle."""

    lanes: int = spec(32, "element ops/cycle", min=1)


@dataclass(frozen=True)
class Energy:
    """Energy per action; the defaults are Horowitz, ISSCC 2014, 45 nm (see docs/energy.md)."""

    source: str = spec("Horowitz, 'Computing's energy problem', ISSCC 2014, 45 nm", "citation")
    mac_int8_pj: float = spec(0.23, "pJ per 8-bit multiply + add", min=0.0)
    mac_fp32_pj: float = spec(4.6, "pJ per fp32 multiply + add", min=0.0)
    sram_byte_pj: float = spec(2.5, "pJ per SRAM byte (32 KiB array)", min=0.0)
    dram_byte_pj: float = spec(162.5, "pJ per DRAM byte", min=0.0)
    vector_op_pj: float = spec(0.9, "pJ per vector-unit op (fp32 add)", min=0.0)


@dataclass(frozen=True)
class Arch:
    """One accelerator: its default dataflow, clock, memories, vector unit, energy table,
    and one validated parameter section per dataflow it describes."""

    name: str = spec("custom", "preset name")
    description: str = spec("", "free text")
    dataflow: str = spec("systolic", "default dataflow name")
    clock_mhz: float = spec(1000.0, "MHz", min=1e-6)
    memory: Memory = field(default_factory=Memory)
    vector: VectorUnit = field(default_factory=VectorUnit)
    energy: Energy = field(default_factory=Energy)
    sections: Mapping[str, Any] = field(default_factory=dict, metadata={"unit": "per dataflow"})

    def params(self, dataflow: str):
        """This arch's parameters for ``dataflow`` (its defaults if the arch has no section)."""
        from ..dataflows import get

        if dataflow in self.sections:
            return self.sections[dataflow]
        return get(dataflow).Params()

    def seconds(self, cycles: int) -> float:
        return cycles / (self.clock_mhz * 1e6)

    def with_memory(self, **changes) -> Arch:
        """This arch with some ``Memory`` fields changed, e.g.
        ``with_memory(dram_bytes_per_cycle="unlimited")`` for the stall-free machine."""
        where = f"{self.name}: memory"
        table = {**dataclasses.asdict(self.memory), **changes}
        return dataclasses.replace(self, memory=from_mapping(Memory, table, where))


PARTS = {"memory": Memory, "vector": VectorUnit, "energy": Energy}


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


def arch_from_toml_text(text: str, where: str) -> Arch:
    """Parse and validate a TOML hardware description; ``where`` names it in errors."""
    from ..dataflows import REGISTRY

    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: not valid TOML: {e}") from None
    sections = {k: table.pop(k) for k in list(table) if k in REGISTRY}
    parts = {k: table.pop(k) for k in PARTS if k in table}
    _reject_unknown(table, where, sorted(REGISTRY))
    arch = from_mapping(Arch, table, f"{where}:")
    built = {k: from_mapping(PARTS[k], v, f"{where}: {k}") for k, v in parts.items()}
    params = {k: from_mapping(REGISTRY[k].Params, v, f"{where}: {k}") for k, v in sections.items()}
    if arch.dataflow not in REGISTRY:
        raise ConfigError(f"{where}: dataflow={arch.dataflow!r}: must be one of "
                          f"{', '.join(sorted(REGISTRY))}")
    return dataclasses.replace(arch, sections=params, **built)


PRESET_DIR = Path(__file__).parent / "presets"


def presets() -> list[str]:
    """Names of the built-in presets."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def load_arch(name_or_path: str | Path | Arch | None = None) -> Arch:
    """An ``Arch`` from a preset name, a TOML file path, or ``None`` (the default preset)."""
    if isinstance(name_or_path, Arch):
        return name_or_path
    if name_or_path is None:
        name_or_path = DEFAULT_PRESET
    text = str(name_or_path)
    path = Path(text)
    if text in presets():
        path = PRESET_DIR / f"{text}.toml"
    elif not (path.suffix == ".toml" or path.exists()):
        raise ConfigError(f"arch {text!r}: not a preset ({', '.join(presets())}) nor a .toml file")
    elif not path.exists():
        raise ConfigError(f"{path}: no such arch file (or a preset: {', '.join(presets())})")
    try:
        content = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a TOML text file (UTF-8: {e.reason})") from None
    return arch_from_toml_text(content, str(path))


DEFAULT_PRESET = "systolic-32x32-ws"
