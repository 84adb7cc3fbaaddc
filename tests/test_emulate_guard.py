"""Mode emulate guards its size: each machine's step estimate, and the refusal before any work."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

import npusim
from npusim import cli
from npusim.arch import load_arch
from npusim.dataflows import get
from npusim.emulate import dilated_grid, systolic
from npusim.errors import NpusimError
from npusim.ir import ConvLayer
from npusim.simulate import EMULATE_LIMIT

NPUSIM = [sys.executable, "-c", "import sys; from npusim.cli import main; sys.exit(main())"]
SMALL_PNET = ["mtcnn-pnet", "--input-shape", "1,3,16,16", "--arch", "sparse-pairs-32x32"]


@pytest.mark.parametrize("preset", ["systolic-2x2-ws", "systolic-32x32-os", "systolic-32x32-is"])
def test_systolic_estimate_is_the_emulators_own_clock(preset):
    arch = load_arch(preset)
    p = arch.params("systolic")
    layer = ConvLayer(1, 5, 7, 6, 3, 3, 3, padding=1, name="c")
    rng = np.random.default_rng(1)
    run = systolic.emulate_layer(layer, rng.standard_normal(layer.input_shape, np.float32),
                                 rng.standard_normal(layer.weight_shape).astype(np.float32),
                                 None, p)
    per_cycle = 64 + p.rows * p.cols // 16
    assert get("systolic").emulate_steps(layer, arch) == run.busy_cycles * per_cycle


@pytest.mark.parametrize("preset, dilation", [("dilated-grid-2x2", 2),
                                               ("dilated-grid-2x2-h3", 6)])
def test_dilated_grid_estimate_is_the_emulators_own_clock(preset, dilation):
    """In the tap runs the planner chose (at R = 6 on the h3 grid, shorter than fit)."""
    arch = load_arch(preset)
    layer = ConvLayer(1, 2, 13, 13, 2, 3, 3, padding=dilation, dilation=dilation, name="d")
    x = np.ones(layer.input_shape, np.float32)
    most, = get("dilated-grid").mapping(layer, arch)
    _, counts, _ = dilated_grid.emulate(layer, x, np.ones(layer.weight_shape, np.float32),
                                        None, arch.params("dilated-grid"), most=most)
    assert get("dilated-grid").emulate_steps(layer, arch) == 64 * counts.cycles


def test_group_tile_estimate_counts_the_emulators_operations_in_narrowed_blocks():
    """A 3x3 conv 64 -> 128 on 4 x 4 in int8 at 2 bytes/cycle: its 64-output blocks (36 KiB)
    do not stay in the 32 KiB active half, and the compiler runs 56-output blocks. The
    estimate is 6 steps per emulator operation, counted from the emulator's own run in
    those blocks: per step and tap a tick, per lane and tap a weight load and a broadcast,
    per output a value shifted out."""
    from npusim.emulate.group_tile import own_memory, run_tiles

    arch = load_arch("group-tile-64mac").with_memory(dram_bytes_per_cycle=2.0)
    layer = ConvLayer(1, 64, 4, 4, 128, 3, 3, padding=1, dtype="int8", name="g")
    width, = get("group-tile").mapping(layer, arch)
    assert width == 56
    rng = np.random.default_rng(3)
    x = rng.integers(-9, 9, layer.input_shape).astype(np.int8)
    w = rng.integers(-9, 9, layer.weight_shape).astype(np.int8)
    run = run_tiles(layer, x, w, None, arch.params("group-tile"), own_memory(arch), width)
    taps = layer.Cg * layer.R * layer.S
    step_taps = sum(len(c.log) for c in run.counts) * taps
    operations = step_taps + 2 * run.total("broadcasts") + run.total("written")
    assert get("group-tile").emulate_steps(layer, arch) == 6 * operations


def test_sparse_pairs_estimate_bounds_the_processor_ticks():
    """Dense data: every processor of a step has a pair in each of its Cg*R*S cycles."""
    arch = load_arch("sparse-pairs-32x32")
    layer = ConvLayer(1, 4, 8, 8, 40, 3, 3, name="s")  # no padding: every pair is real
    x, w = np.ones(layer.input_shape, np.float32), np.ones(layer.weight_shape, np.float32)
    _, st = get("sparse-pairs").emulate(layer, x, w, None, arch)
    pairs = 36 * 40 * 4 * 9  # pixels x kernels x field: every multiply
    assert st.macs == pairs
    steps = get("sparse-pairs").emulate_steps(layer, arch)
    assert steps == 36 * 2 * 36 * 33  # pixels x kernel sets (40 on 32 processors) x field x 33
    assert steps >= pairs


def test_input_reuse_estimate_counts_regions_kernels_and_weight_cycles():
    """A 1x1 conv, 5 -> 3 channels on a 10x7 map, on the preset's 4x4-pixel, 1-channel
    regions with work stealing: 3 x 2 regions x 3 kernels x 5 weight cycles, 30 steps each,
    clocked twice (with and without stealing)."""
    arch = load_arch("input-reuse-1024")
    p = arch.params("input-reuse")
    assert (p.region_rows, p.region_cols, p.region_channels, p.work_stealing) == (4, 4, 1, True)
    layer = ConvLayer(1, 5, 10, 7, 3, 1, 1, name="c")
    assert get("input-reuse").emulate_steps(layer, arch) == 30 * 2 * (3 * 2) * 3 * 5


def test_resnet18_on_sparse_pairs_is_refused_up_front():
    done = subprocess.run([*NPUSIM, "run", "resnet18", "--arch", "sparse-pairs-32x32",
                           "--mode", "emulate"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    # conv1: 112 x 112 pixels x 2 kernel sets of 32 x (3 x 7 x 7) positions x 33 steps
    steps = 112 * 112 * 2 * 147 * 33
    assert done.stderr == (
        f"npusim: error: conv1: the sparse-pairs emulator would take about {steps:.3g} steps "
        f"(~{steps / 1e6:.3g} s at about 1 us a step), above the limit of {EMULATE_LIMIT:.3g} "
        "steps per layer (and 16 more layers); use --mode run (the same costs from the fast "
        "model), or raise the limit with --emulate-limit N (emulate_limit=N)\n")


def test_a_small_model_emulates_and_equals_run(capsys):
    reports = {}
    for mode in ("emulate", "run"):
        assert cli.main(["run", *SMALL_PNET, "--mode", mode, "--quiet", "--json", "-"]) == 0
        reports[mode] = json.loads(capsys.readouterr().out)
    assert reports["emulate"]["mode"] == "emulate"
    assert [s["cycles"] for s in reports["emulate"]["layers"]] == \
        [s["cycles"] for s in reports["run"]["layers"]]


def test_the_limit_is_a_flag_and_a_keyword(capsys):
    assert cli.main(["run", *SMALL_PNET, "--mode", "emulate", "--quiet",
                     "--emulate-limit", "1000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npusim: error: conv1: the sparse-pairs emulator would take about ")
    assert "above the limit of 1e+03 steps per layer (and 4 more layers)" in err
    assert cli.main(["run", *SMALL_PNET, "--quiet", "--emulate-limit", "1000"]) == 2
    assert "--emulate-limit applies to --mode emulate only" in capsys.readouterr().err


@pytest.mark.parametrize("limit, refused", [("1e3", True), ("1E3", True), ("4e7", False),
                                            ("2.5e0", None), ("1e400", None), ("0", None)])
def test_the_limit_is_read_as_the_refusal_prints_it(capsys, limit, refused):
    """The refusal prints its limit in e-notation (4e+07): the flag takes that form too, a
    whole number of steps, and anything else is one line, exit 2, before any work."""
    code = None
    try:
        code = cli.main(["run", *SMALL_PNET, "--mode", "emulate", "--quiet",
                         "--emulate-limit", limit])
    except SystemExit as e:  # argparse refuses a bad value
        code = e.code
    err = capsys.readouterr().err
    if refused is None:
        assert code == 2 and err.count("\n") == 1 and "must be a whole number of steps" in err
    else:
        assert code == (2 if refused else 0), err
        assert ("above the limit of 1e+03 steps" in err) == refused

    x = np.ones((1, 8, 10, 10), np.float32)
    w = np.ones((16, 8, 3, 3), np.float32)
    with pytest.raises(NpusimError, match=r"conv2d: the systolic emulator would take about "
                                          r".* above the limit of 10 steps"):
        npusim.conv2d(x, w, emulate=True, emulate_limit=10)
    out, _ = npusim.conv2d(x, w, emulate=True, emulate_limit=None)
    np.testing.assert_array_equal(out, np.full((1, 16, 8, 8), 72, np.float32))


def test_every_emulator_has_its_estimate():
    from npusim.dataflows import REGISTRY

    emulators = [name for name, df in REGISTRY.items() if hasattr(df, "emulate")]
    assert len(emulators) >= 5
    layer = ConvLayer(1, 4, 8, 8, 8, 3, 3, padding=1, name="c")
    for name in emulators:
        df, arch = REGISTRY[name], load_arch(None)
        assert hasattr(df, "emulate_steps"), name
        if df.supports(layer, arch) is None:
            assert df.emulate_steps(layer, arch) > 0, name


def _pnet_on_the_hybrid():
    """MTCNN's P-Net at 16x16 on the hybrid preset: its graph, input, arch, the member the
    hybrid runs each conv on, and every member's emulator steps for each conv."""
    from npusim.frontends import zoo

    graph, x = zoo.build("mtcnn-pnet", size=16), zoo.input_for("mtcnn-pnet", size=16)
    arch = load_arch("hybrid-3x1024")
    chosen = {p.layer: p.machine.name for p in npusim.simulate(graph, x, arch).placements}
    steps = {n.name: {m: get(m).emulate_steps(graph.layers[n.name], arch)
                      for m in arch.params("hybrid").machines} for n in graph.conv_nodes}
    return graph, x, arch, chosen, steps


