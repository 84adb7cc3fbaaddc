"""The ``[hybrid]`` section of an arch file: ``Hybrid``, the members and objective ``npusim.hybrid``
reads."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from ..spec import OBJECTIVES, declare_section, spec
from . import machine_names


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


declare_section("hybrid", Hybrid)
