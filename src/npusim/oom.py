"""The command line's guard against the kernel's out-of-memory killer.

On Linux, a process that allocates past the memory the machine has is killed by the kernel
(SIGKILL: exit 137, no word), and the kernel may kill others first. ``cap`` sets the soft
limit of the process's address space to what it maps now plus the memory the machine has
available (``MemAvailable`` + ``SwapFree``), so that such an allocation fails as a
``MemoryError`` instead, which the command line reports in one line naming the flag to
lower (exit 2). ``NPUSIM_MAX_MEMORY`` (bytes, or with a K, M or G suffix: binary units)
sets the limit instead; ``off`` sets none. A lower limit already set (``ulimit -v``) is
kept. The command line alone sets it (``cli.main`` with no arguments): a library caller's
process is its own.
"""

from __future__ import annotations

import os

from .errors import InputError

ENV = "NPUSIM_MAX_MEMORY"
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def cap(environ=os.environ) -> int | None:
    """Set the address-space limit (bytes) and return it, or None where none is set."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    asked = environ.get(ENV, "").strip()
    if asked.lower() == "off":
        return None
    limit = parse(asked) if asked else free_limit()
    if limit is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft <= limit:
        return soft
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


def parse(text: str) -> int:
    """Bytes from ``NPUSIM_MAX_MEMORY``'s text ('8G', '512M', '1073741824')."""
    number, unit = text.rstrip("KMGkmgBb"), text[len(text.rstrip("KMGkmgBb")):].upper()
    unit = unit.removesuffix("B")
    try:
        value = float(number) * UNITS[unit]
    except (ValueError, KeyError):
        value = 0
    if not value >= 1 << 20:
        raise InputError(f"{ENV}={text!r}: give bytes, or with K, M or G (e.g. 8G), at least "
                         "1M; or 'off' for no limit")
    return int(value)


def free_limit(status: str | None = None, meminfo: str | None = None) -> int | None:
    """What the process maps now (``VmSize``) plus the memory available to it
    (``MemAvailable`` + ``SwapFree``), in bytes; None where /proc does not say."""
    try:
        status = status if status is not None else _read("/proc/self/status")
        meminfo = meminfo if meminfo is not None else _read("/proc/meminfo")
    except OSError:
        return None
    mapped, fields = _kib(status).get("VmSize"), _kib(meminfo)
    if mapped is None or "MemAvailable" not in fields:
        return None
    return (mapped + fields["MemAvailable"] + fields.get("SwapFree", 0)) * 1024


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _kib(text: str) -> dict[str, int]:
    """The ``Key: N kB`` lines of a /proc file, in KiB."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[key.strip()] = int(parts[0])
    return out
