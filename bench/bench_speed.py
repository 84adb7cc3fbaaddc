"""Tool speed on every arch preset (``npusim archs``) and network: ``simulate`` (estimate /
run) over PyTorch eager inference of the same network, on one pinned core and on all cores.

Each core setting runs in a child process of its own, so that the thread pools of numpy's BLAS,
numba and torch start with it: one core is the process pinned to the last CPU of its affinity
(``os.sched_setaffinity``) with every library at one thread (``OMP_NUM_THREADS`` and its
kin = 1, ``torch.set_num_threads(1)``); all cores is the inherited affinity and the libraries'
own defaults. In a child, for each network and preset, ``--rounds`` rounds each time PyTorch,
then ``simulate(mode="estimate")``, then ``simulate(mode="run")``, one after the other, after
one warm-up of each (numba compiles there); on all cores each timed call starts ``SETTLE_S``
after the one before, once the threads of the library timed before have stopped spinning; a
cell is the median over rounds of the round's npusim / PyTorch ratio (a pair measured seconds
apart sees the same load); below each table the same cells follow as median times (ms),
npusim's and PyTorch's. Each one-core cell
over its target is profiled once more (``hot_spots``): its hot functions and its floor, the
seconds of the call in compiled work over PyTorch's.

The presets of the machines that skip zeros (input-reuse, sparse-pairs, and the hybrid,
whose members include sparse-pairs) run on weights magnitude-pruned to 0.3 density
(``npusim.frontends.prune``), the dense ones on the zoo's weights. Targets (issue 15):
estimate <= 2x and run <= 4x on every cell, one core. The peak resident memory of each
child is printed after its table, and then (issue 15, item 6: under 600 MiB) the peak of one
``simulate`` of ResNet-50 at batch 8 (``--peak-batch``) per mode on the systolic and the
sparse-pairs preset, each in a fresh child process of its own (``resource.getrusage``
``ru_maxrss``: imports, network and run).

The tables time warm calls: the costs that follow a layer's shapes, counted by a network's
first call on an arch, are kept for the later ones. Every point of a sweep is such a first
call, so the bench also prints each preset's first and second estimate of VGG-16
(``--first-network``), each preset in a fresh child pinned to one core, after a call on
ppocr-cls that loads the machine's compiled kernels, with the child's peak RSS.

Run: ``python bench/bench_speed.py [--rounds 3] [--cores one all] [--networks resnet18 ...]
[--presets systolic-32x32-ws ...] [--peak-batch 8]`` (the whole table takes about 7 minutes
on two cores; ``--peak-only`` prints the peak memory alone, ``--peak-batch 0`` skips it;
``--first-only`` the first calls alone, ``--first-network none`` skips them).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import time

MACHINES = ("systolic", "dilated-grid", "group-tile", "input-reuse", "sparse-pairs", "hybrid")
SPARSE_DENSITY = 0.3  # weights magnitude-pruned so for the machines that skip zeros
SPARSE_MACHINES = ("input-reuse", "sparse-pairs", "hybrid")


def preset_densities() -> dict[str, float | None]:
    """Every registered arch preset (``npusim archs``), machine by machine in ``MACHINES``'
    order, with the weight density it is timed on (None: the zoo's weights)."""
    from npusim.arch import load_arch, presets

    machine = {name: load_arch(name).dataflow for name in presets()}
    rank = {m: i for i, m in enumerate(MACHINES)}  # a machine not listed: last
    ordered = sorted(machine, key=lambda name: (rank.get(machine[name], len(rank)), name))
    return {name: SPARSE_DENSITY if machine[name] in SPARSE_MACHINES else None
            for name in ordered}


PRESETS = preset_densities()


def label(preset: str) -> str:
    """A table's name for ``preset``: with the weight density it runs on, if pruned."""
    return preset if PRESETS[preset] is None else f"{preset} ({PRESETS[preset]})"
NETWORKS = ("resnet18", "resnet50", "vgg16", "mobilenet_v2", "ppocr-cls")
TARGETS = {"estimate": 2.0, "run": 4.0}  # npusim / PyTorch on one core (issue 15)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS")


# seconds each timed call waits first where the libraries run several threads: an idle
# OpenBLAS thread spins about 0.1 s before it sleeps, and a call timed while the threads of
# the call before still spin shares the cores with them (PyTorch's ResNet-18 on two cores:
# 94 ms right after an npusim estimate, 76 ms after 0.05 s, 24-27 ms after 0.1-0.3 s)
SETTLE_S = 0.25


def seconds(fn, settle: float = 0.0) -> float:
    """Wall time of one call of ``fn`` (seconds), made ``settle`` seconds after the caller's
    last work."""
    time.sleep(settle)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cell(graph, x, module, xt, arch: str, rounds: int, settle: float = 0.0) -> dict:
    """Median npusim / torch ratios of one network on one preset, estimate and run; each
    timed call ``settle`` seconds after the one before (``SETTLE_S``)."""
    import torch

    import npusim

    def torch_call():
        with torch.inference_mode():
            module(xt)

    calls = {"torch": torch_call,
             "estimate": lambda: npusim.simulate(graph, x, arch, mode="estimate"),
             "run": lambda: npusim.simulate(graph, x, arch, mode="run")}
    for fn in calls.values():
        fn()  # warm-up: numba compiles, caches fill
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            times[name].append(seconds(fn, settle))
    ratio = {mode: statistics.median(t / ref for t, ref in
                                     zip(times[mode], times["torch"], strict=True))
             for mode in ("estimate", "run")}
    hot = {mode: hot_spots(calls[mode]) for mode in ratio
           if os.environ.get("OMP_NUM_THREADS") == "1" and ratio[mode] > TARGETS[mode]}
    own = {f"{name}_s": statistics.median(t) for name, t in times.items()}
    return {**ratio, **own, "hot_spots": hot}


POOL_WAIT = "<method 'acquire' of '_thread.lock' objects>"


def hot_spots(fn, top: int = 5) -> dict:
    """What bounds a cell, from one profiled call of ``fn`` (cProfile): the ``top`` functions
    by own time, each as its share of the call, the number of function calls made (many
    small calls: time spread over per-layer Python and numpy overheads), and the seconds of
    the call spent in compiled work (``compiled_s``): npusim's numba kernels
    (``compiled_kernels``) and the dense engine's functions (``engine.py``: its BLAS GEMMs
    and im2col copies), and of them the dense engine's (``engine_s``). Those seconds over
    PyTorch's time are the cell's floor: what it would read if every line of Python and
    every numpy call around the compiled work took no time; the engine's over PyTorch's, the
    part of it that computes the activations, a dense convolution PyTorch computes too.
    They are taken as seconds, not as a share of the profiled call: the profiler slows each
    Python call (a call of many small ones by 1.1-1.8x) and not the compiled work, so a
    share of the profiled call, times the cell's ratio, read low. The compiled kernels that
    ``in_parallel`` runs on the row pool show in cProfile as the caller's wait on a lock:
    that wait is given to the functions that called ``in_parallel``, in proportion to their
    time in it, and counted as compiled."""
    profile = cProfile.Profile()
    profile.runcall(fn)
    stats = pstats.Stats(profile).stats
    kernels = compiled_kernels()
    own: dict[str, float] = {}
    engine = machine = 0.0  # the dense engine's seconds; the machines' compiled kernels'
    for (file, line, name), (_, _, tt, _, _) in stats.items():
        if name != POOL_WAIT:
            key = f"{os.path.basename(file).removesuffix('.py')}.{name}" if file != "~" else name
            own[key] = own.get(key, 0.0) + tt
            if file.endswith(ENGINE):
                engine += tt
            elif (file, line, name) in kernels:
                machine += tt
    wait = sum(v[2] for k, v in stats.items() if k[2] == POOL_WAIT)
    pools = [v[4] for k, v in stats.items() if k[2] == "in_parallel"]
    started = {f"{os.path.basename(k[0]).removesuffix('.py')}.{k[2]} (row kernels)": v[3]
               for callers in pools for k, v in callers.items()}
    for key, ct in started.items():
        own[key] = own.get(key, 0.0) + wait * ct / (sum(started.values()) or 1.0)
    total = sum(own.values()) or 1.0
    spots = sorted(own.items(), key=lambda kv: -kv[1])[:top]
    calls = sum(v[1] for v in stats.values())
    return {"spots": ", ".join(f"{100 * t / total:.0f}% {name}" for name, t in spots)
            + f"; {calls} calls", "compiled_s": engine + machine + wait, "engine_s": engine}


ENGINE = os.path.join("npusim", "engine.py")


def compiled_kernels() -> set[tuple[str, int, str]]:
    """cProfile's keys (file, first line, name) of every numba kernel of npusim's loaded
    modules: the Python functions their dispatchers (or ``npusim.jit``'s lazy kernels)
    compile."""
    keys = set()
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] != "npusim":
            continue
        for value in list(vars(module).values()):
            code = getattr(getattr(value, "py_func", None), "__code__", None)
            if code is not None:
                keys.add((code.co_filename, code.co_firstlineno, code.co_name))
    return keys


