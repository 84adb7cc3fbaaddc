"""The sections of an arch file that belong to one machine: ``[systolic]``, ``[input-reuse]``,
``[sparse-pairs]``, ``[dilated-grid]``, ``[group-tile]`` and ``[hybrid]``.

Each is the frozen dataclass its machine reads (``dataflows.systolic.Params`` is ``Systolic``),
declared to the loader here (``spec.declare_section``) in a module that imports no machine and no
numpy: loading an arch file, or listing the presets (``npusim archs``), needs only these. The few
properties that compute with a machine's own code import it when read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigError
from .spec import (
    MAX_KIB,
    MAX_LEVELS,
    MAX_REGION,
    MAX_SIDE,
    MAX_UNITS,
    declare_section,
    declared_sections,
    spec,
)

LOOP_ORDERS = ("tile-major", "map-major")
"""dilated-grid: where partial sums accumulate across input maps."""
POLICIES = ("in-order", "similar-density", "equal-work")
"""sparse-pairs: how kernels are grouped (``dataflows.grouping``)."""
DEALINGS = ("weight-groups", "pixel-slices")
"""sparse-pairs: what the groups are dealt (``dataflows.grouping``)."""
OBJECTIVES = ("cycles", "energy", "energy-delay")
"""hybrid: what the compiler minimises per layer (``hybrid.OBJECTIVES`` computes each)."""
HYBRID = "hybrid"


@dataclass(frozen=True)
class Systolic:
    """The ``[systolic]`` section of an arch file."""

    rows: int = spec(32, "PEs", min=1, max=MAX_SIDE)
    cols: int = spec(32, "PEs", min=1, max=MAX_SIDE)
    stationary: str = spec("ws", "operand held in the PEs", choices=("os", "ws", "is"))
    stream_tile: int = spec(0, "streamed vectors per fold in WS/IS (0: all, as SCALE-Sim)",
                            min=0, max=MAX_UNITS)
    reconfig_units = 1  # the array loads one mapping per layer (memory.reconfig_cycles)


@dataclass(frozen=True)
class InputReuse:
    """The ``[input-reuse]`` section of an arch file."""
    reconfig_units = property(lambda p: p.operation_units)  # each loads its kernels

    region_rows: int = spec(4, "pixels (n of an n x m region)", min=1, max=MAX_REGION)
    region_cols: int = spec(4, "pixels (m of an n x m region)", min=1, max=MAX_REGION)
    region_channels: int = spec(1, "channels (l of an n x m x l region)", min=1,
                                  max=MAX_SIDE)
    operation_units: int = spec(16, "operation units (dispatcher + PUs + first buffer)", min=1,
                                  max=MAX_SIDE)
    processing_units: int = spec(4, "processing units per operation unit (kernels)",
                                   min=1, max=MAX_SIDE)
    accumulators: int = spec(36, "partial-OFM pixels per processing unit (Fig. 6: MUX, "
                             "adder and register each)", min=1, max=MAX_UNITS)
    mux_fan_in: int = spec(9, "products one accumulator's MUX selects from (Fig. 6)", min=1,
                           max=MAX_UNITS)
    mapping: str = spec("spread", "jobs to operation units: spread (round robin over the "
                        "run order) or own-unit (each region's dispatcher serves its own "
                        "unit, Fig. 11: region t on unit t mod U)",
                        choices=("spread", "own-unit"))
    interconnect: str = spec("bus", "partial-OFM links", choices=("full", "bus", "chain"))
    bus_width: int = spec(64, "partial-OFM pixels per transfer cycle", min=1,
                           max=MAX_UNITS)
    output_units: int = spec(4, "output units (full: one receiving port each)", min=1,
                              max=MAX_SIDE)
    work_stealing: bool = spec(True, "idle processing units take weight cycles")
    first_buffer_kb: int = spec(16, "KiB per operation unit for partial OFMs", min=1,
                                 max=MAX_KIB)
    second_buffer_kb: int = spec(32, "KiB per output unit (chain: per operation unit) for "
                                 "the output accumulators", min=1, max=MAX_KIB)

    @property
    def multipliers(self) -> int:
        """Multipliers of the device: one per region pixel, per PU, per operation unit."""
        return (self.operation_units * self.processing_units * self.region_rows
                * self.region_cols * self.region_channels)

    @property
    def geometry(self):
        """The datapath's ``region_work.Geometry`` (imported here: the machine's own code)."""
        from ..dataflows.region_work import Geometry

        return Geometry(self.region, self.region_channels, self.processing_units,
                        self.accumulators, self.mux_fan_in, self.work_stealing)

    @property
    def region(self) -> tuple[int, int]:
        """Rows and columns of a region (pixels)."""
        return self.region_rows, self.region_cols

    def plan(self, layer):
        """The ``ConvLayer``'s phases, region grid and kernel parts on this datapath."""
        from ..dataflows.phases import plan

        return plan(layer, self.region, self.accumulators, self.mux_fan_in)


