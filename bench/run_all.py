"""Run every benchmark in this folder, one after another, printing their ratios.

Every comparison of machines a script prints names the memory it ran on (``common.memory_line``:
"same memory" or "UNEQUAL memory"); this runner lists the presets' memory first.

Run: python bench/run_all.py   (takes several minutes: SCALE-Sim is slow)
     python bench/run_all.py input sparse   (only the scripts whose names contain these)
"""

import runpy
import sys
from pathlib import Path

here = Path(__file__).parent
sys.path.insert(0, str(here))
from common import memory_line  # noqa: E402

from npusim.arch import load_arch, presets  # noqa: E402

wanted = sys.argv[1:]  # parts of script names; none: every script
print(f"presets' memory: {memory_line(*[load_arch(name) for name in presets()])}", flush=True)
for script in sorted(here.glob("bench_*.py")):
    if wanted and not any(a in script.name for a in wanted):
        continue
    print(f"== {script.name}", flush=True)
    sys.argv = [str(script)]  # the script's own arguments: none (the filter is not for it)
    runpy.run_path(str(script), run_name="__main__")
