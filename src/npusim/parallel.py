"""Compiled kernels run over ranges of independent rows on a thread pool, one thread a core.

A kernel here is a numba function compiled with ``nogil=True`` whose last two arguments
are the first and the end row it computes; ``in_parallel`` cuts the rows into a few
chunks per thread (``threads``: the process's cores, or fewer if the user asks for
fewer), or runs them all in the calling thread when there is one. Idle pool threads
sleep, so they take no core from BLAS.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor


def cores() -> int:
    """Cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # platforms without affinity
        return os.cpu_count() or 1


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def threads() -> int:
    """Threads npusim keeps busy at once: the cores of its CPU affinity (``cores``), at most
    the smallest of ``OMP_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` a user set (a value
    that is no integer >= 1 is ignored, as OpenBLAS ignores it)."""
    n = cores()
    for var in THREAD_VARIABLES:
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) >= 1:
            n = min(n, int(value))
    return n


@functools.cache
def _pool() -> tuple[ThreadPoolExecutor | None, int]:
    """The row threads' pool (concurrent.futures, imported at first use) and its thread count
    (``threads()``, fixed at the first call); no pool for one thread, whose rows the caller
    runs itself (handing them to a single pool thread only adds its wake-up: a tenth to a
    third of a small network's estimate on one core)."""
    from concurrent.futures import ThreadPoolExecutor

    n = threads()
    return (ThreadPoolExecutor(n, thread_name_prefix="npusim-rows") if n > 1 else None), n


# A forked child (a sweep's pool worker) has none of its parent's threads: the pool it would
# inherit would queue rows for threads that do not exist, so a child starts its own.
os.register_at_fork(after_in_child=_pool.cache_clear)


def in_parallel(kernel, args: tuple, rows: int) -> None:
    """``kernel(*args, first, stop)`` over ``rows`` rows: in a few chunks per thread on the
    thread pool, or at once in the calling thread when npusim keeps one thread busy."""
    pool, n = _pool()
    if pool is None or rows <= 1:
        kernel(*args, 0, rows)
        return
    chunks = min(rows, 4 * n)
    jobs = [pool.submit(kernel, *args, rows * i // chunks, rows * (i + 1) // chunks)
            for i in range(chunks)]
    for job in jobs:
        job.result()
