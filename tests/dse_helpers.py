"""Small sweep specs shared by the dse tests: shape-only topology CSVs, a few points each."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NPUSIM = [sys.executable, "-c", "import sys; from npusim.cli import main; sys.exit(main())"]

SMALL = """
base = "systolic-32x32-ws"
models = ["test.csv"]
objectives = ["cycles", "utilisation"]
[parameters]
"systolic.rows" = [4, 16, 64]
"systolic.cols" = [8, 32, 0]
"""


def write_spec(tmp_path: Path, text: str = SMALL, name: str = "sweep.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def env() -> dict:
    """The environment for an npusim subprocess: this tree's sources first, then the caller's
    path (a tool running the tests may need its own modules there)."""
    return {**os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}


def npusim(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*NPUSIM, *map(str, args)], capture_output=True, text=True, env=env(),
                          **kw)
