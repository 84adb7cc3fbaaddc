"""Timing helpers for the benchmarks: best of several runs, ratios printed, never asserted."""

from __future__ import annotations

import time


def best_time(fn, repeat: int = 3) -> float:
    """Shortest wall time of ``repeat`` calls of ``fn`` after one warm-up call (seconds)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def report(label: str, ours: float, theirs: float, their_name: str, target: str) -> None:
    """One line: both times and the ratio, with the target it is measured against."""
    print(f"{label}: npusim {ours:.3f} s, {their_name} {theirs:.3f} s, "
          f"ratio {ours / theirs:.2f}x (target: {target})")


def memory_line(*archs) -> str:
    """What memory a comparison of ``archs`` ran on: 'same memory: ...' when every arch has
    the same buffers and bandwidths, else 'UNEQUAL memory: ...' naming each (print it with
    every comparison of machines)."""
    from npusim.arch.spec import describe_memory, same_memory

    if same_memory(archs):
        return f"same memory: {describe_memory(archs[0].memory)}"
    return "UNEQUAL memory: " + "; ".join(f"{a.name}: {describe_memory(a.memory)}" for a in archs)