def child(args) -> None:
    """Measure every cell in this process and print one JSON line per cell."""
    import torch

    from npusim.errors import NpusimError
    from npusim.frontends import zoo
    from npusim.frontends.prune import prune
    from npusim.torch_ref import to_torch

    if args.cores == "one":
        torch.set_num_threads(1)
    for name in args.networks:
        try:
            graph, x = zoo.build(name), zoo.input_for(name)
            module = to_torch(graph).eval()
        except (NpusimError, ImportError) as e:
            print(json.dumps({"network": name, "error": str(e)}), flush=True)
            continue
        xt = torch.from_numpy(x)
        for preset in args.presets:
            density = PRESETS[preset]
            g = graph if density is None else prune(graph, density)
            try:
                out = cell(g, x, module, xt, preset, args.rounds,
                           settle=0.0 if args.cores == "one" else SETTLE_S)
            except NpusimError as e:
                out = {"error": str(e)}
            print(json.dumps({"network": name, "preset": preset, **out}), flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_rss_mib": peak}), flush=True)


PEAK_NETWORK = "resnet50"
PEAK_PRESETS = ("systolic-32x32-ws", "sparse-pairs-32x32")
PEAK_TARGET_MIB = 600


def peak_child(network: str, preset: str, mode: str, batch: int) -> None:
    """One ``simulate`` of ``network`` at ``batch`` images; print the process's peak RSS."""
    import numpy as np

    import npusim
    from npusim.frontends import zoo
    from npusim.frontends.prune import prune

    graph, x = zoo.build(network), zoo.input_for(network)
    density = PRESETS[preset]
    graph = graph if density is None else prune(graph, density)
    x = np.repeat(x[:1], batch, axis=0)
    npusim.simulate(graph, x, preset, mode=mode)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, flush=True)


