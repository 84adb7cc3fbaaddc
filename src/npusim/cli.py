"""The command line: ``npusim run``, ``npusim models``, ``npusim archs`` (docs/cli.md).

Thin: it parses, calls the library, prints. Every ``NpusimError`` (and every bad
flag value) becomes one line on stderr and exit code 2, before anything is
written; ``--check`` above its tolerance exits 1. The reports (JSON, CSV, HTML) and
figures are written only after the run succeeded, all made before the first is written,
each atomically.

Only the standard library and npusim's light modules are imported here: each command
imports what it uses (the simulator, numpy, rich) when it runs, so ``npusim --help``
loads none of them (docs/architecture.md, "Start-up").
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import time
import warnings
from typing import TYPE_CHECKING

from . import __version__, outfile
from .choices import DTYPES, MAX_DIM, MODES
from .errors import InputError, NpusimError, NpusimWarning

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    from rich.console import Console

    from .ir import Graph

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE, what a shell reports for a writer killed by it
OPTIONAL_EXTRAS = {"torch": "torch", "onnx": "onnx", "onnxruntime": "onnx", "google": "onnx"}
PROGRESS_AFTER_S = 1.0  # show the progress bar only for runs longer than this
TORCH_MISSING = "--check needs PyTorch, which is not installed: pip install 'npusim[torch]'"


class UsageError(NpusimError):
    """A bad command-line flag or flag value."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one ``UsageError`` line, not usage text and exit."""

    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _int_at_least(minimum: int, maximum: int | None = None):
    """An argparse type: an integer >= ``minimum`` (and <= ``maximum``, if given)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if maximum is not None and not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{text!r}: must be an integer from {minimum} to "
                                             f"{maximum:,}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: must be an integer >= {minimum}")
        return value
    return parse


def _steps(text: str) -> int:
    """An argparse type: a step count >= 1, in digits or e-notation (``4e7``, as the emulator's
    refusal prints it)."""
    try:
        value = float(text) if "e" in text.lower() else int(text)
        whole = int(value)  # OverflowError past a float's range (1e400)
    except (ValueError, OverflowError):
        value = whole = 0
    if whole < 1 or value != whole:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a whole number of steps >= 1 "
                                         "(40000000 or 4e7)")
    return whole


def _density(text: str) -> float | str:
    if text == "deep-compression":
        return text
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: must be a weight density in (0, 1] or 'deep-compression'")
    return value


def _bandwidth(text: str) -> float | str:
    """An argparse type: DRAM bytes/cycle > 0, or 'unlimited'."""
    if text == "unlimited":
        return text
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: must be DRAM bytes per cycle > 0, or 'unlimited'")
    return value


def _shape(text: str) -> tuple[int, ...]:
    parts = text.split(",")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) != 4 or not 1 <= min(dims) <= max(dims) <= MAX_DIM:
        raise argparse.ArgumentTypeError(f"{text!r}: must be four integers from 1 to "
                                         f"{MAX_DIM:,}, N,C,H,W")
    return dims


def build_parser() -> argparse.ArgumentParser:
    """The ``npusim`` argument parser with its commands."""
    parser = _Parser(prog="npusim", description="Run CNNs on a modelled neural processing "
                     "unit: real outputs, cycles, utilisation, SRAM/DRAM traffic, energy.")
    parser.add_argument("--version", action="version", version=f"npusim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run a network on an accelerator and report its costs")
    _add_run_arguments(run)
    _add_figure_arguments(run)
    run.set_defaults(func=cmd_run)
    _add_compare_parser(sub, run)
    sub.add_parser("models", help="list the built-in models").set_defaults(func=cmd_models)
    sub.add_parser("archs", help="list the built-in arch presets").set_defaults(func=cmd_archs)
    tune = sub.add_parser("tune-groups", help="group sizes that fill a group tile's MACs, "
                          "with latency, parameters and utilisation of every candidate")
    tune.add_argument("model", metavar="MODEL", help="zoo name, FILE.onnx or FILE.py:factory")
    tune.add_argument("--arch", metavar="NAME|FILE", default="group-tile-64mac",
                      help="an arch with a [group-tile] section (default group-tile-64mac)")
    tune.add_argument("--dtype", choices=DTYPES, default="int8",
                      help="the MACs' arithmetic (default int8, the group tile's own; run's "
                           "default is float32)")
    tune.add_argument("--size", type=_int_at_least(1, MAX_DIM), metavar="PIXELS",
                      help="side of the square input (default: the model's own)")
    tune.set_defaults(func=cmd_tune_groups)
    export = sub.add_parser("export-topology", help="write a network's convs as a SCALE-Sim "
                            "topology CSV, to run the same network in SCALE-Sim")
    export.add_argument("model", metavar="MODEL", help="zoo name, FILE.onnx or FILE.py:factory")
    export.add_argument("out", metavar="OUT.csv", type=outfile.target,
                        help="the CSV to write")
    export.add_argument("--input-shape", metavar="N,C,H,W", type=_shape,
                        help="input shape of an imported model (batch must be 1)")
    export.set_defaults(func=cmd_export_topology)
    from .dse.commands import add_commands  # npusim sweep, npusim pareto (docs/sweep.md)

    add_commands(sub)
    return parser


def _add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("model", metavar="MODEL",
                     help="zoo name (npusim models), FILE.onnx, FILE.py:factory, a TorchScript "
                          "FILE.pt (torch.jit.save), a FILE.pt2 (torch.export.save), or a "
                          "SCALE-Sim topology FILE.csv (shape-only run)")
    run.add_argument("--arch", metavar="NAME|FILE", help="arch preset (npusim archs) or TOML "
                     "file; default: the built-in default preset")
    run.add_argument("--dataflow", metavar="NAME", help="dataflow to run (default: the arch's)")
    run.add_argument("--bandwidth", type=_bandwidth, metavar="B|unlimited",
                     help="DRAM bytes/cycle instead of the arch's (unlimited: stall-free)")
    run.add_argument("--mode", choices=MODES,
                     help="run (default): the dataflow's own arithmetic; estimate: dense engine "
                          "+ costs from masks; emulate: cycle emulator (small inputs)")
    run.add_argument("--emulate-limit", type=_steps, metavar="STEPS",
                     help="with --mode emulate: the most emulator steps (about 1 us each) one "
                          "layer may take (default 4e7, about 40 s)")
    run.add_argument("--input", metavar="FILE|PHOTO",
                     help="an image file, or a bundled photo (astronaut, coffee, chelsea, china, "
                          "flower, grace_hopper); default: the model's own photo")
    run.add_argument("--input-shape", metavar="N,C,H,W", type=_shape,
                     help="input shape of an imported model")
    run.add_argument("--density", type=_density, metavar="D|deep-compression",
                     help="prune weights by magnitude to density D in (0, 1] per layer, or to "
                          "Han et al.'s per-layer densities")
    run.add_argument("--dtype", choices=DTYPES, default="float32")
    run.add_argument("--batch", type=_int_at_least(1, MAX_DIM), metavar="N",
                     help="batch size: fixes a zoo, PyTorch or topology model's batch or an ONNX "
                          "model's dynamic one (refused where the file fixes another); default: "
                          "the model's own, else 1")
    run.add_argument("--seed", type=_int_at_least(0), default=0, metavar="S",
                     help="seed of generated weights (default 0)")
    run.add_argument("--check", action="store_true",
                     help="compare every layer's output with PyTorch's; exit 1 above tolerance")
    run.add_argument("--fallback", action="store_true",
                     help="compute an op npusim does not model with the framework it came from "
                          "(torch, onnxruntime), costed as vector work, instead of refusing it")
    run.add_argument("--json", metavar="FILE", type=outfile.target,
                     help="write the JSON report here")
    run.add_argument("--csv", metavar="FILE", type=outfile.target,
                     help="write the CSV report here")
    run.add_argument("--quiet", "-q", action="store_true", help="no progress bar, no tables")


def _add_figure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plots", metavar="DIR", type=outfile.target,
                        help="write the figures (cycles by cause, roofline, utilisation, "
                             "density, per-unit work) as PNG and SVG into DIR")
    parser.add_argument("--html", metavar="FILE", type=outfile.target,
                        help="write a self-contained HTML report (tables, figures) here")


NOT_COMPARED = ("help", "arch", "dataflow", "check")  # run's flags that compare does not take


def _add_compare_parser(sub, run: argparse.ArgumentParser) -> None:
    """``npusim compare``: run's model, input and report flags, ``--arch`` repeated."""
    compare = sub.add_parser("compare", help="run one network, weights and input on several "
                             "archs and compare them layer by layer (docs/report.md)")
    compare.add_argument("--arch", metavar="NAME|FILE", action="extend", nargs="+",
                         required=True,
                         help="arch presets or TOML files, two or more in all (--arch A B, "
                              "or --arch A --arch B); the first is the baseline")
    for action in run._actions:
        if action.dest not in NOT_COMPARED:
            compare._add_action(action)
    compare.set_defaults(func=cmd_compare, dataflow=None, check=False)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 check failed, 2 bad input or
    standard output not writable, 130 interrupted, 141 standard output closed by its
    reader)."""
    given = sys.stdout
    sys.stdout = _Output(given)
    try:
        code = _command(argv)
        sys.stdout.flush()  # a closed pipe shows here when stdout is block-buffered (a pipe)
        return code
    except BrokenPipeError:  # stdout's reader left (``npusim models | head -1``): no more to say
        _to_devnull()
        return EXIT_PIPE_CLOSED
    except _OutputError as e:  # a full disk, a closed descriptor: the report cannot be shown
        _to_devnull()
        try:
            print(f"npusim: error: standard output: {e.strerror}; nothing more was written "
                  "there", file=sys.stderr, flush=True)
        except OSError:  # stderr as full (``> /dev/full 2>&1``): the exit code alone says it
            _to_devnull(sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        sys.stdout = given


class _OutputError(OSError):
    """Standard output could not be written (not a closed pipe: ``BrokenPipeError``)."""


class _Output:
    """Standard output for one command: its writes' errors raised as ``_OutputError``, so
    that ``main`` tells them from any other ``OSError``; everything else is the stream's.
    ``given`` is None when the descriptor is closed (``>&-``): a command that writes nothing
    there (``--quiet``) runs as it would on /dev/null, one that writes fails."""

    def __init__(self, given):
        self.given = given
        self.stream = open(os.devnull, "w") if given is None else given  # noqa: SIM115

    def write(self, text: str) -> int:
        if self.given is None and text:
            raise _OutputError(errno.EBADF, "its descriptor is closed")
        return self._do("write", text)

    def flush(self) -> None:
        self._do("flush")

    def _do(self, name: str, *args):
        try:
            return getattr(self.stream, name)(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise _OutputError(e.errno, e.strerror or str(e)) from e

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def _command(argv: list[str] | None) -> int:
    """Parse ``argv`` and run its command: its exit code, an error as one line on stderr."""
    parser, args = build_parser(), None
    try:
        if argv is None:  # the command line's own process (not a caller's): see ``oom``
            from . import oom

            oom.cap()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_BAD_INPUT
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return args.func(args)
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else EXIT_OK
    except KeyboardInterrupt:
        print("npusim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (NpusimError, ModuleNotFoundError, MemoryError) as e:
        print(f"npusim: error: {error_line(e, getattr(args, 'command', None))}",
              file=sys.stderr)
        return EXIT_BAD_INPUT


def _to_devnull(stream=None) -> None:
    """Point standard output (or ``stream``) at /dev/null, so the interpreter's last flush of
    what is still buffered for a closed pipe or a full disk does not fail again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (stream or sys.stdout).fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (a captured stdout)
        pass


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """npusim's own warnings as one line on stderr; any other as Python shows it."""
    if issubclass(category, NpusimWarning):
        print(f"npusim: warning: {one_line(str(message))}", file=sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


# what makes a command take less memory, for its out-of-memory line
MEMORY_HINTS = {"tune-groups": "a smaller --size", "sweep": "fewer --workers or a smaller "
                "model"}


def error_line(e: Exception, command: str | None = None) -> str:
    """The one line shown for a bad input (``command``: the command that raised it); a
    missing module that is no optional extra is a bug, and is raised again."""
    if isinstance(e, ModuleNotFoundError):
        extra = OPTIONAL_EXTRAS.get((e.name or "").split(".")[0])
        if extra is None:
            raise e
        return f"this needs {e.name}, which is not installed: pip install 'npusim[{extra}]'"
    if isinstance(e, MemoryError):  # numpy's message says how much it tried to allocate
        hint = MEMORY_HINTS.get(command, "a smaller --batch or input")
        return f"out of memory: {one_line(str(e))}; try {hint}"
    return one_line(str(e))


def one_line(message: str) -> str:
    """The first line of an error message (some carry a wrapped library's trace below it)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"


# ---- npusim models / archs ------------------------------------------------------------------

def _stdout(stderr: bool = False) -> Console:
    """The report's console (``report.table.console``) on stdout (or stderr); 160 columns
    when it is a file or pipe (rich would assume 80)."""
    from .report.table import console

    out = console(stderr=stderr)
    return out if out.is_terminal else console(stderr=stderr, width=160)


def cmd_models(args) -> int:
    """List the zoo's models with one line each (their catalogue: no numpy, no model module)."""
    from .frontends import catalogue

    print_columns(["model", "description"],
                  [[name, catalogue.describe(name)] for name in catalogue.names()])
    return EXIT_OK


def cmd_archs(args) -> int:
    """List the arch presets: name, default dataflow, clock, description, and the memory
    (printed once if every preset has the same)."""
    from .arch import load_arch, presets
    from .arch.spec import describe_memory, same_memory

    archs = [load_arch(name) for name in presets()]
    same = same_memory(archs)
    print_columns(["arch", "dataflow", "clock", "description", *([] if same else ["memory"])],
                  [[arch.name, arch.dataflow, f"{arch.clock_mhz:g} MHz", arch.description,
                    *([] if same else [describe_memory(arch.memory)])] for arch in archs])
    if same and archs:
        print(f"memory of every preset: {describe_memory(archs[0].memory)}")
    return EXIT_OK


def print_columns(header: list[str], rows: list[list[str]]) -> None:
    """``rows`` under ``header`` on stdout, each column as wide as its widest cell: the plain
    listing of ``models`` and ``archs``, which so import no rich (its console and table
    would add about a fifth to their start-up)."""
    widths = [max(map(len, column)) for column in zip(header, *rows, strict=True)]
    for row in [header, *rows]:
        print(" " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def cmd_tune_groups(args) -> int:
    """``npusim tune-groups``: print the per-layer group-size candidates on a group tile."""
    from .tune import tune_groups_report

    print(tune_groups_report(args.model, args.arch, size=args.size, dtype=args.dtype))
    return EXIT_OK


def cmd_export_topology(args) -> int:
    """``npusim export-topology``: the model's conv layers as SCALE-Sim CSV rows."""
    from .frontends import load_model
    from .frontends.topology import write_topology

    to_stdout = outfile.is_stdout(args.out)
    if not to_stdout and args.out.suffix != ".csv":
        raise UsageError(f"{args.out}: the topology file must end in .csv (or be '-')")
    outfile.check_target(args.out, "topology", "topology")
    model = load_model(args.model, input_shape=args.input_shape)
    rows = write_topology(model, args.out)
    count = len(model) if isinstance(model, list) else len(model.conv_nodes)
    split = (f" ({rows:,} rows: SCALE-Sim has no conv groups, so a grouped conv is a row "
             "per group)" if rows != count else "")
    print(f"wrote {count} conv layers of {args.model} to "
          f"{'standard output' if to_stdout else args.out}{split}",
          file=sys.stderr if to_stdout else sys.stdout)
    return EXIT_OK


def dataflow_summary(arch, dataflow: str) -> str:
    """'systolic rows=32 cols=32 stationary=ws': the dataflow and its section of ``arch``."""
    import dataclasses

    params = dataclasses.asdict(arch.params(dataflow))
    return " ".join([dataflow] + [f"{k}={','.join(v) if isinstance(v, tuple) else v}"
                                   for k, v in params.items()])  # a hybrid's machines: a,b,c


# ---- npusim run ---------------------------------------------------------------------------

def cmd_run(args) -> int:
    """``npusim run``: load, simulate, check, print, write the reports."""
    from .arch import load_arch
    from .simulate import RunConfig

    _check_flags(args)
    arch = load_arch(args.arch)
    if args.bandwidth is not None:
        arch = arch.with_memory(dram_bytes_per_cycle=args.bandwidth)
    dataflow = RunConfig.of(arch, args.dataflow).name  # one machine, or a hybrid's members
    with _status(args, f"loading {args.model}"):
        model, module = _load_model(args)
    args.batch = model.input_shape[0] if _is_graph(model) else model[0].N
    result, x, source, check = _run_model(args, model, arch, dataflow, module)
    fallbacks = _fallbacks(model)
    # the files first: a reader of the tables that leaves early (``| head``) costs none of them
    _write_outputs(args, result, _report_texts(args, result, {
        "input": source, "input_shape": None if x is None else list(x.shape),
        "batch": args.batch, "density": args.density, "seed": args.seed,
        "check": check.as_dict() if check else None, "fallback": fallbacks}),
        _figure_density(model, x, result), source)
    human = sys.stderr if _report_to_stdout(args) else sys.stdout  # stdout: the report alone
    if not args.quiet:
        _print_report(result, args.model, source, human)
    if check:
        print(check.line(), file=human)
    if fallbacks and not args.quiet:
        print(f"fallback: {len(fallbacks)} ops computed by the source framework, costed as "
              f"vector work: {', '.join(f'{n} ({k})' for n, k in fallbacks.items())}",
              file=human)
    return EXIT_CHECK_FAILED if check and not check.passed else EXIT_OK


def _is_graph(model) -> bool:
    """Whether ``model`` is a network (a ``Graph``), not a topology CSV's ``ConvLayer`` list."""
    from .ir import Graph

    return isinstance(model, Graph)


def _fallbacks(model) -> dict[str, str]:
    """Node -> source op of each op computed by its framework (``--fallback``); none for a
    topology CSV's shapes (which so import no op)."""
    if not _is_graph(model):
        return {}
    from .ops import Fallback

    return {n.name: n.op.source for n in model.nodes if isinstance(n.op, Fallback)}


def _run_model(args, model, arch, dataflow: str, module=None):
    """(SimResult, input or None, where the input came from, CheckOutcome or None);
    ``module``: the torch module a factory made, which ``--check`` runs too."""
    if not _is_graph(model):
        from .simulate import simulate_shapes

        return (simulate_shapes(model, arch, dataflow, args.dtype), None,
                "shapes only (topology CSV)", None)
    x, source = _input_tensor(args, model)
    result = _simulate(model, x, arch, dataflow, args)
    check = None
    if args.check:
        with _status(args, "comparing every layer with PyTorch"):
            from .frontends import onnx_source

            onnx = onnx_source(args.model)
            own = onnx if onnx is not None else module
            pruned = None if own is None or args.density is None else (
                f"--density {args.density} pruned the weights, "
                f"{'the module' if onnx is None else onnx.name} holds them unpruned")
            check = _check(model, x, result, own, pruned)
    return result, x, source, check


def _check_flags(args) -> None:
    """Reject flag combinations and output paths that cannot work, before any work."""
    from .frontends import kind

    if kind(args.model) == ".csv":
        _check_topology_flags(args)
    args.mode = args.mode or "run"  # None until here: a topology CSV refuses any --mode
    shape = args.input_shape
    if shape and args.batch and shape[0] != args.batch:
        raise UsageError(f"--batch {args.batch} contradicts --input-shape N={shape[0]}")
    args.batch = args.batch or (shape[0] if shape else None)  # None: the model's own
    if args.emulate_limit is not None and args.mode != "emulate":
        raise UsageError("--emulate-limit applies to --mode emulate only")
    if args.json and args.csv and args.json.resolve() == args.csv.resolve():
        raise UsageError(f"--json and --csv both name {args.json}")
    if args.html and args.html.resolve() in {p.resolve() for p in (args.json, args.csv) if p}:
        raise UsageError(f"--html {args.html}: another report is written there too")
    for flag, path in (("--json", args.json), ("--csv", args.csv), ("--html", args.html)):
        if path is not None:
            outfile.check_target(path, flag, flag[2:])
    if args.plots is not None:
        from .report.plots import check_folder

        check_folder(args.plots)


def _report_to_stdout(args) -> bool:
    """Whether ``--json -``, ``--csv -`` or ``--html -`` sends a report to standard output."""
    return any(p is not None and outfile.is_stdout(p) for p in (args.json, args.csv, args.html))


def _check_topology_flags(args) -> None:
    """A topology CSV is shapes only: flags that need tensors or weights do not apply."""
    bad = [flag for flag, given in (("--input", args.input), ("--density", args.density),
                                    ("--check", args.check), ("--input-shape", args.input_shape),
                                    ("--mode", args.mode is not None)) if given]
    if bad:
        raise UsageError(f"{args.model}: a topology CSV is run shape-only (dense, no tensors); "
                         f"{', '.join(bad)} {'needs' if len(bad) == 1 else 'need'} a model "
                         "with weights")


def _load_model(args):
    """The network (a Graph, pruned if asked) or, for a topology CSV, its ConvLayers; and the
    torch module a ``file.py:factory`` made, else None."""
    from .frontends import load_model_and_module

    model, module = load_model_and_module(args.model, batch=args.batch,
                                          input_shape=args.input_shape, seed=args.seed,
                                          fallback=args.fallback)
    if not _is_graph(model):
        return model, None
    if args.input_shape and model.input_shape != args.input_shape:
        raise InputError(f"--input-shape {','.join(map(str, args.input_shape))}: {args.model} "
                         f"does not take it; it takes {','.join(map(str, model.input_shape))}")
    if args.density is not None:
        from .frontends.prune import prune

        model = prune(model, args.density)
    return model, module


def _input_tensor(args, graph: Graph) -> tuple[np.ndarray, str]:
    """The network's input and where it came from (``frontends.input_tensor``)."""
    from .frontends import input_tensor

    return input_tensor(args.model, graph, image=args.input, seed=args.seed)


class _ProgressBar:
    """A transient rich bar on stderr, shown only once a run has taken ``PROGRESS_AFTER_S``."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar, self.task = enabled, None, None
        self.start = time.perf_counter()

    def __call__(self, i: int, n: int, name: str) -> None:
        if not self.enabled:
            return
        if self.bar is None and time.perf_counter() - self.start > PROGRESS_AFTER_S:
            from rich import progress as rp  # a bar only for slow runs: not imported before
            from rich.console import Console

            name_column = rp.TextColumn("{task.description:<24}", markup=False)  # a layer name
            self.bar = rp.Progress(name_column, rp.BarColumn(), rp.MofNCompleteColumn(),
                                   rp.TimeElapsedColumn(),
                                   console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task(name, total=n)
            self.bar.start()
        if self.bar is not None:
            self.bar.update(self.task, completed=i, description=name)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _interactive(args) -> bool:
    """Whether to draw transient progress on stderr: a terminal, and not --quiet."""
    if args.quiet:
        return False
    from rich.console import Console

    return Console(stderr=True).is_terminal


def _status(args, text: str):
    """A transient spinner with ``text`` on stderr while a slow step runs (if interactive)."""
    if not _interactive(args):
        return contextlib.nullcontext()
    from rich.console import Console
    from rich.text import Text

    return Console(stderr=True).status(Text(text))  # a file name is no markup


def _simulate(graph: Graph, x: np.ndarray, arch, dataflow: str, args):
    from .simulate import EMULATE_LIMIT, simulate

    bar = _ProgressBar(_interactive(args))
    try:
        return simulate(graph, x, arch, mode=args.mode, dtype=args.dtype, dataflow=dataflow,
                        keep_outputs=args.check or _wants_figures(args), progress=bar,
                        emulate_limit=args.emulate_limit or EMULATE_LIMIT)
    finally:
        bar.close()


def _check(graph: Graph, x: np.ndarray, result, own=None, own_skipped=None):
    """``--check``: the comparison with PyTorch (``report.check``), which must be installed,
    and with the model's own framework: ``own`` is the ONNX file onnxruntime runs, or the
    torch module a factory made, or None; ``own_skipped``: why it is not run."""
    try:
        import torch  # noqa: F401  (only to say clearly that it is missing)
    except ImportError:
        raise NpusimError(TORCH_MISSING) from None
    from .report.check import check

    return check(graph, x, result, own, own_skipped)


def title(result, model: str, source: str) -> str:
    """Two lines naming the run: model, arch, dtype, mode, input; the dataflow's parameters."""
    arch = result.arch
    return (f"{model} on {arch.name} | {result.dtype} | mode {result.mode} | input: {source}\n"
            f"{dataflow_summary(arch, result.dataflow)}")


def _print_report(result, model: str, source: str, stream) -> None:
    from .report import report

    console = _stdout(stderr=stream is not sys.stdout)
    console.print(report(result, title(result, model, source), console.width))


def _report_texts(args, result, run_facts: dict) -> list[tuple[str, Path, str]]:
    """(flag, path, text) of the JSON and CSV reports asked for (the writers, and json,
    imported only when one is)."""
    if not (args.json or args.csv):
        return []
    from .report import to_csv, to_json

    texts = []
    if args.json:
        texts.append(("--json", args.json, to_json(result, model=args.model, version=__version__,
                                                   run=run_facts)))
    if args.csv:
        texts.append(("--csv", args.csv, to_csv(result)))
    return texts


def _write_outputs(args, run, texts: list[tuple[str, Path, str]], density,
                   source: str) -> None:
    """Write the reports ``texts`` (flag, path, text), the HTML page (``--html``) and the
    figures (``--plots``) of ``run`` (a SimResult or a Comparison), each by ``outfile``'s
    rules; only reached after a successful run. Everything is made before the first file is
    written: drawing and rendering the figures takes seconds, and an error or an interrupt
    then leaves none of the set written rather than some of it."""
    figs = None
    try:
        if _wants_figures(args):
            from .report import plots

            figs = plots.figures(getattr(run, "results", run), density)
            if args.plots is not None:
                plots.render_all(figs)
            if args.html is not None:
                texts = [*texts, ("--html", args.html, _html(args, run, figs, source))]
        for flag, path, text in texts:
            outfile.write_text(path, text, flag, flag[2:])
        if args.plots is not None:
            plots.write_plots(figs, args.plots)
    finally:
        if figs is not None:
            plots.close(figs)


# ---- figures and the HTML report (docs/report.md) -----------------------------------------

def _wants_figures(args) -> bool:
    return args.plots is not None or args.html is not None


def _figure_density(model, x, result):
    """``plots.densities`` of a run that kept its outputs, else None (shape-only run)."""
    if not _is_graph(model) or not result.outputs:
        return None
    from .report.plots import densities

    return densities(model, x, result.outputs, result.dtype)


def _html(args, run, figs: list, source: str) -> str:
    """The HTML page of ``run`` (a SimResult or a Comparison) with its drawn ``figs``."""
    from .report import html

    facts = [("input", source)]
    if hasattr(run, "results"):
        return html.compare_report(run, version=__version__, facts=facts, figs=figs)
    return html.run_report(run, model=args.model, version=__version__, facts=facts, figs=figs)


# ---- npusim compare -------------------------------------------------------------------------

def cmd_compare(args) -> int:
    """``npusim compare``: the same network, weights and input on every ``--arch``; the
    side-by-side table, JSON, CSV, figures."""
    from .arch import load_arch
    from .report import compare
    from .report.table import console as report_console

    _check_flags(args)
    if len(args.arch) < 2:
        raise UsageError("compare needs two or more --arch (the first is the baseline)")
    archs = [load_arch(a) for a in args.arch]
    if args.bandwidth is not None:
        archs = [a.with_memory(dram_bytes_per_cycle=args.bandwidth) for a in archs]
    with _status(args, f"loading {args.model}"):
        model, _ = _load_model(args)
    args.batch = model.input_shape[0] if _is_graph(model) else model[0].N
    x, source = ((None, "shapes only (topology CSV)") if not _is_graph(model)
                 else _input_tensor(args, model))
    with _status(args, f"running {args.model} on {len(archs)} archs"):
        result = compare.compare(model, x, archs, model_name=args.model, mode=args.mode,
                                 dtype=args.dtype, keep_outputs=_wants_figures(args),
                                 emulate_limit=args.emulate_limit or _emulate_limit())
    facts = {"input": source, "batch": args.batch, "density": args.density, "seed": args.seed}
    texts = [(flag, path, text()) for flag, path, text in (
        ("--json", args.json, lambda: compare.to_json(result, version=__version__, run=facts)),
        ("--csv", args.csv, lambda: compare.to_csv(result))) if path is not None]
    # the files first, as ``run`` writes them
    _write_outputs(args, result, texts, _figure_density(model, x, result.results[0]), source)
    if not args.quiet:
        console = _stdout(stderr=_report_to_stdout(args))
        terminal = console.is_terminal  # a file or pipe gets the wide table, never cut
        text = compare.report(result, f"{args.model} | {args.dtype} | mode {args.mode} | "
                              f"input: {source}", console.width if terminal else None)
        if not terminal:
            table = report_console(width=100_000).measure(compare.layer_table(result)).maximum
            console = report_console(stderr=_report_to_stdout(args),
                                     width=max(console.width, table))
        console.print(text)
    return EXIT_OK


def _emulate_limit() -> int:
    from .simulate import EMULATE_LIMIT

    return EMULATE_LIMIT
