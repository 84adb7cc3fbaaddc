"""Import time of the ``npusim`` commands that need no compiled kernel (docs/cli.md).

Each command runs in a fresh interpreter under ``python -X importtime``. Its import
time is the sum of the top-level imports it makes, the interpreter's own start-up
imports left out (wall clock, as ``-X importtime`` counts it); its CPU time is the
process's user + system seconds beyond ``python -c pass``'s, which a loaded machine
disturbs less. Both are the median of ``--runs`` runs, after one unmeasured run that
writes the bytecode (``PYTHONDONTWRITEBYTECODE`` is dropped for the children), so it is
the start of an installed npusim, not the compilation of its sources. Target: under
``TARGET_S`` of import per command (issue 15). ``--against SRC`` measures another tree's
npusim (its ``src`` folder) beside this one, run for run in turn, so that a load that comes
and goes on a shared machine weighs on both alike. Each run of a command is followed by one of
the numpy + rich table floor, and "over floor" is the median of the differences, run by run:
what npusim itself adds, steadier than the two medians' difference on a shifting load. Usage::

    PYTHONPATH=src python bench/bench_startup.py [--runs 5] [--against ../main/src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

TARGET_S = 0.15
COMMANDS = {
    "import npusim.cli": "import npusim.cli",
    "npusim --help": "main(['--help'])",
    "npusim models": "main(['models'])",
    "npusim archs": "main(['archs'])",
    "npusim run Resnet18.csv": "main(['run', 'Resnet18.csv'])",
}
FLOORS = {  # what the commands that need them cannot go below: the libraries alone
    "floor: import numpy": "import numpy",
    "floor: numpy + rich table": "import numpy, rich.console, rich.table",
}
ON_THE_FLOOR = ("npusim run Resnet18.csv",)  # commands that need numpy and rich's table
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


VISIBLE = """
import importlib, sys
def import_module(name, package=None):
    if name.startswith("."):
        name = importlib.util.resolve_name(name, package)
    __import__(name)
    return sys.modules[name]
importlib.import_module = import_module
"""
"""``-X importtime`` times the import statement's machinery only: a module that
``importlib.import_module`` loads outside another import (an export of a lazy package read
by a command, the arch loader's sections, a machine looked up by name) would go uncounted,
and the modules it imports would count as top-level ones. The commands run with this
``import_module``, which imports through the statement's machinery, so every module counts."""


def measure(code: str, env: dict[str, str] = ENV) -> tuple[float, float]:
    """(import seconds, CPU seconds) of ``python -X importtime -c code``, stdout discarded."""
    wrapped = (f"{VISIBLE}import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n"
               f"    from npusim.cli import main\n    {code}")
    stderr, cpu = _run(wrapped if code.startswith("main") else code, env)
    base_stderr, base_cpu = _run("pass", env)
    baseline = _top_level(base_stderr)
    imports = sum(us for name, us in _top_level(stderr).items() if name not in baseline)
    return imports / 1e6, cpu - base_cpu


def _run(code: str, env: dict[str, str]) -> tuple[str, float]:
    before = os.times()
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                          capture_output=True, text=True, check=False, env=env)
    after = os.times()
    cpu = (after.children_user - before.children_user
           + after.children_system - before.children_system)
    return done.stderr, cpu


def _top_level(stderr: str) -> dict[str, int]:
    """{module: cumulative microseconds} of the imports not nested in another."""
    out = {}
    for line in stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3:
            continue
        _, cumulative, name = parts
        if cumulative.strip().isdigit() and name.startswith(" ") and not name.startswith("  "):
            out[name.strip()] = int(cumulative)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", metavar="SRC", help="another tree's src folder, measured "
                        "beside this one (columns 'against')")
    args = parser.parse_args()
    envs = {"": ENV}
    if args.against:
        envs["against "] = {**ENV, "PYTHONPATH": os.path.abspath(args.against)}
    heads = "".join(f" {w + 'import ms':>18} {w + 'CPU ms':>15} {w + 'over floor':>19}"
                    for w in envs)
    print(f"{'command':<26}{heads}   (median of {args.runs} runs; "
          f"target: import < {TARGET_S * 1e3:.0f} ms)")
    floor = FLOORS["floor: numpy + rich table"]
    for label, code in {**COMMANDS, **FLOORS}.items():
        for env in envs.values():
            measure(code, env)  # writes the bytecode
        paired = label in ON_THE_FLOOR
        runs = [[(*measure(code, env), measure(floor, env)[0] if paired else 0.0)
                 for env in envs.values()] for _ in range(args.runs)]
        cells = "".join(f" {statistics.median(r[k][0] for r in runs) * 1e3:18.1f}"
                        f" {statistics.median(r[k][1] for r in runs) * 1e3:15.1f}"
                        + (f" {statistics.median(r[k][0] - r[k][2] for r in runs) * 1e3:19.1f}"
                           if paired else f" {'-':>19}")
                        for k in range(len(envs)))
        print(f"{label:<26}{cells}")


if __name__ == "__main__":
    main()