def peak_table(batch: int) -> None:
    """Peak RSS of one simulate per preset and mode, each in a fresh child."""
    print(f"\npeak RSS (MiB) of one simulate of {PEAK_NETWORK} at batch {batch}, a fresh process "
          f"each (target: < {PEAK_TARGET_MIB} MiB)")
    print("| preset | estimate | run |")
    print("| --- | --- | --- |")
    for preset in PEAK_PRESETS:
        cells = []
        for mode in ("estimate", "run"):
            out = subprocess.run([sys.executable, __file__, "--peak-child", PEAK_NETWORK, preset,
                                  mode, str(batch)], capture_output=True, text=True)
            cells.append(f"{float(out.stdout.split()[-1]):.0f}" if out.returncode == 0 else
                         f"failed ({out.stderr.strip().splitlines()[-1:]})")
        print(f"| {label(preset)} | " + " | ".join(cells) + " |", flush=True)


FIRST_NETWORK = "vgg16"
KERNELS_NETWORK = "ppocr-cls"  # a small network whose first call loads a machine's kernels


def first_child(network: str, preset: str) -> None:
    """One process's first and second ``simulate`` (estimate) of ``network`` on ``preset``,
    after one of ``KERNELS_NETWORK`` (its compiled kernels loaded): print both times (s)
    and the process's peak RSS (MiB)."""
    import npusim
    from npusim.frontends import zoo
    from npusim.frontends.prune import prune

    density = PRESETS[preset]

    def load(name: str):
        graph = zoo.build(name)
        return graph if density is None else prune(graph, density)

    npusim.simulate(load(KERNELS_NETWORK), zoo.input_for(KERNELS_NETWORK), preset,
                    mode="estimate")
    graph, x = load(network), zoo.input_for(network)
    calls = [seconds(lambda: npusim.simulate(graph, x, preset, mode="estimate"))
             for _ in range(2)]
    print(*calls, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, flush=True)


def first_table(network: str, presets: list[str]) -> None:
    """A network's first call on each preset, what every point of a sweep pays (the
    costs of its layers' shapes on a new arch counted; the sparse presets' weight masks
    made), against a later call, each preset in a fresh child pinned to one core."""
    print(f"\nfirst calls: {network}'s first and second estimate on each preset, a fresh "
          f"process each, one core, after a call on {KERNELS_NETWORK} (kernels loaded)")
    print("| preset | first (ms) | second (ms) | first / second | peak RSS (MiB) |")
    print("| --- | --- | --- | --- | --- |")
    cpus = sorted(os.sched_getaffinity(0))
    for preset in presets:
        out = subprocess.run([sys.executable, __file__, "--first-child", network, preset],
                             capture_output=True, text=True, env=child_env("one"),
                             preexec_fn=lambda: os.sched_setaffinity(0, {cpus[-1]}))
        if out.returncode:
            print(f"| {label(preset)} | failed ({out.stderr.strip().splitlines()[-1:]}) | | | |")
            continue
        first, second, peak = map(float, out.stdout.split()[-3:])
        print(f"| {label(preset)} | {1e3 * first:.0f} | {1e3 * second:.0f} | {first / second:.1f} "
              f"| {peak:.0f} |", flush=True)


def child_env(cores: str) -> dict:
    """The environment of a child: every library at one thread for one core."""
    env = dict(os.environ)
    for var in THREAD_VARIABLES:
        env.pop(var, None)
        if cores == "one":
            env[var] = "1"
    return env