def test_a_hybrid_emulates_when_the_members_it_chooses_fit_the_limit():
    """A limit that a member the hybrid does not choose passes on some conv (the dilated
    grid's emulator, slowest here) but that every chosen member fits: the run emulates, the
    cycles equal mode run's. The limit then just under the chosen member's steps on one
    conv, where another member fits: refused when the choice is made, naming it."""
    graph, x, arch, chosen, steps = _pnet_on_the_hybrid()
    fits = max(steps[name][chosen[name]] for name in steps)
    assert any(max(s.values()) > fits for s in steps.values())  # the old check refused
    emulated = npusim.simulate(graph, x, arch, mode="emulate", emulate_limit=fits)
    run = npusim.simulate(graph, x, arch)
    assert [s.cycles for s in emulated.conv_layers] == [s.cycles for s in run.conv_layers]
    name = max(steps, key=lambda n: steps[n][chosen[n]])
    over = steps[name][chosen[name]]
    assert min(steps[name].values()) < over - 1
    with pytest.raises(NpusimError, match="^" + re.escape(
            f"{name}: the hybrid chose {chosen[name]} for it; its emulator would take about "
            f"{over:.3g} steps (~{over / 1e6:.3g} s at about 1 us a step), above the limit")):
        npusim.simulate(graph, x, arch, mode="emulate", emulate_limit=over - 1)