@dataclass(frozen=True)
class SparsePairs:
    """The ``[sparse-pairs]`` section of an arch file. Multipliers = groups x processors."""
    reconfig_units = property(lambda p: p.processor_groups)  # each loads its weight group

    processor_groups: int = spec(32, "processor groups", min=1, max=MAX_SIDE)
    processors_per_group: int = spec(32, "processors (one multiplier each) per group", min=1,
                                      max=MAX_SIDE)
    grouping: str = spec("similar-density", "weight grouping policy", choices=POLICIES)
    dealing: str = spec("weight-groups", "work dealt by", choices=DEALINGS)
    kernel_store_bytes: int = spec(2048, "bytes of kernel storage per processor (bit vector "
                                   "+ non-zero weights)", min=1, max=MAX_KIB * 1024)
    fetch_bits_per_cycle: int = spec(256, "bits the AND and priority encoder take per cycle",
                                     min=1, max=MAX_UNITS)

    @property
    def processors(self) -> int:
        return self.processor_groups * self.processors_per_group


@dataclass(frozen=True)
class DilatedGrid:
    """The ``[dilated-grid]`` section of an arch file. MACs = mac_rows x mac_cols."""
    reconfig_units = 1  # one grid loads its coefficients

    grid_rows: int = spec(6, "pixel storage units (vertical)", min=1, max=MAX_SIDE)
    grid_cols: int = spec(6, "pixel storage units (horizontal)", min=1,
                          max=MAX_SIDE)
    coef_rows: int = spec(3, "coefficient storage units (vertical)", min=1,
                          max=MAX_SIDE)
    coef_cols: int = spec(3, "coefficient storage units (horizontal)", min=1,
                          max=MAX_SIDE)
    mac_rows: int = spec(2, "MACs = type-A pixel units (vertical)", min=1,
                         max=MAX_SIDE)
    mac_cols: int = spec(2, "MACs = type-A pixel units (horizontal)", min=1,
                         max=MAX_SIDE)
    shifter: str = spec("hierarchical", "pixel shift network", choices=("flat", "hierarchical"))
    levels: int = spec(3, "hierarchical shifter levels H (R up to 2**H - 1)", min=1,
                       max=MAX_LEVELS)
    load_pixels_per_cycle: int = spec(6, "contiguous pixels of one row written per cycle",
                                      min=1, max=MAX_SIDE)
    double_buffer: bool = spec(True, "load the next pixel set while stepping")
    coef_loads_per_cycle: int = spec(3, "coefficients of one filter row written into the "
                                        "coefficient storage per cycle", min=1, max=MAX_SIDE)
    result_words_per_cycle: int = spec(4, "MAC registers written to (or read from) the "
                                          "result memory per cycle", min=1, max=MAX_SIDE)
    loop_order: str = spec("tile-major", "where partial sums accumulate across input maps",
                           choices=LOOP_ORDERS)

    def __post_init__(self):
        for mac, grid in (("mac_rows", "grid_rows"), ("mac_cols", "grid_cols")):
            if getattr(self, mac) > getattr(self, grid):
                raise ConfigError(f"dilated-grid.{mac}={getattr(self, mac)}: must be <= "
                                  f"{grid}={getattr(self, grid)} (type-A units lie in the grid)")

    @property
    def macs(self) -> int:
        return self.mac_rows * self.mac_cols

    @property
    def result_cycles(self) -> int:
        """Cycles the MAC unit spends moving its M x N registers to or from the result
        memory (S1512 writes them; the map-major order reads them back, S1505)."""
        return math.ceil(self.macs / self.result_words_per_cycle)

    @property
    def reach(self) -> int:
        """Largest pixel step of one cycle (pixels)."""
        from ..dataflows import shift_grid

        return shift_grid.max_rate(self.shifter, self.levels)

    @property
    def links(self) -> int:
        """Wires of the pixel shift network (links), H x one level's for the hierarchy."""
        from ..dataflows import shift_grid

        return shift_grid.shifter_links(self.grid_rows, self.grid_cols, self.shifter,
                                        self.levels)


