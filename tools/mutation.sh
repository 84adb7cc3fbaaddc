#!/usr/bin/env bash
# Mutation testing (docs/testing.md, "Mutation testing"): mutmut, pinned, over the code that
# [tool.mutmut] in pyproject.toml names (the dataflows, the emulators, stats.py: where counts
# are made and priced, energy included). mutmut is installed into .mutmut/ beside the project's
# venv, not into it (it is a tool, not a dependency of npusim or its tests).
#
#   tools/mutation.sh                      every mutant (hours on 2 cores)
#   tools/mutation.sh 'npusim.stats.*'     the mutants of one module (mutmut's name globs)
#   tools/mutation.sh results              the table of what survived so far
#
# Results are kept in mutants/; a second run resumes where the first stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
if [ ! -d .mutmut/mutmut ]; then
    "$python" -m pip install -q --target .mutmut mutmut==3.8.1
fi
if [ "${1:-}" = results ]; then
    PYTHONPATH=.mutmut exec "$python" -m mutmut results
fi
PYTHONPATH=.mutmut "$python" -m mutmut run --max-children "$(nproc)" "$@"
PYTHONPATH=.mutmut "$python" -m mutmut results
