"""Hardware descriptions: ``Arch`` (TOML, validated once) and the built-in presets."""

from .spec import Arch, Energy, Memory, VectorUnit, from_mapping, load_arch, presets, spec

__all__ = ["Arch", "Energy", "Memory", "VectorUnit", "from_mapping", "load_arch", "presets", "spec"]
