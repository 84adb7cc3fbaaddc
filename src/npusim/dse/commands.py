"""``npusim sweep``, ``npusim sweep export`` and ``npusim pareto`` (docs/sweep.md).

Thin, like the rest of the command line: parse, call ``dse``, print. A sweep shows a progress
bar (points done, failures, ETA) on a terminal; Ctrl-C stops it with every finished point
stored, and the same command resumes. Building the parser (``add_commands``) imports
nothing beyond argparse: each command imports what it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import outfile


def add_commands(sub) -> None:
    """Register ``sweep`` and ``pareto`` on the ``npusim`` subparsers ``sub``."""
    sweep = sub.add_parser("sweep", help="run a design-space sweep spec into a results store "
                           "(resumes); 'sweep export STORE --csv OUT' writes its table")
    sweep.add_argument("spec", metavar="SPEC.toml|export", help="the sweep spec (docs/sweep.md), "
                       "or 'export' followed by a store")
    sweep.add_argument("export_store", nargs="?", metavar="STORE", help=argparse.SUPPRESS)
    sweep.add_argument("--store", metavar="FILE", type=Path,
                       help="the SQLite results store (created, or resumed)")
    sweep.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                       help="run on this Dask distributed scheduler instead of local processes")
    sweep.add_argument("--workers", type=int, metavar="N",
                       help="local worker processes (default: one per core; 1: in this process)")
    sweep.add_argument("--csv", metavar="OUT", type=outfile.target,
                       help="with export: write a CSV table")
    sweep.add_argument("--parquet", metavar="OUT", type=outfile.target,
                       help="with export: write a Parquet table (needs pyarrow)")
    sweep.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    sweep.set_defaults(func=cmd_sweep)
    pareto = sub.add_parser("pareto", help="the non-dominated points of a results store on two "
                            "quantities, and a PNG plot of them")
    pareto.add_argument("store", metavar="STORE", type=Path, help="a results store")
    pareto.add_argument("--x", required=True, metavar="QUANTITY", help="e.g. cycles")
    pareto.add_argument("--y", required=True, metavar="QUANTITY", help="e.g. energy")
    pareto.add_argument("--png", metavar="OUT.png", type=outfile.target,
                        help="the plot (default: STORE's name with -pareto-X-Y.png)")
    pareto.set_defaults(func=cmd_pareto)


def cmd_sweep(args) -> int:
    """``npusim sweep SPEC --store FILE`` or ``npusim sweep export STORE --csv OUT``."""
    if args.spec == "export":
        return _export(args)
    from ..cli import EXIT_INTERRUPTED, UsageError, _interactive

    if args.export_store or args.csv or args.parquet:
        raise UsageError("--csv and --parquet go with 'npusim sweep export STORE'")
    if args.store is None:
        raise UsageError("npusim sweep SPEC needs --store FILE (the results store)")
    if args.workers is not None and (args.workers < 1 or args.scheduler):
        raise UsageError("--workers must be >= 1, and does not go with --scheduler")
    from .runner import check_workloads, make_runner, run_sweep
    from .spec import load_spec
    from .store import Store, inert_parameters

    spec = load_spec(args.spec)
    check_workloads(spec)
    runner = make_runner(args.workers, args.scheduler)  # a cluster not reached: no store made
    try:
        store = Store.open(args.store, spec)
    except BaseException:
        runner.close()
        raise
    bar = _Bar(_interactive(args))
    try:
        outcome = run_sweep(spec, store, runner, bar)
        inert = inert_parameters(store)
    except KeyboardInterrupt:
        bar.close()
        count = len(store.rows())
        print(f"npusim: interrupted; {count} points are stored in {args.store}; the same "
              "command resumes", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        bar.close()
        runner.close()
        store.close()
    print(f"{args.store}: {outcome.ran} points run ({outcome.failed} infeasible or failed), "
          f"{outcome.skipped} already stored")
    for name in inert:
        print(f"npusim: warning: {name} changed no result: points that differ in it alone have "
              f"equal totals: the machine does not read it with base {spec.base!r}, or not at "
              "the values swept (docs/sweep.md, 'Parameters that change nothing')",
              file=sys.stderr)
    return 0


def _export(args) -> int:
    from ..cli import UsageError
    from .store import Store, parquet_bytes, to_csv

    if args.export_store is None or not (args.csv or args.parquet):
        raise UsageError("npusim sweep export STORE needs --csv OUT and/or --parquet OUT")
    extra = [flag for flag, value in (("--store", args.store), ("--workers", args.workers),
                                      ("--scheduler", args.scheduler)) if value is not None]
    if extra:
        raise UsageError(f"{', '.join(extra)} go with 'npusim sweep SPEC', not with export "
                         "(its store is the one after 'export')")
    if args.csv and args.parquet and (str(args.csv) == str(args.parquet) == outfile.STDOUT or (
            Path(args.csv).resolve() == Path(args.parquet).resolve())):
        raise UsageError(f"--csv and --parquet both name {args.csv}: give each its own file")
    for flag, path in (("--csv", args.csv), ("--parquet", args.parquet)):
        if path is not None:
            outfile.check_target(path, flag, flag[2:])
    store = Store.read(args.export_store)
    try:  # both tables made before either is written: a failure writes neither
        text = to_csv(store) if args.csv else None
        data = parquet_bytes(store) if args.parquet else None
    finally:
        store.close()
    if text is not None:
        outfile.write_text(args.csv, text, "--csv", "csv")
    if data is not None:
        outfile.write_bytes(args.parquet, data, "--parquet", "parquet")
    return 0


def _front_cell(value) -> str:
    """A front's value as printed: a count (cycles, bytes: an integral number) whole, so
    that two points a few cycles apart read apart; other numbers to 6 digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def cmd_pareto(args) -> int:
    """``npusim pareto STORE --x A --y B``: print the front, write its plot."""
    from rich.table import Table

    from ..cli import _stdout
    from .pareto import check_pair, pareto, plot
    from .store import stored

    stored(args.store)  # a missing store named before its figure's folder
    check_pair(args.x, args.y)  # before they name the figure
    png = args.png or args.store.with_name(f"{args.store.stem}-pareto-{args.x}-{args.y}.png")
    outfile.check_target(png, "--png", "figure")
    front = pareto(args.store, args.x, args.y)
    rows = front.rows()
    headers = [_with_unit(k) if k in (args.x, args.y) else k for k in rows[0]]
    per = (f"; a front per model and density, {len(front.workloads)} of them"
           if len(front.workloads) > 1 else "")
    table = Table(*headers, box=None, header_style="bold",
                  title=f"{len(rows)} non-dominated of {len(front.points)} ok points{per}")
    for row in rows:
        table.add_row(*map(_front_cell, row.values()))
    out = _stdout()
    if not out.is_terminal:  # a file or a pipe: as wide as the table, no value cut short
        from rich.measure import Measurement

        from ..report.table import console

        natural = Measurement.get(out, out.options.update(width=1 << 20), table).maximum
        out = console(width=max(out.width, natural))
    out.print(table)
    plot(front, png, "--png")
    print(f"wrote {png}")
    return 0


def _with_unit(quantity: str) -> str:
    """'energy (pJ)': a quantity's column header with its unit, where the name does not
    say it already ('cycles', 'dram_bytes')."""
    from .spec import unit

    u = unit(quantity)
    return f"{quantity} ({u})" if u and not quantity.endswith(u) else quantity


class _Bar:
    """A rich progress bar on stderr: points done of those to run, failures, ETA."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar, self.task = enabled, None, None

    def __call__(self, done: int, failed: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from rich import progress as rp
            from rich.console import Console

            self.bar = rp.Progress(rp.TextColumn("sweep"), rp.BarColumn(),
                                   rp.MofNCompleteColumn(),
                                   rp.TextColumn("{task.fields[failed]} failed"),
                                   rp.TimeElapsedColumn(), rp.TextColumn("ETA"),
                                   rp.TimeRemainingColumn(), console=Console(stderr=True),
                                   transient=True)
            self.task = self.bar.add_task("sweep", total=total, failed=0)
            self.bar.start()
        self.bar.update(self.task, completed=done, total=total, failed=failed)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

