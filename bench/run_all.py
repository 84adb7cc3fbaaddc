"""Run every benchmark in this folder, one after another, printing their ratios.

Run: python bench/run_all.py   (takes several minutes: SCALE-Sim is slow)
"""

import runpy
import sys
from pathlib import Path

here = Path(__file__).parent
for script in sorted(here.glob("bench_*.py")):
    if len(sys.argv) > 1 and not any(a in script.name for a in sys.argv[1:]):
        continue
    print(f"== {script.name}", flush=True)
    runpy.run_path(str(script), run_name="__main__")
