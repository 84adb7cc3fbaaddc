"""Each machine's own diagnostic lines under ``npusim run``'s report, their values
recomputed here from the layers' fields in the run's JSON report."""

import json
import re

import pytest

from npusim import cli

RNET = ["mtcnn-rnet", "--density", "0.5"]  # real weights, 24x24 crops, pruned: zeros to skip
SEGNET = ["dilated-segnet", "--input-shape", "1,3,32,32"]  # dilations 1 to 18


def _run(capsys, tmp_path, model: list[str], arch: str) -> tuple[str, dict]:
    """(terminal report, summed fields and extras of the conv layers from the JSON)."""
    out_json = tmp_path / "run.json"
    assert cli.main(["run", *model, "--arch", arch, "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    layers = [r for r in json.loads(out_json.read_text())["layers"] if r["dataflow"] != "vector"]
    summed = {}
    for record in layers:
        for key, value in {**record, **record["extra"]}.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                summed[key] = summed.get(key, 0) + value
    return text, summed


def _shown(text: str, label: str) -> str:
    """The text printed after ``label`` on its diagnostics line."""
    match = re.search(rf"^{re.escape(label)}  +(.*?)\s*$", text, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{text}"
    return match.group(1)


def _pct(part, whole) -> str:
    return f"{100 * part / whole:.1f} %"


def test_systolic_shows_mapping_efficiency_and_folds(capsys, tmp_path):
    text, t = _run(capsys, tmp_path, RNET, "systolic-32x32-ws")
    assert "systolic machine" in text
    assert _shown(text, "mapping efficiency") == (
        f"{_pct(t['mapped_pe_cycles'], t['pe_cycles'])} of PE-cycles had work mapped")
    assert _shown(text, "folds") == f"{t['folds']:,}"


def test_group_tile_shows_bus_and_mac_utilisation_and_stalls(capsys, tmp_path):
    text, t = _run(capsys, tmp_path, RNET, "group-tile-64mac")
    assert _shown(text, "bus utilisation").startswith(_pct(t["broadcasts"], t["bus_slots"]))
    assert _shown(text, "MAC utilisation") == f"{_pct(t['macs'], t['pe_cycles'])} of MAC cycles"
    assert _shown(text, "weight stalls") == f"{t['weight_stall_cycles']:,} cycles"
    assert _shown(text, "drain stalls") == f"{t['drain_stall_cycles']:,} cycles"
    narrowed = t["narrowed_block_layers"]
    assert narrowed > 0  # float32 layers whose 64-output blocks exceed 32 KiB
    assert _shown(text, "narrowed output blocks") == (
        f"{narrowed:,} layers: fewer outputs a block than MACs, so that its weights stay in the "
        "wide memory")


def test_input_reuse_shows_contention_stealing_and_transfers(capsys, tmp_path):
    text, t = _run(capsys, tmp_path, RNET, "input-reuse-1024")
    waited, moved = t["contention_cycles"], t["transfers"]
    assert _shown(text, "interconnect contention") == (
        f"{waited:,} cycles transfers waited for the interconnect, summed over transfers "
        f"({waited / moved:,.1f} a transfer)")
    assert _shown(text, "first buffers full") == (
        f"{t['first_buffer_stall_cycles']:,} cycles the operation units stalled, summed over "
        "units")
    assert _shown(text, "transfers") == f"{t['transfers']:,} ({t['transfer_cycles']:,} cycles)"
    idle = t["opunit_idle_cycles"]
    assert _shown(text, "operation units idle") == (
        f"{_pct(idle, idle + t['opunit_busy_cycles'])} of their cycles")


@pytest.mark.parametrize("model, saves", [(["mtcnn-rnet"], True), (RNET, False)])
def test_input_reuse_says_what_work_stealing_saved_or_cost(capsys, tmp_path, model, saves):
    """Dense R-Net's stealing saves cycles; pruned to 0.5 its thieves' extra partial OFMs
    cost the bus more than the shorter jobs gain: the line says 'cost', not 'saved -N'."""
    text, t = _run(capsys, tmp_path, model, "input-reuse-1024")
    saved = t["stealing_saved_cycles"]
    assert (saved > 0) == saves
    if saves:
        assert _shown(text, "work stealing saved") == f"{saved:,} cycles"
    else:
        assert _shown(text, "work stealing cost") == (
            f"{-saved:,} cycles (the thieves' partial OFMs: more transfers to move)")
        assert "work stealing saved" not in text


def test_sparse_pairs_shows_group_imbalance_and_skipped_pairs(capsys, tmp_path):
    text, t = _run(capsys, tmp_path, RNET, "sparse-pairs-32x32")
    ratio = t["group_cycles_max"] / t["group_cycles_mean"]
    assert _shown(text, "group imbalance").startswith(f"{ratio:.2f}x")
    skipped = [t[f"skipped_{k}_zero"] for k in ("weight", "feature", "both")]
    assert sum(skipped) > 0  # pruned weights and ReLU zeros: pairs to skip
    assert _shown(text, "skipped pairs") == (
        f"{sum(skipped):,} (weight zero {skipped[0]:,}, feature zero {skipped[1]:,}, "
        f"both {skipped[2]:,})")


def test_dilated_grid_shows_hidden_loads_pixel_sets_and_zero_taps(capsys, tmp_path):
    text, t = _run(capsys, tmp_path, SEGNET, "dilated-grid-2x2-h3")
    assert _shown(text, "load cycles not hidden") == (
        f"{t['load_stall_cycles']:,} of {t['load_cycles']:,} load cycles")
    assert _shown(text, "pixel sets") == f"{t['pixel_sets']:,}"
    skipped, inserted = t["skipped_zero_taps"], t["zero_inserted_steps"]
    assert skipped > 0  # the dilated layers' inserted zeros are skipped
    assert _shown(text, "zero taps skipped") == (
        f"{skipped:,} of {inserted:,} zero-inserted steps ({_pct(skipped, inserted)})")
    shortened = t["shortened_run_layers"]
    assert shortened > 0  # dilated layers whose tall pixel sets load slower than they step
    assert _shown(text, "shortened tap runs") == (
        f"{shortened:,} layers: runs shorter than the grid holds, whose smaller pixel sets "
        "load sooner")


@pytest.mark.parametrize("arch", ["systolic-32x32-ws"])
def test_quiet_prints_no_diagnostics(capsys, tmp_path, arch):
    assert cli.main(["run", *RNET, "--arch", arch, "-q"]) == 0
    assert "machine" not in capsys.readouterr().out
