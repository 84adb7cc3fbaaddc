#!/usr/bin/env bash
# Regenerate tests/data/scalesim/resnet18_32x32_{os,ws,is}/ from SCALE-Sim 3.0.0:
# ResNet-18 topology on SCALE-Sim's default config (32x32 array, 64 KiB SRAMs), one run
# per dataflow. Each run takes 5 to 30 minutes and several GB of RAM; only the report
# CSVs are kept.
#
# Usage: tools/scalesim_regen.sh [os ws is]
#   SCALESIM_VENV=DIR  venv holding scalesim (created with scalesim==3.0.0 "numpy<2.4"
#                      if missing; numpy 2.4 crashes SCALE-Sim at the end of layer 0)
#   SCALESIM_DATA=DIR  SCALE-Sim's data files (topologies/, configs/);
#                      default ../shared/scalesim beside the checkout
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${SCALESIM_VENV:-$repo/.scalesim-venv}
data=${SCALESIM_DATA:-$repo/../shared/scalesim}
out_data=$repo/tests/data/scalesim
if [ $# -gt 0 ]; then dataflows=("$@"); else dataflows=(os ws is); fi

if ! "$venv/bin/python" -c "import scalesim" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "scalesim==3.0.0" "numpy<2.4"
fi

# What `python -m scalesim.scale -c CFG -t TOPO -l LAYOUT -p OUT` runs, without writing the
# per-layer traces (GBs; the reports do not depend on them) and without progress bars.
run_scalesim='
import sys
from scalesim.scale_sim import scalesim
cfg, topology, layout, out = sys.argv[1:5]
scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topology,
         layout=layout).run_scale(top_path=out)
'

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for df in "${dataflows[@]}"; do
    run=resnet18_32x32_$df
    # SCALE-Sim's default scale.cfg with only the run name and the dataflow changed
    sed -e "s/^run_name = .*/run_name = $run/" -e "s/^Dataflow : .*/Dataflow : $df/" \
        "$data/configs/scale.cfg" > "$work/scale_$df.cfg"
    (cd "$work" && "$venv/bin/python" -c "$run_scalesim" "scale_$df.cfg" \
        "$data/topologies/Resnet18.csv" "$data/configs/layout_resnet18.csv" "$work/out")
    mkdir -p "$out_data/$run"
    for f in COMPUTE_REPORT.csv BANDWIDTH_REPORT.csv DETAILED_ACCESS_REPORT.csv; do
        cp "$work/out/$run/$f" "$out_data/$run/$f"
    done
    rm -rf "${work:?}/out/$run"
    echo "$run: $(($(wc -l < "$out_data/$run/COMPUTE_REPORT.csv") - 1)) layers"
done
cp "$data/topologies/Resnet18.csv" "$data/configs/scale.cfg" "$data/configs/layout_resnet18.csv" \
    "$out_data/"
