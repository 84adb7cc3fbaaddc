"""Commands that need no compiled kernel, tensor import or plot load none of the heavy
libraries (a module-set check in a fresh interpreter; no timing)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("numba", "llvmlite", "torch", "onnx", "onnxruntime", "skimage", "matplotlib",
         "scipy", "PIL")
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


def _heavy_loaded(argvs: list[list[str]]) -> dict:
    """{'import': modules, 'cmd ...': [exit code, modules]} from a fresh interpreter."""
    code = f"HEAVY = {HEAVY!r}\nARGVS = {argvs!r}\n{SCRIPT}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_the_cli_loads_no_heavy_library():
    assert _heavy_loaded([]) == {"import": []}


@pytest.mark.parametrize("argv", [["--help"], ["models"], ["archs"], ["run", "Resnet18.csv"],
                                  ["run", "Resnet18.csv", "--arch", "group-tile-64mac", "-q"]])
def test_light_commands_load_no_heavy_library(argv):
    """(A shape-only run on a machine whose costs come from compiled kernels, such as
    input-reuse, loads numba: it calls them.)"""
    loaded = _heavy_loaded([argv])
    assert loaded[" ".join(argv)] == [0, []]


def test_a_kernel_call_still_compiles_with_numba():
    """The lazy kernels become numba's on first use (the run then loads numba)."""
    code = ("import sys, numpy as np\nfrom npusim import bitconv\n"
            "from npusim.ir import ConvLayer\n"
            "layer = ConvLayer(N=1, C=3, H=4, W=4, K=2, R=3, S=3, padding=(1, 1, 1, 1))\n"
            "w = bitconv.pack_weights(layer, np.ones((2, 3, 3, 3), bool))\n"
            "print(int(bitconv.kernel_ones(w).sum()), 'numba' in sys.modules,\n"
            "      type(bitconv._pack_kernels).__module__)")
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    assert out == ["54", "True", "numba.core.registry"]
