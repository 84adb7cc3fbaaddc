"""Mutation score estimated from a seeded random sample of mutants (docs/testing.md,
"Mutation testing").

A full mutmut run over the scope of ``[tool.mutmut]`` takes hours on 2 cores; a uniform
sample of the mutants gives an unbiased estimate of the score with a stated confidence
interval in a fraction of that. The script has mutmut generate every mutant (its own code,
``mutmut.__main__``), draws ``--size`` of them with ``--seed``, runs exactly those through
``mutmut run NAME...`` (each against the tests mutmut traced reaching its function) and prints
the counts by status, the score (killed or timed out, over every drawn mutant that was
checked; one no test reaches counts as undetected) with a 95 % Wilson interval, and every
survivor's name for ``mutmut show``.

Run it through ``tools/mutation.sh sample SIZE [SEED]``, which puts the pinned mutmut on the
path.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

DETECTED = {"killed", "timeout", "caught by type check"}
HUNG_SECONDS = 120
FINAL = {"killed", "survived", "no tests", "caught by type check", "segfault"}  # timeouts rerun


def generate() -> list[str]:
    """Every mutant name in scope, in a stable order (mutmut writes them to mutants/)."""
    from mutmut.__main__ import create_mutants, store_lines_covered_by_tests
    from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths

    Path("mutants").mkdir(exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    setup_source_paths()
    store_lines_covered_by_tests()
    create_mutants(os.cpu_count() or 1)
    return sorted(results())


def results() -> dict[str, str]:
    """Mutant name -> status, from mutmut's meta files."""
    from mutmut.stats import status_by_exit_code

    out = {}
    for meta in Path("mutants").rglob("*.meta"):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            out[name] = status_by_exit_code[code]
    return out


_CPU_SEEN: dict[int, tuple[int, float]] = {}  # pid -> (CPU ticks, when they last moved)


def kill_hung(seconds: float) -> None:
    """Kill mutant processes (named ``mutmut: NAME``) whose CPU time has not moved for
    ``seconds``: a child forked while another thread of its parent held a lock waits on it
    for ever, and mutmut's limit counts CPU time, which a waiting process never spends.
    mutmut records the kill as a segfault; this script reports it as hung."""
    now = time.monotonic()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if not (proc / "cmdline").read_bytes().startswith(b"mutmut: "):
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = int(fields[11]) + int(fields[12])  # utime + stime, clock ticks
        pid = int(proc.name)
        last_cpu, since = _CPU_SEEN.get(pid, (None, now))
        if cpu != last_cpu:
            _CPU_SEEN[pid] = (cpu, now)
        elif now - since >= seconds:
            os.kill(pid, signal.SIGKILL)
            print(f"killed hung {pid}", flush=True)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion k / n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=200, help="mutants to draw (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    every = generate()
    sample = sorted(random.Random(args.seed).sample(every, min(args.size, len(every))))
    print(f"{len(every)} mutants in scope; {len(sample)} drawn with seed {args.seed}", flush=True)
    status = results()
    todo = [name for name in sample if status[name] not in FINAL]  # a rerun resumes
    print(f"{len(sample) - len(todo)} already checked; running {len(todo)}", flush=True)
    if todo:
        run = subprocess.Popen([sys.executable, "-m", "mutmut", "run", "--max-children",
                                str(args.max_children), *todo])
        while run.poll() is None:
            kill_hung(HUNG_SECONDS)
            time.sleep(10)
    status = results()
    counts = Counter(status[name] for name in sample)
    ran = sum(v for k, v in counts.items() if k != "not checked")  # no tests = not detected
    detected = sum(counts[k] for k in DETECTED)
    lo, hi = wilson(detected, ran)
    print("\nstatus of the drawn mutants:")
    for k, v in counts.most_common():
        print(f"  {'hung or crashed (killed)' if k == 'segfault' else k}: {v}")
    if ran:
        print(f"score: {detected} of {ran} detected = {100 * detected / ran:.1f} % "
              f"(95 % interval {100 * lo:.1f}-{100 * hi:.1f} %)")
    for name in sample:
        if status[name] in ("survived", "no tests", "suspicious", "segfault"):
            print(f"  {status[name]}: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
