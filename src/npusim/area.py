"""Silicon area of an arch: each machine lists what it is built of (``Hardware``: MAC
units, registers, SRAM, multiplexers), one function prices the list with the arch's
``[area]`` table.

The default table is 45 nm, the node of the energy table (docs/energy.md), so that
energy and area of one design come from one technology: Horowitz's multiplier and adder
areas (ISSCC 2014), the 6T SRAM cell of a 45 nm process and the flip-flop and multiplexer
cells of the NanGate FreePDK45 open cell library (docs/area.md gives each figure and
what is ours). Units: um^2 in the table, mm^2 in the result.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .arch.spec import AreaTable

UM2_PER_MM2 = 1e6


@dataclass(frozen=True)
class Hardware:
    """What a machine is built of (counts, not areas): ``macs`` multiply-accumulate units;
    ``register_bits`` flip-flops outside the SRAM arrays (operand, pixel and accumulator
    registers); ``sram_kib`` on-chip SRAM, KiB, by buffer name; ``mux_bits`` 2-input
    multiplexer bit-slices of the interconnect (an n-input b-bit multiplexer is (n-1) x b)."""

    macs: int
    register_bits: int
    sram_kib: dict[str, float]
    mux_bits: int = 0


@dataclass(frozen=True)
class Area:
    """An arch's area by part, mm^2."""

    macs_mm2: float
    registers_mm2: float
    sram_mm2: float
    interconnect_mm2: float
    node: str

    @property
    def total_mm2(self) -> float:
        return self.macs_mm2 + self.registers_mm2 + self.sram_mm2 + self.interconnect_mm2

    def as_dict(self) -> dict[str, float]:
        out = {f"area_{f.name}": getattr(self, f.name) for f in fields(self) if f.name != "node"}
        return {"area_mm2": self.total_mm2, **out}


def element_bits(dtype: str) -> int:
    """Bits of an operand register: 8 for int8, 32 for float32."""
    return 8 if dtype == "int8" else 32


def memory_kib(memory) -> dict[str, float]:
    """The shared memory's three SRAMs, KiB (a double-buffered one holds both halves in
    its size, as SCALE-Sim's do)."""
    return {"ifmap": memory.ifmap_sram_kb, "filter": memory.filter_sram_kb,
            "ofmap": memory.ofmap_sram_kb}


SHARED_SRAMS = ("ifmap", "filter", "ofmap")  # ``memory_kib``'s names


def own_buffers(hw: Hardware) -> str:
    """The SRAM a machine holds beyond the shared memory's three, as text ('' if none):
    'first buffers 256 KiB, second buffers 128 KiB'; where its own replace shared ones
    (group-tile's narrow and wide memories), it says which."""
    own = [f"{name} {kib:,.6g} KiB" for name, kib in hw.sram_kib.items()
           if name not in SHARED_SRAMS]
    replaced = [name for name in SHARED_SRAMS if name not in hw.sram_kib]
    if own and replaced:
        own[-1] += f" (in place of the {' and '.join(replaced)} SRAM{'s' * (len(replaced) > 1)})"
    return ", ".join(own)


def describe_buffers(arch, dataflow: str | None = None) -> str:
    """The memory the cycles are timed on, in one line: the arch's ``[memory]``
    (``describe_memory``), then the buffers of the machine (``dataflow``, default the
    arch's) that the memory model times as well (``own_buffers``)."""
    from .arch.spec import describe_memory

    own = own_buffers(hardware_of(arch, dataflow or arch.dataflow, "int8"))
    text = describe_memory(arch.memory)
    return f"{text}; the machine's own: {own}" if own else text


def price_area(hw: Hardware, table: AreaTable, dtype: str) -> Area:
    """``hw`` priced with ``table``: MACs of the run's data type (int8 or fp32)."""
    mac = table.mac_int8_um2 if dtype == "int8" else table.mac_fp32_um2
    return Area(macs_mm2=hw.macs * mac / UM2_PER_MM2,
                registers_mm2=hw.register_bits * table.register_bit_um2 / UM2_PER_MM2,
                sram_mm2=sum(hw.sram_kib.values()) * table.sram_kib_um2 / UM2_PER_MM2,
                interconnect_mm2=hw.mux_bits * table.mux_bit_um2 / UM2_PER_MM2,
                node=table.source)


def hardware_of(arch, dataflow: str, dtype: str) -> Hardware:
    """What ``arch`` built as ``dataflow`` holds; a hybrid holds each member's own parts and
    the shared memory's SRAMs once."""
    from .dataflows import machines

    members = [m.hardware(arch, dtype) for m in machines(arch, dataflow)[0]]
    if len(members) == 1:
        return members[0]
    shared = memory_kib(arch.memory)
    sram = dict(shared)
    for i, hw in enumerate(members):  # every member lists the shared SRAMs: count them once
        for k, v in hw.sram_kib.items():
            if k not in shared:
                sram[f"{k} ({i})" if k in sram else k] = v
    return Hardware(macs=sum(h.macs for h in members),
                    register_bits=sum(h.register_bits for h in members), sram_kib=sram,
                    mux_bits=sum(h.mux_bits for h in members))


def area_of(arch, dataflow: str | None = None, dtype: str = "int8") -> Area:
    """The area of ``arch`` built as ``dataflow`` (default: its own; ``hybrid``: its members
    behind one shared memory) for ``dtype``."""
    return price_area(hardware_of(arch, dataflow or arch.dataflow, dtype), arch.area, dtype)
