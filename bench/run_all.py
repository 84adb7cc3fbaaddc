"""Run every benchmark in this folder, one after another, printing their ratios.

Run: python bench/run_all.py   (takes several minutes: SCALE-Sim is slow)
     python bench/run_all.py input sparse   (only the scripts whose names contain these)
"""

import runpy
import sys
from pathlib import Path

here = Path(__file__).parent
wanted = sys.argv[1:]  # parts of script names; none: every script
for script in sorted(here.glob("bench_*.py")):
    if wanted and not any(a in script.name for a in wanted):
        continue
    print(f"== {script.name}", flush=True)
    sys.argv = [str(script)]  # the script's own arguments: none (the filter is not for it)
    runpy.run_path(str(script), run_name="__main__")
