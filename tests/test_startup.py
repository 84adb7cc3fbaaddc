"""Commands that need no compiled kernel, tensor import or plot load none of the heavy
libraries, and ``--help`` not even numpy, rich or the simulator (a module-set check in a
fresh interpreter; no timing: bench/bench_startup.py times them)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("numba", "llvmlite", "torch", "onnx", "onnxruntime", "skimage", "matplotlib",
         "scipy", "PIL")
PARSER_ONLY = HEAVY + ("numpy", "rich", "npusim.simulate", "npusim.dataflows", "npusim.ir",
                       "npusim.dse.runner", "threadpoolctl")
SRC = str(Path(__file__).resolve().parents[1] / "src")

SCRIPT = """
import contextlib, io, json, sys
import npusim.cli
loaded = {"import": sorted(m for m in HEAVY if m in sys.modules)}
for argv in ARGVS:
    with contextlib.redirect_stdout(io.StringIO()):
        code = npusim.cli.main(argv)
    loaded[" ".join(argv)] = [code, sorted(m for m in HEAVY if m in sys.modules)]
print(json.dumps(loaded))
"""


def _heavy_loaded(argvs: list[list[str]], heavy: tuple[str, ...] = HEAVY) -> dict:
    """{'import': modules, 'cmd ...': [exit code, modules]} from a fresh interpreter: which
    of ``heavy`` are loaded after importing the CLI, and after each command."""
    code = f"HEAVY = {heavy!r}\nARGVS = {argvs!r}\n{SCRIPT}"
    return json.loads(_fresh_python(code).splitlines()[-1])


def _fresh_python(code: str) -> str:
    """The standard output of ``python -c code`` in a new interpreter on this tree's npusim."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True).stdout


def test_importing_the_cli_and_its_help_load_neither_numpy_nor_the_simulator():
    """The parser is built from the light modules alone (``npusim.choices``, the lazy
    packages): numpy, rich and the machines wait for a command that uses them."""
    loaded = _heavy_loaded([["--help"], ["sweep", "--help"], ["run", "--help"]], PARSER_ONLY)
    assert loaded == {"import": [], "--help": [0, []], "sweep --help": [0, []],
                      "run --help": [0, []]}


@pytest.mark.parametrize("argv", [["--help"], ["models"], ["archs"], ["run", "Resnet18.csv"],
                                  ["run", "yolo_tiny.csv", "--arch", "systolic-32x32-os"],
                                  ["run", "Resnet18.csv", "--arch", "group-tile-64mac", "-q"]])
def test_light_commands_load_no_heavy_library(argv):
    """(A shape-only run on a machine whose costs come from compiled kernels, such as
    input-reuse, loads numba: it calls them.)"""
    loaded = _heavy_loaded([argv])
    assert loaded[" ".join(argv)] == [0, []]


@pytest.mark.parametrize("argv", [["models"], ["archs"]])
def test_the_listings_load_no_rich(argv):
    """``models`` and ``archs`` print plain columns (``cli.print_columns``), not rich tables."""
    loaded = _heavy_loaded([argv], HEAVY + ("rich",))
    assert loaded[" ".join(argv)] == [0, []]


@pytest.mark.parametrize("argv", [["models"], ["archs"]])
def test_the_listings_load_no_numpy(argv):
    """``models`` reads the zoo's catalogue (``frontends.catalogue``), not the model modules;
    ``archs`` the presets through the machines' sections (``arch.sections``), not the
    machines: neither imports numpy, the IR or a dataflow."""
    loaded = _heavy_loaded([argv], PARSER_ONLY)
    assert loaded[" ".join(argv)] == [0, []]


def test_a_shape_only_run_loads_the_machine_it_runs_alone():
    """A topology run on the systolic array defines no op, imports no other machine or its
    arch section, not the hybrid's compiler (``dataflows.machines`` resolves one machine),
    not SCALE-Sim's memory model (the default preset times the folds with npusim's), no
    thread pool or file writer, not rich's emoji table (the report's console reads no
    emoji codes: ``report.table.console``), and not hashlib (OpenSSL's: the numba cache
    check, ``jit.drop_stale_caches``, imports it)."""
    others = [f"npusim.{package}.{machine}" for package in ("dataflows", "arch.sections")
              for machine in ("input_reuse", "sparse_pairs", "dilated_grid", "group_tile")]
    others += ["npusim.hybrid", "npusim.arch.sections.hybrid", "npusim.memory_scalesim"]
    unused = ("npusim.ops", *others, "npusim.report.export", "concurrent.futures",
              "threadpoolctl", "tempfile", "rich._emoji_codes", "hashlib")
    loaded = _heavy_loaded([["run", "Resnet18.csv"]], unused)
    assert loaded["run Resnet18.csv"] == [0, []]


def test_python_m_npusim_runs_the_command_line():
    """``python -m npusim`` is the ``npusim`` script: same parser, same exit code."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "npusim", "no-such-command"],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 2 and "invalid choice: 'no-such-command'" in done.stderr


def test_a_kernel_call_still_compiles_with_numba():
    """The lazy kernels become numba's on first use (the run then loads numba)."""
    code = ("import sys, numpy as np\nfrom npusim import bitconv\n"
            "from npusim.ir import ConvLayer\n"
            "layer = ConvLayer(N=1, C=3, H=4, W=4, K=2, R=3, S=3, padding=(1, 1, 1, 1))\n"
            "w = bitconv.pack_weights(layer, np.ones((2, 3, 3, 3), bool))\n"
            "print(int(bitconv.kernel_ones(w).sum()), 'numba' in sys.modules,\n"
            "      type(bitconv._pack_kernels).__module__)")
    out = _fresh_python(code).split()
    assert out == ["54", "True", "numba.core.registry"]


def test_the_lazy_package_names_are_the_library_objects():
    """``npusim.simulate`` stays the function, not the module of the same name, however that
    module was first imported; every exported name of each lazy package resolves (torch and
    onnx are installed for the tests) and is listed by ``dir``."""
    code = ("import npusim.cli, npusim.simulate as m, npusim, npusim.dse, npusim.report\n"
            "from npusim.simulate import simulate\n"
            "packages = (npusim, npusim.dse, npusim.report)\n"
            "bad = [f'{p.__name__}.{n}' for p in packages for n in p.__all__\n"
            "       if getattr(p, n, None) is None or n not in dir(p)]\n"
            "print(npusim.simulate is simulate, m is simulate, npusim.dse.pareto.__module__,\n"
            "      npusim.from_onnx.__module__, repr(bad).replace(' ', ''))")
    out = _fresh_python(code).split()
    assert out == ["True", "True", "npusim.dse.pareto", "npusim.frontends.onnx_import", "[]"]