@dataclass(frozen=True)
class GroupTile:
    """The ``[group-tile]`` section of an arch file."""
    reconfig_units = property(lambda p: p.tiles)  # each loads its parameters

    macs: int = spec(64, "MAC cells per tile (compute unit), e.g. 32 or 64", min=1,
                     max=MAX_SIDE)
    tiles: int = spec(1, "compute tiles the loop nest is split across", min=1,
                      max=MAX_SIDE)
    bus_inputs: int = spec(1, "distinct activations the input bus carries per cycle "
                           "(1 = broadcast to one MAC subset)", min=1, max=MAX_SIDE)
    wide_words_per_cycle: int = spec(16, "32-bit words the wide (weight) memory reads per cycle",
                                     min=1, max=MAX_UNITS)
    output_bus_values: int = spec(16, "sum-register values the output bus drains per cycle",
                                  min=1, max=MAX_UNITS)
    narrow_kb: int = spec(0, "KiB of narrow memory (activations) per tile; 0 = an even "
                          "share of the [memory] ifmap SRAM", min=0, max=MAX_KIB)
    wide_kb: int = spec(0, "KiB of wide memory (weights) per tile; 0 = an even share of "
                        "the [memory] filter SRAM", min=0, max=MAX_KIB)


@dataclass(frozen=True)
class Hybrid:
    """The ``[hybrid]`` section: the member machines and the objective of the compiler."""

    machines: tuple[str, ...] = spec(("sparse-pairs", "dilated-grid", "group-tile"),
                                     "member machine names, in the order ties go")
    objective: str = spec("cycles", "what each layer's choice minimises",
                          choices=OBJECTIVES)

    def validate(self, where: str) -> None:
        """Refuse fewer than two members, a repeated one or an unknown one; ``where`` names
        the arch file (or preset) and section in the message."""
        machines = machine_names()
        where, valid = f"{where}.machines", ", ".join(machines)
        if len(self.machines) < 2:
            raise ConfigError(f"{where}={list(self.machines)}: a hybrid needs at least two "
                              f"machines (of {valid})")
        if len(set(self.machines)) != len(self.machines):
            raise ConfigError(f"{where}={list(self.machines)}: a machine is listed twice")
        for i, machine in enumerate(self.machines):
            if machine not in machines:
                raise ConfigError(f"{where}[{i}]={machine!r}: must be one of {valid}")


for _name, _section in {"systolic": Systolic, "input-reuse": InputReuse,
                        "sparse-pairs": SparsePairs, "dilated-grid": DilatedGrid,
                        "group-tile": GroupTile, HYBRID: Hybrid}.items():
    declare_section(_name, _section)


def machine_names() -> list[str]:
    """The declared machines' names, sorted: every section's but the hybrid's."""
    return sorted(name for name in declared_sections() if name != HYBRID)
