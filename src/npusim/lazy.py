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
the functions that use them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


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
