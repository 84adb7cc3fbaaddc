"""The hybrid NPU: each conv's machine against every member run on that layer alone, the moves
of inputs between machines against a hand computation, totals as the sum of what was chosen."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import npusim
from npusim import cli
from npusim.arch.spec import PRESET_DIR, load_arch
from npusim.dataflows import get
from npusim.errors import ConfigError, NpusimError
from npusim.frontends import zoo
from npusim.ir import GraphBuilder

PRESET = "hybrid-3x1024"
MEMBERS = ("sparse-pairs", "dilated-grid", "group-tile")
SCORES = {"cycles": lambda cycles, pj: cycles, "energy": lambda cycles, pj: pj,
          "energy-delay": lambda cycles, pj: cycles * pj}


def chain_net(rng):
    """A chain of layer kinds the members are built for: a strided conv, a dilated depthwise
    conv, a depthwise conv, a pruned 1x1 conv, pooling and a linear layer (a 1x1 conv: five
    convs in all). On the preset, sparse-pairs wins the convs and group-tile the linear layer."""
    g = GraphBuilder("chain", (1, 3, 14, 14))
    a = g.relu(g.conv(g.input, rng.standard_normal((512, 3, 3, 3)), rng.standard_normal(512),
                      stride=2, padding=1))
    b = g.relu(g.conv(a, rng.standard_normal((512, 1, 3, 3)), padding=2, dilation=2,
                      groups=512))
    c = g.relu(g.conv(b, rng.standard_normal((512, 1, 3, 3)), padding=1, groups=512))
    d = g.conv(c, rng.standard_normal((256, 512, 1, 1)) * (rng.random((256, 512, 1, 1)) < 0.3))
    y = g.linear(g.flatten(g.globalavgpool(d)), rng.standard_normal((1000, 256)), np.zeros(1000))
    return g.build(y)


def hybrid_arch(tmp_path, objective: str) -> Path:
    """The preset with another objective."""
    text = (PRESET_DIR / f"{PRESET}.toml").read_text()
    path = tmp_path / f"hybrid-{objective}.toml"
    path.write_text(text.replace('objective = "cycles"', f'objective = "{objective}"'))
    return path


def alone(graph, node, x_in, arch, machine):
    """The layer on one member by itself: the member's estimate on the layer's masks, counted
    afresh (not the costs ``simulate`` keeps per layer geometry for a machine whose costs
    follow the shapes, which the hybrid reads)."""
    layer = graph.layers[node.name]
    x_mask = x_in.reshape(layer.input_shape) != 0
    return get(machine).estimate(layer, x_mask, node.op.weight != 0, arch)


def hand_move(x_in, arch) -> tuple[int, float]:
    """Cycles and pJ of moving ``x_in`` (float32) through DRAM: read back and written again,
    one after the other on the one channel at the DRAM bandwidth (no compute to hide them
    behind), each byte at the DRAM energy."""
    size = x_in.size * 4
    cycles = math.ceil(2 * size / arch.memory.dram_bytes_per_cycle)
    return cycles, 2 * size * arch.energy.dram_byte_pj


@pytest.mark.parametrize("objective", ["cycles", "energy", "energy-delay"])
def test_each_layer_goes_to_the_member_best_on_it_alone_and_totals_add_up(tmp_path, objective):
    rng = np.random.default_rng(0)
    graph = chain_net(rng)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    check_choices(graph, x, hybrid_arch(tmp_path, objective), objective)


def test_on_mobilenet_v2_the_choices_are_those_of_each_member_alone():
    """A real network and photo (the estimate's choices are made after the walk, once every
    layer is counted): the classifier goes to group-tile, so one input moves."""
    graph = zoo.build("mobilenet_v2")
    res = check_choices(graph, zoo.input_for("mobilenet_v2"), PRESET, "cycles")
    assert sum(p.transfer is not None for p in res.placements) >= 1


def check_choices(graph, x, arch, objective: str):
    """Each conv of ``graph`` on ``x`` placed on the member best on it alone, its input's move
    included (by hand), and the totals the sum of what was chosen; the result."""
    res = npusim.simulate(graph, x, arch, mode="estimate", keep_outputs=True)
    arch = res.arch
    assert res.dataflow == "hybrid" and len(res.placements) == len(graph.conv_nodes)
    holder, cycles, energy = None, 0, 0.0  # the graph input starts in DRAM
    for node, placed in zip(graph.conv_nodes, res.placements, strict=True):
        x_in = x if node.inputs[0] == graph.input_name else res.outputs[node.inputs[0]]
        stats = {m: alone(graph, node, x_in, arch, m) for m in MEMBERS}
        move = hand_move(x_in, arch)
        figures = {}
        for m in MEMBERS:
            moved = holder is not None and holder != m
            c = stats[m].cycles + (move[0] if moved else 0)
            e = stats[m].energy_pj + (move[1] if moved else 0.0)
            figures[m] = (SCORES[objective](c, e), c, e)
        best = min(MEMBERS, key=lambda m: figures[m][0])  # min keeps the first of a tie
        assert placed.machine.name == best, (node.name, figures)
        assert [o.machine for o in placed.options] == list(MEMBERS)
        for o in placed.options:
            assert o.stats.cycles == stats[o.machine].cycles
            assert o.score == pytest.approx(figures[o.machine][0], rel=1e-12)
        cycles += figures[best][1]
        energy += figures[best][2]
        holder = best
    single = npusim.simulate(graph, x, arch, mode="estimate", dataflow="sparse-pairs")
    vector = [s for s in single.layers if s.dataflow == "vector"]
    assert res.total.cycles == cycles + sum(s.cycles for s in vector)
    assert res.total.energy_pj == pytest.approx(energy + sum(s.energy_pj for s in vector),
                                                rel=1e-12)
    moves = [s for s in res.layers if s.dataflow == "transfer"]
    assert len(moves) == sum(p.transfer is not None for p in res.placements)
    assert np.abs(res.output - single.output).max() <= 1e-5 * np.abs(single.output).max()
    return res


def test_the_cycles_objective_mixes_machines_on_this_net():
    """The chain net is built so that more than one member wins a layer (else the test
    above would not see a move)."""
    rng = np.random.default_rng(0)
    graph = chain_net(rng)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    res = npusim.simulate(graph, x, PRESET, mode="estimate")
    assert len({p.machine.name for p in res.placements}) > 1
    assert any(s.dataflow == "transfer" for s in res.layers)


def test_run_mode_computes_on_the_chosen_machine_and_matches_estimate():
    rng = np.random.default_rng(1)
    graph = chain_net(rng)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    run = npusim.simulate(graph, x, PRESET, mode="run")
    est = npusim.simulate(graph, x, PRESET, mode="estimate")
    assert run.layers == est.layers
    assert np.allclose(run.output, est.output, rtol=1e-4, atol=1e-5)


def test_a_member_that_cannot_run_a_layer_is_passed_over(monkeypatch):
    rng = np.random.default_rng(2)
    graph = chain_net(rng)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    monkeypatch.setattr(get("sparse-pairs"), "supports", lambda layer, arch: "not today")
    res = npusim.simulate(graph, x, PRESET, mode="estimate")
    assert "sparse-pairs" not in {p.machine.name for p in res.placements}
    option = res.placements[0].options[0]
    assert option.machine == "sparse-pairs" and option.why_not == "not today"
    assert "sparse-pairs cannot: not today" in res.placements[0].why()
    for m in MEMBERS[1:]:
        monkeypatch.setattr(get(m), "supports", lambda layer, arch: "nor this")
    with pytest.raises(NpusimError, match=r"conv1: no machine of the hybrid can run it "
                                          r"\(sparse-pairs: not today; dilated-grid: nor this"):
        npusim.simulate(graph, x, PRESET, mode="estimate")


def test_shape_only_runs_place_each_layer_after_the_one_before():
    layers = [npusim.ConvLayer(1, 3, 32, 32, 16, 3, 3, padding=1, name="a"),
              npusim.ConvLayer(1, 16, 32, 32, 16, 3, 3, padding=4, dilation=4, name="b"),
              npusim.ConvLayer(1, 16, 32, 32, 16, 3, 3, padding=1, groups=16, name="c")]
    res = npusim.simulate_shapes(layers, PRESET)
    arch = res.arch
    holder, cycles = None, 0
    for layer, placed in zip(layers, res.placements, strict=True):
        alone_cycles = {m: npusim.simulate_shapes([layer], arch, m).total.cycles
                        for m in MEMBERS}
        move = hand_move(np.zeros(layer.input_shape), arch)[0]
        cost = {m: alone_cycles[m] + (move if holder not in (None, m) else 0) for m in MEMBERS}
        holder = min(MEMBERS, key=cost.get)
        assert placed.machine.name == holder
        cycles += cost[holder]
    assert res.total.cycles == cycles


@pytest.mark.parametrize("hybrid, message", [
    ('machines = ["sparse-pairs", "magic"]',
     r"hybrid.machines\[1\]='magic': must be one of dilated-grid, group-tile, input-reuse"),
    ('machines = ["sparse-pairs"]', r"a hybrid needs at least two machines"),
    ('machines = ["group-tile", "group-tile"]', r"a machine is listed twice"),
    ('objective = "speed"', r"hybrid.objective='speed': must be one of cycles, energy, "
                            r"energy-delay"),
    ('machines = "sparse-pairs"', r"hybrid.machines='sparse-pairs': must be an array, each item "
     r"a string \(member machine names"),
])
def test_bad_hybrid_sections_are_refused_by_name(tmp_path, hybrid, message):
    path = tmp_path / "bad.toml"
    path.write_text(f'name = "bad"\ndataflow = "hybrid"\n[hybrid]\n{hybrid}\n')
    rng = np.random.default_rng(3)
    graph = chain_net(rng)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    with pytest.raises(ConfigError, match=message) as refused:
        npusim.simulate(graph, x, path, mode="estimate")
    assert str(refused.value).startswith(f"{path}: hybrid")  # the file, then the section
    with pytest.raises(ConfigError, match=message):  # at load, before any run
        load_arch(path)


def test_cli_run_shows_the_machine_column_and_the_json_carries_the_placements(tmp_path, capsys):
    out = tmp_path / "run.json"
    code = cli.main(["run", "mtcnn-pnet", "--arch", PRESET, "--mode", "estimate",
                     "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["dataflow"] == "hybrid"
    assert doc["arch"]["params"]["machines"] == list(MEMBERS)
    convs = [r for r in doc["layers"] if r["dataflow"] not in ("vector", "transfer")]
    assert [p["layer"] for p in doc["placements"]] == [r["name"] for r in convs]
    for p, row in zip(doc["placements"], convs, strict=True):
        assert p["machine"] == row["dataflow"]
        chosen = next(o for o in p["options"] if o["machine"] == p["machine"])
        assert chosen["score"] == min(o["score"] for o in p["options"])
        assert chosen["cycles"] == row["cycles"]
    assert sum(r["cycles"] for r in doc["layers"]) == doc["totals"]["cycles"]
    header = next(line for line in text.splitlines() if "layer" in line and "cycles" in line)
    assert "machine" in header
    cells = [line.replace("\u2502", " ").split()[:2] for line in text.splitlines()]
    for p in doc["placements"]:
        assert [p["layer"], p["machine"]] in cells
        assert any(c[:1] == [p["layer"]] and p["machine"] in line
                   for c, line in zip(cells, text.splitlines(), strict=True)
                   if "cycles:" in line)  # the placement line below the table


def test_the_summary_gives_utilisation_of_the_running_member_and_of_all_multipliers(capsys):
    """hybrid-3x1024 is three machines of 1,024 multipliers (a 32x32 sparse-pairs array,
    32x32 dilated-grid MACs, 16 group-tile tiles of 64). Each layer's utilisation is its
    member's; the summary adds the share of all 3,072, recomputed here from the JSON, and
    each placement line gives whole cycles in full (it read 1.849e+04)."""
    code = cli.main(["run", "mtcnn-onet", "--arch", PRESET, "--mode", "estimate",
                     "--json", "-"])
    captured = capsys.readouterr()
    assert code == 0
    doc = json.loads(captured.out)
    convs = [r for r in doc["layers"] if r["dataflow"] not in ("vector", "transfer")]
    running = sum(r["macs"] for r in convs) / sum(r["pe_cycles"] for r in convs)
    everything = sum(r["macs"] for r in convs) / (3 * 1024 * sum(r["cycles"] for r in convs))
    assert running == pytest.approx(doc["totals"]["utilisation"])
    line = next(x for x in captured.err.splitlines() if x.startswith("utilisation"))
    assert (f"{100 * running:.1f} % of the running member's multipliers' cycles in conv "
            f"layers; {100 * everything:.1f} % of all 3,072 of the hybrid's") in line
    for p in doc["placements"]:
        shown = next(x for x in captured.err.splitlines() if x.startswith(p["layer"] + " ")
                     and "cycles:" in x)
        for o in p["options"]:  # the cycles objective: whole cycles
            assert o["score"] == int(o["score"])
            assert f"{o['machine']} {int(o['score']):,}" in shown


def test_emulate_mode_runs_the_chosen_machines_emulator():
    """On a small chain, mode emulate places as estimate does and its outputs and cycles come
    from the chosen members' emulators, which agree with their fast models here."""
    rng = np.random.default_rng(4)
    g = GraphBuilder("tiny", (1, 2, 6, 6))
    a = g.relu(g.conv(g.input, rng.standard_normal((4, 2, 3, 3)), padding=1))
    y = g.conv(a, rng.standard_normal((4, 1, 3, 3)), padding=2, dilation=2, groups=4)
    graph = g.build(y)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    emu = npusim.simulate(graph, x, PRESET, mode="emulate")
    est = npusim.simulate(graph, x, PRESET, mode="estimate")
    assert [p.machine.name for p in emu.placements] == [p.machine.name for p in est.placements]
    assert [s.cycles for s in emu.layers] == [s.cycles for s in est.layers]
    assert np.abs(emu.output - est.output).max() <= 1e-5 * np.abs(est.output).max()


def test_a_machine_without_an_emulator_says_so():
    from npusim.dataflows.base import Machine

    class Plain(Machine):
        name = "plain"

    with pytest.raises(NpusimError, match="dataflow 'plain' has no cycle emulator; use mode"):
        Plain().emulate(None, None, None, None, None)
