"""The ``[input-reuse]`` section of an arch file: ``InputReuse``, the parameters
``dataflows.input_reuse`` reads."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ...errors import ConfigError
from ..spec import MAX_KIB, MAX_REGION, MAX_SIDE, MAX_UNITS, declare_section, spec


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

    def __post_init__(self):
        if self.multipliers > MAX_UNITS:  # five bounded fields multiply: bound the product
            raise ConfigError(
                f"input-reuse: operation_units x processing_units x region_rows x region_cols "
                f"x region_channels = {self.multipliers:,} multipliers: must be <= 2**24 "
                f"({MAX_UNITS:,}), the largest array the bounds allow (docs/arch.md, Bounds)")

    @property
    def multipliers(self) -> int:
        """Multipliers of the device: one per region pixel, per PU, per operation unit."""
        return (self.operation_units * self.processing_units * self.region_rows
                * self.region_cols * self.region_channels)

    @functools.cached_property  # asked for at every layer; the fields never change
    def geometry(self):
        """The datapath's ``region_work.Geometry`` (imported here: the machine's own code)."""
        from ...dataflows.region_work import Geometry

        return Geometry(self.region, self.region_channels, self.processing_units,
                        self.accumulators, self.mux_fan_in, self.work_stealing)

    @property
    def region(self) -> tuple[int, int]:
        """Rows and columns of a region (pixels)."""
        return self.region_rows, self.region_cols

    def plan(self, layer):
        """The ``ConvLayer``'s phases, region grid and kernel parts on this datapath."""
        from ...dataflows.phases import plan

        return plan(layer, self.region, self.accumulators, self.mux_fan_in)


declare_section("input-reuse", InputReuse)
