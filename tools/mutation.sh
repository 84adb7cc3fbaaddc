#!/usr/bin/env bash
# Mutation testing (docs/testing.md, "Mutation testing"): mutmut, pinned, over the code that
# [tool.mutmut] in pyproject.toml names (the dataflows, the emulators, stats.py: where counts
# are made and priced, energy included). mutmut is installed into .mutmut/ beside the project's
# venv, not into it (it is a tool, not a dependency of npusim or its tests).
#
#   tools/mutation.sh                      every mutant (hours on 2 cores)
#   tools/mutation.sh 'npusim.stats.*'     the mutants of one module (mutmut's name globs)
#   tools/mutation.sh results              the table of what survived so far
#   tools/mutation.sh sample 200 [SEED]    the score estimated on a seeded random sample
#
# Results are kept in mutants/; a second run resumes where the first stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
if [ ! -d .mutmut/mutmut ]; then
    "$python" -m pip install -q --target .mutmut mutmut==3.8.1
fi
if [ "${1:-}" = sample ]; then
    PYTHONPATH="$PWD/.mutmut" exec "$python" tools/mutation_sample.py --size "${2:-200}" \
        --seed "${3:-0}" --max-children "$(nproc)"
fi
if [ "${1:-}" = results ]; then
    PYTHONPATH="$PWD/.mutmut" exec "$python" -m mutmut results
fi
PYTHONPATH="$PWD/.mutmut" "$python" -m mutmut run --max-children "$(nproc)" "$@"
PYTHONPATH="$PWD/.mutmut" "$python" -m mutmut results
