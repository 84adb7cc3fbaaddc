"""Packages whose exported names are imported on first use, not when the package is.

``import npusim.cli`` runs ``npusim/__init__.py`` first; if that imported the simulator, every
command, ``npusim --help`` included, would pay for numpy, the machines and the reports. A
package instead declares where each of its names lives::

    from .lazy import lazy_exports

    __all__ = lazy_exports(__name__, {".simulate": ("simulate", "SimResult"), ".arch": ("Arch",)})

and ``npusim.simulate`` imports ``npusim.simulate`` (the module) the first time the name is
read, then keeps the object (PEP 562 attribute access, through the package's module class).
A name that is also its submodule's (the function ``npusim.simulate`` in the module
``npusim.simulate``) stays the exported object however the submodule was first imported: the
import system's binding of the submodule on the package is not kept, as with the eager
``from .simulate import simulate`` this replaces. numba's kernels are deferred the same way
by ``npusim.jit``; optional libraries (torch, onnx, matplotlib, Pillow) are imported inside
the functions that use them. A registry of things that modules define when imported (the
machines, their arch sections) is a ``LazyRegistry``: its built-in entries' modules are
imported when an entry is first read, not when the registry is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import MutableMapping


class LazyPackage(types.ModuleType):
    """A package module whose ``_lazy_exports`` (name -> defining submodule, relative) are
    imported when first read."""

    _lazy_exports: dict[str, str]

    def __getattr__(self, name: str):  # only reached when the name is not yet bound
        where = self._lazy_exports.get(name)
        if where is not None:
            value = getattr(importlib.import_module(where, self.__name__), name)
        elif not name.startswith("__") and importlib.util.find_spec(f"{self.__name__}.{name}"):
            value = importlib.import_module(f"{self.__name__}.{name}")  # a submodule, as an
            # eager package made it an attribute (``npusim.arch``) when it imported it
        else:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value) -> None:
        if (name in self._lazy_exports and isinstance(value, types.ModuleType)
                and value.__name__ == f"{self.__name__}.{name}"):
            return  # the import system binding a submodule whose name an export takes
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._lazy_exports})


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]) -> list[str]:
    """Make the (already executing) package ``package`` a ``LazyPackage`` exporting
    ``exports`` (submodule, relative to the package -> the names it defines); returns the
    exported names, sorted, for ``__all__``."""
    module = sys.modules[package]
    module.__dict__["_lazy_exports"] = {name: where for where, names in exports.items()
                                        for name in names}
    module.__class__ = LazyPackage
    return sorted(module._lazy_exports)


class LazyRegistry(MutableMapping):
    """Name -> what a module registers under it: the built-in names (``modules``: name -> the
    module, absolute, that registers it when imported) and any other registered. A built-in
    entry's module is imported the first time the entry is read; listing the names, or
    testing one, imports none. Built-in names come first, in ``modules``' order."""

    def __init__(self, modules: dict[str, str]):
        self.modules = modules
        self._made: dict[str, object] = {}

    def __getitem__(self, name: str):
        if name not in self._made and name in self.modules:
            importlib.import_module(self.modules[name])
        return self._made[name]

    def __setitem__(self, name: str, value) -> None:
        self._made[name] = value

    def __delitem__(self, name: str) -> None:
        del self._made[name]

    def __iter__(self):
        return iter([*self.modules, *(name for name in self._made if name not in self.modules)])

    def __len__(self) -> int:
        return len({*self.modules, *self._made})

    def __contains__(self, name) -> bool:
        return name in self.modules or name in self._made
