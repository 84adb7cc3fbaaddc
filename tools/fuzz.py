"""Fuzz every machine preset with random convolutions, against independent references.

Each random layer (any stride, dilation, padding up to and beyond the kernel, groups and
depthwise with channel multipliers, non-square kernels and maps, 1x1 maps, batch 1-3,
0-99 % zeros in the input and in the weights) runs on every preset through
``npusim.conv2d``, and is checked:

- float32 outputs against torch's conv2d in float64 (relative error <= 1e-4);
- int8 outputs (int8 x and w, int32 bias) against torch's conv2d in float64, which is exact
  for these sums (|sum| < 2**53): the accumulators must be equal;
- invariants of the stats: ``dense_macs == N*K*Ho*Wo*(C/groups)*R*S``, ``macs <=
  dense_macs``, ``macs <= products``, ``cycles >= ceil(macs / multipliers)``, ``cycles ==
  compute + stall cycles``, and ``cycles`` at least the DRAM floor (the bytes moved over the
  preset's bandwidth);
- on layers small enough, the cycle emulator: the same outputs (int8 bit-identical) and the
  same cycles, MACs, products, bytes per operand and level, stalls and energy as the fast model.

A layer a machine refuses (``supports``) is counted as refused, not as a failure.

    python tools/fuzz.py --layers 10000            # all presets, both cores
    python tools/fuzz.py --layers 200 --jobs 1     # a quick look

Prints, per preset: layers run, refused, failures by check, and the worst float32 error.
Exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

FLOAT_TOL = 1e-4
EMULATE_STEPS = 20_000  # emulator work (steps of about 1 us) at or below which a layer is emulated
STAT_FIELDS = ("cycles", "macs", "products", "compute_cycles", "sram_ifmap_bytes",
               "sram_filter_bytes", "sram_ofmap_bytes", "dram_ifmap_bytes",
               "dram_filter_bytes", "dram_ofmap_bytes", "stall_dram_ifmap_cycles",
               "stall_dram_filter_cycles", "stall_dram_ofmap_cycles", "stall_sram_cycles")


@dataclass(frozen=True)
class Case:
    """One random convolution: the torch-style arguments and the tensors' seed."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    groups: int
    bias: bool
    x_zeros: float
    w_zeros: float
    seed: int

    def out_hw(self) -> tuple[int, int]:
        t, b, le, ri = self.padding
        ho = (self.h + t + b - self.dilation[0] * (self.r - 1) - 1) // self.stride[0] + 1
        wo = (self.w + le + ri - self.dilation[1] * (self.s - 1) - 1) // self.stride[1] + 1
        return ho, wo

    def dense_macs(self) -> int:
        ho, wo = self.out_hw()
        return self.n * self.k * ho * wo * (self.c // self.groups) * self.r * self.s


def random_case(rng: np.random.Generator, seed: int) -> Case:
    """A valid random convolution (output at least 1x1), small enough to run in ms."""
    while True:
        groups = int(rng.choice([1, 1, 1, 2, 3, 4]))
        depthwise = groups > 1 and rng.random() < 0.4
        cg = 1 if depthwise else int(rng.integers(1, 9))
        mult = int(rng.integers(1, 4)) if depthwise else int(rng.integers(1, 9))
        r, s = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        dil = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        stride = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        pad = tuple(int(rng.integers(0, 7)) for _ in range(4))  # up to and beyond the kernel
        h = 1 if rng.random() < 0.08 else int(rng.integers(1, 24))
        w = 1 if rng.random() < 0.08 else int(rng.integers(1, 24))
        case = Case(int(rng.integers(1, 4)), cg * groups, h, w, mult * groups, r, s, stride,
                    pad, dil, groups, bool(rng.random() < 0.5),
                    float(rng.choice([0.0, rng.random() * 0.99])),
                    float(rng.choice([0.0, rng.random() * 0.99])), seed)
        ho, wo = case.out_hw()
        if ho >= 1 and wo >= 1:
            return case


def tensors(case: Case, dtype: str):
    """x, w, bias of ``case``: int8 (int32 bias) or float32, with the case's zero shares."""
    rng = np.random.default_rng(case.seed)
    xs, ws = (case.n, case.c, case.h, case.w), (case.k, case.c // case.groups, case.r, case.s)
    if dtype == "int8":
        x = rng.integers(-128, 128, xs).astype(np.int8)
        w = rng.integers(-128, 128, ws).astype(np.int8)
        b = rng.integers(-5000, 5000, case.k).astype(np.int32) if case.bias else None
    else:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        b = rng.standard_normal(case.k).astype(np.float32) if case.bias else None
    x[rng.random(xs) < case.x_zeros] = 0
    w[rng.random(ws) < case.w_zeros] = 0
    return x, w, b


def torch_reference(case: Case, x, w, b) -> np.ndarray:
    """torch's conv2d in float64: exact for int8 operands, the float reference otherwise."""
    import torch
    import torch.nn.functional as F

    t, bo, le, ri = case.padding
    xt = F.pad(torch.from_numpy(x.astype(np.float64)), (le, ri, t, bo))
    bt = None if b is None else torch.from_numpy(b.astype(np.float64))
    return F.conv2d(xt, torch.from_numpy(w.astype(np.float64)), bt, case.stride, 0,
                    case.dilation, case.groups).numpy()


@dataclass
class Tally:
    """What one preset went through: counts of layers, refusals, failures by check."""

    layers: int = 0
    refused: int = 0
    emulated: int = 0
    failures: Counter = field(default_factory=Counter)
    worst_float: float = 0.0
    examples: list = field(default_factory=list)

    def fail(self, check: str, case: Case, detail: str) -> None:
        self.failures[check] += 1
        if len(self.examples) < 5:
            self.examples.append(f"{check}: {detail}; {case}")

    def merge(self, other: Tally) -> None:
        self.layers += other.layers
        self.refused += other.refused
        self.emulated += other.emulated
        self.failures.update(other.failures)
        self.worst_float = max(self.worst_float, other.worst_float)
        self.examples += other.examples[: max(0, 5 - len(self.examples))]


def memory_floor(st, arch) -> int:
    """The fewest cycles the DRAM traffic allows: bytes over the bandwidth (per channel)."""
    bw = arch.memory.dram_bytes_per_cycle
    if bw == "unlimited":
        return 0
    if arch.memory.dram_channels == "per-operand":
        moved = max(st.dram_ifmap_bytes, st.dram_filter_bytes, st.dram_ofmap_bytes)
    else:
        moved = st.dram_bytes
    return math.floor(moved / bw)


def check_stats(st, case: Case, arch, tally: Tally) -> None:
    """The invariants every machine's stats must hold."""
    if st.dense_macs != case.dense_macs():
        tally.fail("dense_macs", case, f"{st.dense_macs} != {case.dense_macs()}")
    if not st.macs <= st.dense_macs:
        tally.fail("macs<=dense", case, f"{st.macs} > {st.dense_macs}")
    if not st.macs <= st.products:
        tally.fail("macs<=products", case, f"{st.macs} > {st.products}")
    multipliers = st.pe_cycles // st.cycles if st.cycles else 0
    if multipliers and st.cycles < -(-st.macs // multipliers):
        tally.fail("cycles>=macs/mult", case, f"{st.cycles} < {st.macs}/{multipliers}")
    if st.cycles != st.compute_cycles + st.stall_cycles:
        tally.fail("cycles=compute+stalls", case,
                   f"{st.cycles} != {st.compute_cycles} + {st.stall_cycles}")
    floor = memory_floor(st, arch)
    if st.cycles < floor:
        tally.fail("cycles>=dram floor", case, f"{st.cycles} < {floor}")


def check_emulator(case: Case, x, w, b, preset: str, out, st, tally: Tally) -> None:
    """Emulator against the fast model on a small layer: outputs and every counted field."""
    import npusim

    try:
        eo, est = npusim.conv2d(x, w, b, case.stride, case.padding, case.dilation, case.groups,
                                dataflow=npusim.load_arch(preset).dataflow, arch=preset,
                                dtype="int8" if x.dtype == np.int8 else "float32",
                                emulate=True)
    except npusim.NpusimError as e:
        tally.fail("emulator raised", case, str(e)[:120])
        return
    tally.emulated += 1
    if x.dtype == np.int8 and not np.array_equal(eo, out):
        tally.fail("emulator output", case, "int8 outputs differ")
    elif x.dtype != np.int8 and not np.allclose(eo, out, rtol=1e-5, atol=1e-5):
        tally.fail("emulator output", case, f"max diff {np.abs(eo - out).max():.3g}")
    for name in STAT_FIELDS:
        if getattr(est, name) != getattr(st, name):
            tally.fail(f"emulator {name}", case, f"{getattr(est, name)} != {getattr(st, name)}")
    if not math.isclose(est.energy_pj, st.energy_pj, rel_tol=1e-9, abs_tol=1e-6):
        tally.fail("emulator energy_pj", case, f"{est.energy_pj} != {st.energy_pj}")


def run_case(case: Case, preset: str, tally: Tally, emulate: bool) -> None:
    """``case`` on ``preset`` in float32 and in int8, every check."""
    import npusim
    from npusim.dataflows import get

    arch = npusim.load_arch(preset)
    df = get(arch.dataflow)
    for dtype in ("float32", "int8"):
        x, w, b = tensors(case, dtype)
        try:
            out, st = npusim.conv2d(x, w, b, case.stride, case.padding, case.dilation,
                                    case.groups, dataflow=arch.dataflow, arch=arch)
        except npusim.NpusimError as e:
            if "cannot run it" in str(e):
                tally.refused += 1
                return
            tally.fail("raised", case, str(e)[:160])
            continue
        tally.layers += dtype == "float32"
        ref = torch_reference(case, x, w, b)
        if dtype == "int8":
            if not np.array_equal(out.astype(np.int64), ref.astype(np.int64)):
                tally.fail("int8 exact", case, f"max diff {np.abs(out - ref).max()}")
        else:
            scale = float(np.abs(ref).max()) or 1.0
            err = float(np.abs(out.astype(np.float64) - ref).max()) / scale
            tally.worst_float = max(tally.worst_float, err)
            if not err <= FLOAT_TOL:
                tally.fail("float32 vs torch", case, f"relative error {err:.3g}")
        check_stats(st, case, arch, tally)
        if emulate:
            layer = npusim.ConvLayer(case.n, case.c, case.h, case.w, case.k, case.r, case.s,
                                     case.stride, case.padding, case.dilation, case.groups,
                                     case.bias, "fuzz", dtype)
            if df.emulate_steps(layer, arch) <= EMULATE_STEPS:
                check_emulator(case, x, w, b, preset, out, st, tally)


def run_chunk(seeds: list[int], presets: list[str], emulate: bool) -> dict[str, Tally]:
    """A worker's share: each seed's random layer on every preset."""
    import torch

    torch.set_num_threads(1)
    tallies = {p: Tally() for p in presets}
    for seed in seeds:
        case = random_case(np.random.default_rng(seed), seed)
        for preset in presets:
            run_case(case, preset, tallies[preset], emulate)
    return tallies


def machine_presets() -> list[str]:
    """The presets of one machine each (a hybrid's choice among machines is checked against
    each machine alone by tests/test_hybrid.py)."""
    import npusim
    from npusim.dataflows import names

    return [p for p in npusim.presets() if npusim.load_arch(p).dataflow in names()]


def main(argv=None) -> int:

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=10_000, help="random layers (default 10000)")
    ap.add_argument("--seed", type=int, default=0, help="first layer's seed")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                    help="worker processes (default: the usable cores)")
    ap.add_argument("--presets", default=",".join(machine_presets()),
                    help="comma-separated presets (default: every single-machine preset)")
    ap.add_argument("--no-emulate", action="store_true", help="skip the emulator checks")
    args = ap.parse_args(argv)
    presets = args.presets.split(",")
    seeds = list(range(args.seed, args.seed + args.layers))
    chunks = [seeds[i:i + 50] for i in range(0, len(seeds), 50)]
    totals = defaultdict(Tally)
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_chunk, c, presets, not args.no_emulate) for c in chunks]
        for done, fut in enumerate(futures, 1):
            for preset, tally in fut.result().items():
                totals[preset].merge(tally)
            print(f"\r{done * 50 if done < len(chunks) else len(seeds)} of {len(seeds)} layers",
                  end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(f"{len(seeds)} random layers x {len(presets)} presets in "
          f"{time.perf_counter() - start:.0f} s on {args.jobs} processes")
    print(f"{'preset':24} {'run':>7} {'refused':>7} {'emulated':>8} {'failures':>8} "
          f"{'worst f32 err':>13}")
    failed = 0
    for preset in presets:
        t = totals[preset]
        n_fail = sum(t.failures.values())
        failed += n_fail
        print(f"{preset:24} {t.layers:7} {t.refused:7} {t.emulated:8} {n_fail:8} "
              f"{t.worst_float:13.2e}")
        for check, count in sorted(t.failures.items()):
            print(f"    {check}: {count}")
        for example in t.examples:
            print(f"    e.g. {example}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
