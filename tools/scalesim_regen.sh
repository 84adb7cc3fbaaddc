#!/usr/bin/env bash
# Regenerate tests/data/scalesim/resnet18_32x32_{os,ws,is}/ from SCALE-Sim 3.0.0:
# ResNet-18 topology on SCALE-Sim's default config (32x32 array, 64 KiB SRAMs), one run
# per dataflow. Each run of ResNet-18 takes 5 to 30 minutes and several GB of RAM; only the
# report CSVs are kept.
#
# Usage: tools/scalesim_regen.sh [os ws is]
#   SCALESIM_VENV=DIR      venv holding scalesim; default .scalesim-venv in the checkout,
#                          created with scalesim==3.0.0 "numpy<2.4" if missing (numpy 2.4
#                          crashes SCALE-Sim at the end of layer 0)
#   SCALESIM_DATA=DIR      SCALE-Sim's data files: DIR/topologies/, DIR/configs/scale.cfg and
#                          DIR/configs/layout_resnet18.csv; default the copies kept in
#                          tests/data/scalesim/
#   SCALESIM_TOPOLOGY=CSV  another topology to run (default Resnet18.csv of the data files);
#                          its reports go to NAME_32x32_DATAFLOW/, NAME its file name in
#                          lower case
#   SCALESIM_OUT=DIR       where the report folders go (default tests/data/scalesim)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${SCALESIM_VENV:-$repo/.scalesim-venv}
out_data=${SCALESIM_OUT:-$repo/tests/data/scalesim}
if [ -n "${SCALESIM_DATA:-}" ]; then
    cfg=$SCALESIM_DATA/configs/scale.cfg
    layout=$SCALESIM_DATA/configs/layout_resnet18.csv
    topology=${SCALESIM_TOPOLOGY:-$SCALESIM_DATA/topologies/Resnet18.csv}
else
    cfg=$repo/tests/data/scalesim/scale.cfg
    layout=$repo/tests/data/scalesim/layout_resnet18.csv
    topology=${SCALESIM_TOPOLOGY:-$repo/tests/data/scalesim/Resnet18.csv}
fi
if [ $# -gt 0 ]; then dataflows=("$@"); else dataflows=(os ws is); fi

die() { echo "scalesim_regen: $*" >&2; exit 2; }

for df in "${dataflows[@]}"; do
    case $df in os | ws | is) ;; *) die "dataflow '$df': must be os, ws or is" ;; esac
done
for f in "$cfg" "$layout" "$topology"; do
    [ -f "$f" ] || die "$f: no such file (SCALESIM_DATA=DIR must hold topologies/Resnet18.csv," \
        "configs/scale.cfg and configs/layout_resnet18.csv; unset, the copies in" \
        "tests/data/scalesim/ are used)"
done
grep -q '^run_name = ' "$cfg" && grep -q '^Dataflow : ' "$cfg" ||
    die "$cfg: not SCALE-Sim's scale.cfg (no 'run_name = ' or 'Dataflow : ' line)"
mkdir -p "$out_data" || die "$out_data: cannot create the output folder"

# scalesim==3.0.0 with numpy < 2.4, in its own venv (it does not install beside npusim's numpy)
if ! "$venv/bin/python" -c "import scalesim" 2>/dev/null; then
    echo "scalesim_regen: installing scalesim==3.0.0 into $venv" >&2
    python3 -m venv "$venv" || die "$venv: cannot create a venv there (python3 -m venv)"
    "$venv/bin/pip" install --quiet "scalesim==3.0.0" "numpy<2.4" ||
        die "$venv: pip could not install scalesim==3.0.0 and numpy<2.4"
fi
"$venv/bin/python" - <<'EOF' || die "$venv: needs scalesim 3.0.0 and numpy < 2.4 (set SCALESIM_VENV to another folder, or remove this one to have it made anew)"
from importlib.metadata import version
import sys
numpy = tuple(int(p) for p in version("numpy").split(".")[:2])
sys.exit(not (version("scalesim") == "3.0.0" and numpy < (2, 4)))
EOF

# What `python -m scalesim.scale -c CFG -t TOPO -l LAYOUT -p OUT` runs, without writing the
# per-layer traces (GBs; the reports do not depend on them) and without progress bars.
run_scalesim='
import sys
from scalesim.scale_sim import scalesim
cfg, topology, layout, out = sys.argv[1:5]
scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topology,
         layout=layout).run_scale(top_path=out)
'

name=$(basename "$topology" .csv | tr '[:upper:]' '[:lower:]')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for df in "${dataflows[@]}"; do
    run=${name}_32x32_$df
    # SCALE-Sim's default scale.cfg with only the run name and the dataflow changed
    sed -e "s/^run_name = .*/run_name = $run/" -e "s/^Dataflow : .*/Dataflow : $df/" \
        "$cfg" > "$work/scale_$df.cfg"
    (cd "$work" && "$venv/bin/python" -c "$run_scalesim" "scale_$df.cfg" \
        "$(realpath "$topology")" "$(realpath "$layout")" "$work/out") ||
        die "$run: SCALE-Sim failed (its messages are above)"
    mkdir -p "$out_data/$run"
    for f in COMPUTE_REPORT.csv BANDWIDTH_REPORT.csv DETAILED_ACCESS_REPORT.csv; do
        cp "$work/out/$run/$f" "$out_data/$run/$f"
    done
    rm -rf "${work:?}/out/$run"
    echo "$run: $(($(wc -l < "$out_data/$run/COMPUTE_REPORT.csv") - 1)) layers"
done
# keep the inputs beside the reports (nothing to do when they are already those copies)
for f in "$topology" "$cfg" "$layout"; do
    if [ "$(realpath "$f")" != "$(realpath -m "$out_data/$(basename "$f")")" ]; then
        cp "$f" "$out_data/"
    fi
done
