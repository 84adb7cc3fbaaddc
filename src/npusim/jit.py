"""numba's ``njit`` and ``intrinsic``, applied when a kernel is first called, not at import.

Importing numba (and the llvmlite and scipy it loads) takes about 150 ms, more than
everything else ``npusim`` imports; ``npusim --help``, ``npusim models`` and a
shape-only run call no compiled kernel and should not pay it. A kernel written::

    from ..jit import njit

    @njit(cache=True, nogil=True)
    def _kernel(...): ...

is a ``LazyKernel`` until something calls it. The first call imports numba and
compiles every ``LazyKernel`` created so far with the options it was given (numba
itself compiles each on its first call with argument types, as before), and replaces
them in the globals of the modules that define or import them, so a compiled kernel
that calls another finds a numba dispatcher there, as numba needs. The kernels, their
options, their on-disk cache and their results are numba's own; only the moment of
``import numba`` moves, and the caches are dropped when the package's sources change
(``drop_stale_caches``: numba checks only a kernel's own file).
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

_PENDING: list[LazyKernel] = []  # created, not yet handed to numba
_LOCK = threading.Lock()  # in_parallel may make the first call from several threads at once


class LazyKernel:
    """A function to be decorated by numba's ``njit`` (or ``intrinsic``) on first use."""

    def __init__(self, py_func, decorate: str, options: dict):
        functools.update_wrapper(self, py_func)
        self.py_func, self._decorate, self._options = py_func, decorate, options
        self._compiled = None
        _PENDING.append(self)

    def compiled(self):
        """The numba dispatcher (or intrinsic) of this kernel, importing numba if need be."""
        if self._compiled is None:
            _resolve_pending()
        return self._compiled

    def __call__(self, *args):
        return self.compiled()(*args)

    def __repr__(self) -> str:
        return f"<LazyKernel {self.__module__}.{self.__qualname__}>"


def _numba_object(lazy: LazyKernel):
    """numba's dispatcher (or intrinsic) of ``lazy``: its decorator applied as written."""
    import numba
    import numba.extending

    if lazy._decorate == "njit":
        return numba.njit(lazy.py_func, **lazy._options)
    if lazy._options:  # numba's intrinsic takes options only as intrinsic(**options)(func)
        return numba.extending.intrinsic(**lazy._options)(lazy.py_func)
    return numba.extending.intrinsic(lazy.py_func)


STAMP = "numba-sources.sha256"  # beside the package's own numba caches


def drop_stale_caches(package: Path) -> bool:
    """Remove the numba caches in ``package``'s ``__pycache__`` folders unless they were made
    from its sources as they are now (their digest, stamped beside them); True if removed.

    numba keys a cached kernel on its own file's time stamp alone, and the machine code it
    keeps holds the kernels it calls: after an update that changes a called kernel in
    another file (``engine.split_phases``, called from ``bitconv``), the caller would load
    the old callee from its cache. The sources of every module that holds kernels are
    hashed instead (a few ms, once a process, when the first kernel is used); a change in
    any drops every cache (the next run recompiles, about 6 s). A package where nothing can
    be written (numba then caches elsewhere, by its own rule) is left as it is. hashlib
    (with OpenSSL, 6-10 ms) is imported here, beside numba, not by a shape-only run."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        source = path.read_bytes()
        if b"@njit" in source or b"@intrinsic" in source:  # the files that hold kernels
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + source)
    stamp = package / "__pycache__" / STAMP
    try:
        made_from = stamp.read_text()
    except OSError:  # none yet: caches of unknown sources
        made_from = None
    if made_from == digest.hexdigest():
        return False
    try:
        for cache in [*package.rglob("__pycache__/*.nbi"), *package.rglob("__pycache__/*.nbc")]:
            cache.unlink(missing_ok=True)
        stamp.parent.mkdir(exist_ok=True)
        stamp.write_text(digest.hexdigest())
    except OSError:
        return False
    return True


@functools.cache
def _caches_checked() -> None:
    """``drop_stale_caches`` of npusim itself, once a process."""
    drop_stale_caches(Path(__file__).resolve().parent)


def _resolve_pending() -> None:
    """Hand every pending kernel to numba, then put the dispatchers in place of the lazy
    kernels in the globals of every module that holds one (the package's caches checked
    first: ``drop_stale_caches``)."""
    with _LOCK:
        _caches_checked()
        pending = list(_PENDING)
        for lazy in pending:
            if lazy._compiled is None:
                lazy._compiled = _numba_object(lazy)
        _PENDING.clear()
        spaces = {id(lazy.py_func.__globals__): lazy.py_func.__globals__ for lazy in pending}
        for space in spaces.values():
            _replace_in(space)


def _replace_in(namespace: dict) -> None:
    """Every resolved ``LazyKernel`` in ``namespace`` replaced by its numba object."""
    for name, value in list(namespace.items()):
        if isinstance(value, LazyKernel) and value._compiled is not None:
            namespace[name] = value._compiled


def _decorator(decorate: str, func, options: dict):
    if func is not None:
        return LazyKernel(func, decorate, options)
    return lambda f: LazyKernel(f, decorate, options)


def njit(func=None, **options):
    """``numba.njit(func, **options)``, applied on the first call of any kernel."""
    return _decorator("njit", func, options)


def intrinsic(func=None, **options):
    """``numba.extending.intrinsic(func, **options)``, applied with the kernels (its body
    must import what it needs from numba and llvmlite itself)."""
    return _decorator("intrinsic", func, options)
