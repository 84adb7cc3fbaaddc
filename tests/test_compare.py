"""``npusim compare``: every figure of its table, JSON and CSV against separate ``npusim run``s
of each arch (the same model, weights and input), ratios recomputed here."""

import csv
import io
import json
import math
import re
import tempfile
from pathlib import Path

import pytest
from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
MODEL = ["mtcnn-rnet", "--density", "0.5"]  # real weights, pruned: zeros for sparse-pairs
# examples/my_npu.toml with DRAM at 10 B/cycle, the presets at 17.064: unequal memories.
SLOW_NPU = Path(tempfile.mkdtemp()) / "my_npu.toml"
SLOW_NPU.write_text((ROOT / "examples" / "my_npu.toml").read_text().replace(
    "dram_bytes_per_cycle = 17.064", "dram_bytes_per_cycle = 10.0").replace(
    "reconfig_cycles = 0 ", "reconfig_cycles = 40 "))  # a configuration load per layer
ARCHS = ["systolic-32x32-ws", "sparse-pairs-32x32", str(SLOW_NPU)]
LABELS = ["systolic-32x32-ws", "sparse-pairs-32x32", "my-npu"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """(stdout, JSON report, CSV rows) of one ``npusim compare`` of the three archs."""
    tmp = tmp_path_factory.mktemp("compare")
    arch_flags = [f for a in ARCHS for f in ("--arch", a)]
    code, out, err = run_cli("compare", *MODEL, *arch_flags, "--json", tmp / "c.json",
                          "--csv", tmp / "c.csv")
    assert code == 0, err
    rows = list(csv.DictReader((tmp / "c.csv").open()))
    return out, json.loads((tmp / "c.json").read_text()), rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The JSON report of a separate ``npusim run`` on each arch."""
    tmp = tmp_path_factory.mktemp("runs")
    docs = []
    for i, arch in enumerate(ARCHS):
        code, _, err = run_cli("run", *MODEL, "--arch", arch, "-q", "--json", tmp / f"{i}.json")
        assert code == 0, err
        docs.append(json.loads((tmp / f"{i}.json").read_text()))
    return docs


def _convs(doc) -> list[dict]:
    return [r for r in doc["layers"] if r["dataflow"] != "vector"]


def test_every_layer_matches_its_own_run_with_ratios_against_the_first(compared, runs):
    _, doc, _ = compared
    base = _convs(runs[0])
    convs = [row for row in doc["layers"] if row["name"] != "vector unit"]
    assert [row["name"] for row in convs] == [r["name"] for r in base]
    for row, layers in zip(convs, zip(*[_convs(r) for r in runs], strict=True), strict=True):
        for cell, run_layer, label in zip(row["archs"], layers, LABELS, strict=True):
            assert cell["arch"] == label
            assert cell["cycles"] == run_layer["cycles"]
            assert cell["bound"] == run_layer["bound"]
            assert cell["utilisation"] == pytest.approx(run_layer["macs"] / run_layer["pe_cycles"])
            assert cell["energy_pj"] == pytest.approx(run_layer["energy_pj"])
            assert cell["speedup"] == pytest.approx(layers[0]["cycles"] / run_layer["cycles"])
            assert cell["energy_ratio"] == pytest.approx(
                run_layer["energy_pj"] / layers[0]["energy_pj"])


def test_vector_row_sums_the_non_conv_ops(compared, runs):
    _, doc, _ = compared
    (vector,) = [row for row in doc["layers"] if row["name"] == "vector unit"]
    for cell, run in zip(vector["archs"], runs, strict=True):
        assert cell["cycles"] == sum(r["cycles"] for r in run["layers"]
                                     if r["dataflow"] == "vector")


def test_vector_row_util_is_the_lanes_share_as_in_runs_table(compared, runs):
    """The vector unit's util % in compare's table is its element ops over its lanes' cycles,
    as ``npusim run``'s table prints it (it read 0.0 beside run's 99.9). Recomputed from each
    run's JSON: its vector ops' element ops and cycles, and the arch's lanes."""
    out, _, _ = compared
    (line,) = [x for x in out.splitlines() if x.lstrip().startswith("vector unit")]
    words = line.split()
    shown = [words[i + 1] for i, w in enumerate(words) if w == "compute"]  # after the bound
    for run, cell in zip(runs, shown, strict=True):
        ops = [r for r in run["layers"] if r["dataflow"] == "vector"]
        lanes = run["arch"]["vector"]["lanes"]
        util = sum(r["vector_ops"] for r in ops) / (lanes * sum(r["cycles"] for r in ops))
        assert cell == f"{100 * util:.1f}" and util > 0.5