def measure(cores: str, args) -> list[dict]:
    """Run the child for one core setting; its JSON lines, printed as they come."""
    cpus = sorted(os.sched_getaffinity(0))
    command = [sys.executable, __file__, "--child", "--cores", cores, "--rounds",
               str(args.rounds), "--networks", *args.networks, "--presets", *args.presets]
    pin = (lambda: os.sched_setaffinity(0, {cpus[-1]})) if cores == "one" else None
    rows = []
    with subprocess.Popen(command, env=child_env(cores), stdout=subprocess.PIPE, text=True,
                          preexec_fn=pin) as proc:
        for line in proc.stdout:
            rows.append(json.loads(line))
            print(f"  {cores} core(s): {line.strip()}", file=sys.stderr, flush=True)
    if proc.returncode:
        raise SystemExit(f"bench_speed child ({cores} cores) failed with {proc.returncode}")
    return rows


def table(cores: str, rows: list[dict], args) -> None:
    """The markdown table of one core setting: estimate / run ratio per preset and network."""
    cpus = 1 if cores == "one" else len(os.sched_getaffinity(0))
    print(f"\nnpusim / PyTorch eager, {cpus} core(s), median of {args.rounds} paired rounds "
          f"(estimate / run; targets on one core: <= 2x / <= 4x)")
    by = {(r["network"], r.get("preset")): r for r in rows if "network" in r}
    print("| preset | " + " | ".join(args.networks) + " |")
    print("| --- |" + " --- |" * len(args.networks))
    for preset in args.presets:
        cells = []
        for net in args.networks:
            r = by.get((net, preset)) or by.get((net, None)) or {"error": "not run"}
            cells.append("n/a" if "error" in r else f"{r['estimate']:.2f} / {r['run']:.2f}")
        print(f"| {label(preset)} | " + " | ".join(cells) + " |")
    times_table(rows, args)
    for r in rows:
        for mode, hot in r.get("hot_spots", {}).items():
            floor, engine = hot["compiled_s"] / r["torch_s"], hot["engine_s"] / r["torch_s"]
            print(f"{r['network']} {r['preset']} {mode} {r[mode]:.2f}x, over target: "
                  f"{hot['spots']}; compiled kernels and the dense engine "
                  f"{1e3 * hot['compiled_s']:.1f} ms of a {1e3 * r[f'{mode}_s']:.1f} ms call: "
                  f"a floor of {floor:.2f}x (the dense engine alone {engine:.2f}x)")
        if "error" in r:
            print(f"{r['network']} {r.get('preset', '')}: {r['error']}")
        if "peak_rss_mib" in r:
            print(f"peak RSS of the whole table's process: {r['peak_rss_mib']:.0f} MiB")


def times_table(rows: list[dict], args) -> None:
    """The same cells as npusim's own median times and PyTorch's (milliseconds): a ratio
    moves with either side, and a cell's history reads from these."""
    by = {(r["network"], r.get("preset")): r for r in rows if "estimate_s" in r}
    print("\nthe same cells' median times, ms: estimate / run (PyTorch's, the same rounds)")
    print("| preset | " + " | ".join(args.networks) + " |")
    print("| --- |" + " --- |" * len(args.networks))
    for preset in args.presets:
        cells = [f"{1e3 * r['estimate_s']:.1f} / {1e3 * r['run_s']:.1f} "
                 f"({1e3 * r['torch_s']:.1f})" if (r := by.get((net, preset))) else "n/a"
                 for net in args.networks]
        print(f"| {preset} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", nargs="+", choices=("one", "all"), default=["one", "all"])
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS))
    parser.add_argument("--presets", nargs="+", choices=list(PRESETS), default=list(PRESETS))
    parser.add_argument("--peak-batch", type=int, default=8,
                        help="batch of the peak-memory runs (0: none)")
    parser.add_argument("--peak-only", action="store_true", help="the peak memory alone")
    parser.add_argument("--first-network", default=FIRST_NETWORK,
                        help="network of the first-call table ('none': no table)")
    parser.add_argument("--first-only", action="store_true", help="the first-call table alone")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--peak-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--first-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_child:
        network, preset, mode, batch = args.peak_child
        peak_child(network, preset, mode, int(batch))
        return
    if args.first_child:
        first_child(*args.first_child)
        return
    if args.child:
        args.cores = args.cores[0]
        child(args)
        return
    if not (args.peak_only or args.first_only):
        for cores in args.cores:
            table(cores, measure(cores, args), args)
    if not args.peak_only and args.first_network != "none":
        first_table(args.first_network, args.presets)
    if args.peak_batch and not args.first_only:
        peak_table(args.peak_batch)


if __name__ == "__main__":
    main()