def test_a_hybrid_conv_no_member_can_emulate_in_time_is_refused_up_front():
    """Over the limit on every member: refused before any work, naming the member with the
    fewest steps."""
    graph, x, arch, _, steps = _pnet_on_the_hybrid()
    name = graph.conv_nodes[0].name
    fewest = min(steps[name], key=steps[name].get)
    with pytest.raises(NpusimError, match="^" + re.escape(
            f"{name}: the {fewest} emulator would take about {steps[name][fewest]:.3g} steps")):
        npusim.simulate(graph, x, arch, mode="emulate", emulate_limit=1)


def test_a_depthwise_layer_s_estimate_deals_each_group_its_own_kernel_sets():
    """The sparse-pairs emulator deals each conv group separately: a depthwise layer is K
    sets of one kernel, by hand pixels x 256 sets x 9 positions x 33 (a tick of each of
    the 32 processors, and the gather). Dealt over all K kernels (8 sets of 32) it read
    3.0e7, so a 256-channel 112 x 112 layer (77 s) passed the default limit of 4e7."""
    arch = load_arch("sparse-pairs-32x32")
    layer = ConvLayer(1, 256, 112, 112, 256, 3, 3, padding=1, groups=256, name="dw")
    steps = get("sparse-pairs").emulate_steps(layer, arch)
    assert steps == 112 * 112 * 256 * 9 * 33 > 4e7
    small = ConvLayer(1, 8, 6, 6, 8, 3, 3, padding=1, groups=8, name="dw")
    x = np.ones(small.input_shape, np.float32)
    _, st = get("sparse-pairs").emulate(small, x, np.ones(small.weight_shape, np.float32), None,
                                        arch)
    assert get("sparse-pairs").emulate_steps(small, arch) >= st.macs  # still an upper bound