def test_totals_speedups_and_where_the_time_goes(compared, runs):
    out, doc, _ = compared
    base = runs[0]["totals"]
    for entry, run, label in zip(doc["archs"], runs, LABELS, strict=True):
        t = run["totals"]
        assert entry["label"] == label
        assert entry["totals"]["cycles"] == t["cycles"]
        assert entry["speedup"] == pytest.approx(base["cycles"] / t["cycles"])
        assert entry["energy_ratio"] == pytest.approx(t["energy_pj"] / base["energy_pj"])
        split = entry["time_split"]
        assert split["compute"] == pytest.approx(t["compute_cycles"] / t["cycles"])
        assert split["DRAM ifmap"] == pytest.approx(t["stall_dram_ifmap_cycles"] / t["cycles"])
        assert split["DRAM ofmap"] == pytest.approx(t["stall_dram_ofmap_cycles"] / t["cycles"])
        assert split["reconfiguration"] == t["stall_reconfig_cycles"] / t["cycles"]
        assert (t["stall_reconfig_cycles"] > 0) == (label == "my-npu")
        assert sum(split.values()) == pytest.approx(1.0)
        assert f"{label}: {100 * t['compute_cycles'] / t['cycles']:.1f} % compute" in out
        assert f"{label}: {t['cycles']:,} cycles" in out
    assert doc["baseline"] == LABELS[0]


def test_table_to_a_pipe_is_never_cut(compared):
    out, doc, _ = compared
    lines = out.splitlines()
    for row in doc["layers"]:
        (line,) = [x for x in lines if x.split() and x.split()[0] == row["name"].split()[0]]
        words, at = line.split(), 0
        for cell in row["archs"]:  # each arch's cycles, in order along the line
            at = words.index(f"{cell['cycles']:,}", at) + 1
    assert "…" not in out


def test_unequal_memories_are_said(compared):
    out, doc, _ = compared
    (note,) = doc["notes"]
    assert "memories differ" in note and "DRAM 10 B/cycle" in note and "17.064" in note
    assert "note: the archs' memories differ" in out


def test_equal_memories_say_nothing(tmp_path):
    mine = ROOT / "examples" / "my_npu.toml"  # the preset's memory at another bandwidth
    code, out, err = run_cli("compare", *MODEL, "--arch", ARCHS[0], "--arch", mine,
                          "--bandwidth", "10", "--json", tmp_path / "c.json")
    assert code == 0, err
    assert json.loads((tmp_path / "c.json").read_text())["notes"] == []
    assert "note:" not in out
    code, out, err = run_cli("compare", *MODEL, "--arch", mine, "--arch", ARCHS[2],
                          "--bandwidth", "10", "--json", tmp_path / "c.json")
    (note,) = json.loads((tmp_path / "c.json").read_text())["notes"]
    assert "40 cycles a unit to load a layer's configuration" in note  # what differs, said


def test_csv_has_a_row_per_layer_and_arch(compared):
    _, doc, rows = compared
    assert len(rows) == (len(doc["layers"]) + 1) * len(ARCHS)
    by_key = {(r["layer"], r["arch"]): r for r in rows}
    for layer in doc["layers"]:
        for cell in layer["archs"]:
            row = by_key[layer["name"], cell["arch"]]
            assert int(row["cycles"]) == cell["cycles"]
            assert math.isclose(float(row["speedup"]), cell["speedup"], rel_tol=1e-12)
    totals = [r for r in rows if r["layer"] == "total"]
    assert [int(r["cycles"]) for r in totals] == [a["totals"]["cycles"] for a in doc["archs"]]


def test_one_arch_is_refused_before_any_run(tmp_path):
    code, out, err = run_cli("compare", *MODEL, "--arch", ARCHS[0], "--json", tmp_path / "c.json")
    assert code == 2
    assert "compare needs two or more --arch" in err
    assert not (tmp_path / "c.json").exists()


def test_topology_compare_runs_shape_only(tmp_path):
    topo = tmp_path / "net.csv"
    topo.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                    "Channels, Num Filter, Strides,\nc1, 18, 18, 3, 3, 8, 16, 1,\n")
    code, out, err = run_cli("compare", topo, "--arch", "systolic-32x32-ws",
                          "--arch", "systolic-32x32-os", "--json", tmp_path / "c.json")
    assert code == 0, err
    doc = json.loads((tmp_path / "c.json").read_text())
    ws, os_ = (a["totals"]["cycles"] for a in doc["archs"])
    assert doc["layers"][0]["archs"][1]["speedup"] == pytest.approx(ws / os_)


def test_one_arch_flag_takes_several_names_as_repeated_flags_do(tmp_path):
    topo = tmp_path / "net.csv"
    topo.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                    "Channels, Num Filter, Strides,\nc1, 18, 18, 3, 3, 8, 16, 1,\n")
    archs = ["systolic-32x32-ws", "systolic-32x32-os", "systolic-32x32-is"]
    docs = []
    for flags in (["--arch", *archs], ["--arch", archs[0], "--arch", *archs[1:]]):
        out = tmp_path / f"c{len(docs)}.json"
        code, _, err = run_cli("compare", topo, *flags, "--json", out)
        assert code == 0, err
        docs.append(json.loads(out.read_text()))
    for doc in docs:
        assert [a["arch"]["name"] for a in doc["archs"]] == archs
    assert docs[0]["archs"] == docs[1]["archs"]
    # the same cycles as each arch run alone (the systolic array's own count)
    for arch, totals in zip(archs, (a["totals"] for a in docs[0]["archs"]), strict=True):
        code, _, err = run_cli("run", topo, "--arch", arch, "--json", tmp_path / "r.json")
        assert code == 0, err
        run = json.loads((tmp_path / "r.json").read_text())
        assert totals["cycles"] == run["totals"]["cycles"]


def test_model_after_the_arch_names_is_asked_for_by_name(tmp_path):
    code, _, err = run_cli("compare", "--arch", "systolic-32x32-ws", "systolic-32x32-os", "net")
    assert code == 2
    assert "required: MODEL" in err


def test_narrow_terminal_gets_one_row_per_layer_and_arch(tmp_path):
    from rich.console import Console

    from npusim.frontends import load_model
    from npusim.report import compare

    topo = tmp_path / "net.csv"
    topo.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                    "Channels, Num Filter, Strides,\nc1, 18, 18, 3, 3, 8, 16, 1,\n"
                    "c2, 16, 16, 3, 3, 16, 16, 1,\n")
    archs = ["systolic-32x32-ws", "systolic-32x32-os", "systolic-32x32-is"]
    cmp = compare.compare(load_model(str(topo)), None, archs)
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(compare.report(cmp, "title", 80))
    text = console.file.getvalue()
    table = text.split("\n\n")[0].splitlines()
    assert all(len(line) <= 80 for line in table)
    for name, stats in cmp.rows():
        base = stats[0].cycles
        for arch, s in zip(archs, stats, strict=True):
            (line,) = [x for x in table if f" {arch} " in f" {x} " and f"{s.cycles:,}" in x
                       and (x.split()[0] == name or x.split()[0] == arch)
                       and f"{base / s.cycles:.2f}x" in x]
            assert line


def test_wide_terminal_names_each_arch_once_over_its_columns(tmp_path):
    from rich.console import Console

    from npusim.frontends import load_model
    from npusim.report import compare

    topo = tmp_path / "net.csv"
    topo.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                    "Channels, Num Filter, Strides,\nc1, 18, 18, 3, 3, 8, 16, 1,\n")
    archs = ["systolic-32x32-ws", "systolic-32x32-os"]
    cmp = compare.compare(load_model(str(topo)), None, archs)
    console = Console(file=io.StringIO(), width=400, color_system=None)
    console.print(compare.report(cmp, None, 400))
    names, heads, *rows = console.file.getvalue().splitlines()
    assert names.split() == archs
    assert heads.split() == ["layer", "cycles", "bound", "util", "%", "energy"] + [
        "cycles", "bound", "util", "%", "energy", "speed-up", "energy", "x"]
    assert rows[0].split()[0] == "c1"


@pytest.mark.parametrize("archs", [("systolic-32x32-ws", "hybrid-3x1024"),
                                   ("hybrid-3x1024", "systolic-32x32-ws")])
def test_a_hybrid_compares_with_its_moves_in_a_row_of_their_own(tmp_path, archs):
    # edgetpu_v2_like on hybrid-3x1024 moves one layer's input between machines: a row that
    # the single machine does not have, which made the comparison refuse the network; with
    # the hybrid as the baseline the other's energy ratio read 0.00x, not '-'
    model = ["edgetpu_v2_like", "--mode", "estimate"]
    code, _, err = run_cli("compare", *model, "--arch", *archs,
                          "--json", tmp_path / "c.json", "--csv", tmp_path / "c.csv", "-q")
    assert code == 0, err
    doc = json.loads((tmp_path / "c.json").read_text())
    csv_moves = [r for r in csv.DictReader((tmp_path / "c.csv").open())
                 if r["layer"] == "moves between machines"]
    ratios = {r["arch"]: (r["speedup"], r["energy_ratio"]) for r in csv_moves}
    # no ratio (an empty cell, not nan) to a row not run; the baseline's own moves are 1.0x
    assert ratios == {"systolic-32x32-ws": ("", ""),
                      "hybrid-3x1024": ("1.0", "1.0") if archs[0] == "hybrid-3x1024"
                      else ("", "")}
    code, _, err = run_cli("run", *model, "--arch", "hybrid-3x1024", "-q",
                          "--json", tmp_path / "h.json")
    assert code == 0, err
    hybrid = json.loads((tmp_path / "h.json").read_text())
    moves = [r for r in hybrid["layers"] if r["dataflow"] == "transfer"]
    assert moves
    (row,) = [r for r in doc["layers"] if r["name"] == "moves between machines"]
    cells = {c["arch"]: c for c in row["archs"]}
    single, mixed = cells[archs[archs[0] == "hybrid-3x1024"]], cells["hybrid-3x1024"]
    assert single["cycles"] == 0 and mixed["cycles"] == sum(m["cycles"] for m in moves)
    assert single["speedup"] is None and single["energy_ratio"] is None
    assert mixed["speedup"] == mixed["energy_ratio"] == (1.0 if archs[0] == "hybrid-3x1024"
                                                         else None)
    (totals,) = [a["totals"] for a in doc["archs"] if a["label"] == "hybrid-3x1024"]
    assert totals["cycles"] == hybrid["totals"]["cycles"]


def test_an_arch_that_cannot_run_a_layer_is_named(tmp_path):
    """An input-reuse variant whose first buffer cannot hold a layer's partial OFMs: the
    error named the dataflow and the layer, not which of the two input-reuse archs failed."""
    preset = ROOT / "src" / "npusim" / "arch" / "presets" / "input-reuse-1024.toml"
    text = preset.read_text().replace('name = "input-reuse-1024"', 'name = "ir-7x7"')
    for key, value in (("region_rows", 7), ("region_cols", 7), ("accumulators", 81),
                       ("first_buffer_kb", 1)):
        text, n = re.subn(rf"^{key} = \d+", f"{key} = {value}", text, flags=re.M)
        assert n == 1, key
    small = tmp_path / "ir77.toml"
    small.write_text(text)
    code, _, err = run_cli("compare", "mtcnn-onet", "--arch", "input-reuse-1024", small, "-q",
                           "--json", tmp_path / "c.json")
    assert code == 2 and "arch ir-7x7 (2 of 2): conv1: dataflow 'input-reuse' cannot run" in err
    assert not (tmp_path / "c.json").exists()


def test_a_machines_own_buffers_are_in_the_memory_note_and_line(tmp_path):
    """Two group-tile archs on one [memory] whose narrow and wide memories (in place of the
    ifmap and filter SRAMs) differ, 64 KiB against 4 MiB a tile: a memory difference, said,
    with each arch's own buffers; archs of different machines on one [memory] say nothing."""
    from npusim.arch.spec import PRESET_DIR

    big = tmp_path / "gt-big.toml"
    big.write_text((PRESET_DIR / "group-tile-64mac.toml").read_text()
                   .replace("narrow_kb = 64", "narrow_kb = 4096")
                   .replace("wide_kb = 64", "wide_kb = 4096"))
    code, out, err = run_cli("compare", "lenet-digits", "--arch", "group-tile-64mac",
                             "--arch", big, "--json", tmp_path / "c.json")
    assert code == 0, err
    (note,) = json.loads((tmp_path / "c.json").read_text())["notes"]
    assert "memories differ" in note
    assert "narrow memories 64 KiB, wide memories 64 KiB (in place of the ifmap and filter" in note
    assert "narrow memories 4,096 KiB, wide memories 4,096 KiB" in note
    code, out, err = run_cli("compare", "lenet-digits", "--arch", "input-reuse-1024",
                             "--arch", "sparse-pairs-32x32", "--json", tmp_path / "d.json")
    assert code == 0, err
    assert json.loads((tmp_path / "d.json").read_text())["notes"] == []
    code, out, err = run_cli("run", "lenet-digits", "--arch", big, "--json", tmp_path / "r.json")
    memory = json.loads((tmp_path / "r.json").read_text())["totals"]["memory"]
    assert "narrow memories 4,096 KiB" in memory and "narrow memories 4,096 KiB" in out
