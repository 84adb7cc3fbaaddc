"""The figures of ``npusim.report.plots``: the data behind each (and what is drawn) recomputed
here from the layers' fields, the arch and PyTorch; the files valid PNG and SVG."""

import contextlib
import io
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from npusim import cli, simulate
from npusim.arch import load_arch
from npusim.frontends import input_tensor, load_model
from npusim.frontends.prune import prune
from npusim.report import plots

ARCHS = ["systolic-32x32-ws", "sparse-pairs-32x32", "input-reuse-1024"]
DENSITY = 0.5
# The per-unit counts each machine records, and the one the figure shows (the first by name).
UNIT_KEY = {"sparse-pairs": "group_cycles_by_unit", "input-reuse": "opunit_busy_cycles_by_unit"}


@pytest.fixture(scope="module")
def net():
    """(graph, input, one SimResult per arch with every node's output kept)."""
    graph = prune(load_model("mtcnn-rnet"), DENSITY)
    x, _ = input_tensor("mtcnn-rnet", graph)
    return graph, x, [simulate(graph, x, arch, keep_outputs=True) for arch in ARCHS]


@pytest.fixture(scope="module")
def figs(net):
    graph, x, results = net
    drawn = {f.name: f for f in plots.figures(results, plots.densities(graph, x,
                                                                       results[0].outputs))}
    yield drawn
    plots.close(list(drawn.values()))


def _multipliers(arch_name: str) -> int:
    """The machine's multipliers from its arch parameters, by hand."""
    arch = load_arch(arch_name)
    p = arch.params(arch.dataflow)
    return {"systolic": lambda: p.rows * p.cols,
            "sparse-pairs": lambda: p.processor_groups * p.processors_per_group,
            "input-reuse": lambda: (p.operation_units * p.processing_units * p.region_rows
                                    * p.region_cols * p.region_channels)}[arch.dataflow]()


def test_roofline_points_and_ceilings_are_the_layers_and_the_machine(net, figs):
    _, _, results = net
    axes = figs["roofline"].figure.axes
    for ax, result, name in zip(axes, results, ARCHS, strict=True):
        convs = result.conv_layers
        expected = np.array([(s.macs / (s.dram_ifmap_bytes + s.dram_filter_bytes
                                        + s.dram_ofmap_bytes), s.macs / s.cycles)
                             for s in convs])
        data = plots.roofline(result)
        assert [p[0] for p in data["points"]] == [s.name for s in convs]
        np.testing.assert_allclose([p[1:] for p in data["points"]], expected, rtol=1e-12)
        np.testing.assert_allclose(ax.collections[0].get_offsets(), expected, rtol=1e-12)
        peak, bw = _multipliers(name), load_arch(name).memory.dram_bytes_per_cycle
        assert data["peak"] == peak and data["bandwidth"] == bw
        # no layer above either ceiling: the memory model keeps to the bandwidth
        assert np.all(expected[:, 1] <= peak * (1 + 1e-12))
        assert np.all(expected[:, 1] <= bw * expected[:, 0] * (1 + 1e-9))
        flat = ax.lines[0].get_ydata()
        assert np.all(flat == peak)
        slope = ax.lines[1]
        np.testing.assert_allclose(slope.get_ydata(), slope.get_xdata() * bw)
        assert ax.get_xlabel() == "arithmetic intensity (MAC per DRAM byte)"
        assert ax.get_ylabel() == "attainable MAC per cycle"


def test_cycle_bars_stack_compute_and_each_stall_cause(net, figs):
    _, _, results = net
    for ax, result in zip(figs["cycles"].figure.axes, results, strict=True):
        rows = result.conv_layers
        vector = [s for s in result.layers if s.dataflow == "vector"]
        fields = ["compute_cycles", "stall_dram_ifmap_cycles", "stall_dram_filter_cycles",
                  "stall_dram_ofmap_cycles", "stall_sram_cycles", "stall_reconfig_cycles"]
        bars = ax.containers
        assert len(bars) == len(fields)
        for container, field in zip(bars, fields, strict=True):
            heights = [p.get_height() for p in container]
            assert heights == [getattr(s, field) for s in rows] + [
                sum(getattr(s, field) for s in vector)]
        tops = np.sum([[p.get_height() for p in c] for c in bars], axis=0)
        assert tops.tolist() == [s.cycles for s in rows] + [sum(s.cycles for s in vector)]
        assert ax.get_ylabel() == "cycles"


def test_cycle_bars_reach_each_layers_cycles_with_configuration_loads(net):
    graph, x, _ = net
    arch = load_arch("input-reuse-1024").with_memory(reconfig_cycles=40)
    result = simulate(graph, x, arch, mode="estimate")
    assert all(s.stall_reconfig_cycles > 0 for s in result.conv_layers)
    fig = plots.draw_cycles([result])
    try:
        bars = fig.figure.axes[0].containers
        assert bars[-1].get_label() == "reconfiguration stall"
        tops = np.sum([[p.get_height() for p in c] for c in bars], axis=0)[:-1]
        assert tops.tolist() == [s.cycles for s in result.conv_layers]
    finally:
        plots.close([fig])


def test_utilisation_bars_are_useful_macs_over_multiplier_cycles(net, figs):
    _, _, results = net
    ax = figs["utilisation"].figure.axes[0]
    for container, result, name in zip(ax.containers, results, ARCHS, strict=True):
        expected = [100 * s.macs / (_multipliers(name) * s.cycles) for s in result.conv_layers]
        np.testing.assert_allclose([p.get_height() for p in container], expected, rtol=1e-12)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ARCHS


def test_densities_are_the_pruned_weights_and_torchs_activations(net, figs):
    torch_ref = pytest.importorskip("npusim.torch_ref")
    graph, x, _ = net
    reference = torch_ref.torch_outputs(graph, x)
    ax = figs["density"].figure.axes[0]
    weights, acts = ([p.get_height() / 100 for p in c] for c in ax.containers)
    for node, w, a in zip(graph.conv_nodes, weights, acts, strict=True):
        n = node.op.weight.size
        assert w == pytest.approx(round(DENSITY * n) / n, abs=2 / n)
        source = reference[node.inputs[0]]
        assert a == pytest.approx(np.mean(source != 0), abs=1e-3)


def test_activation_density_counts_the_zeros_of_each_convs_input(net):
    graph, x, results = net
    outputs, density = dict(results[0].outputs), {}
    sources = list(dict.fromkeys(node.inputs[0] for node in graph.conv_nodes))
    for i, source in enumerate(sources):  # zero the first i+1 tenths of each conv input
        value = outputs.get(source, x).copy()
        flat = value.reshape(-1)
        zeros = (i + 1) * flat.size // 10
        flat[:zeros] = 0
        flat[zeros:][flat[zeros:] == 0] = 1.0  # no other zero
        outputs[source], density[source] = value, 1 - zeros / flat.size
    _, _, acts = plots.densities(graph, x, outputs)
    assert acts == pytest.approx([density[n.inputs[0]] for n in graph.conv_nodes], abs=1e-12)


def test_unit_figure_shows_the_worst_layer_of_each_dealing_machine(net, figs):
    _, _, results = net
    fig = figs["units"]
    assert "systolic-32x32-ws (systolic)" in fig.note  # no per-unit counts: said
    dealing = [r for r in results if r.dataflow in UNIT_KEY]
    for ax, result in zip(fig.figure.axes, dealing, strict=True):
        key = UNIT_KEY[result.dataflow]
        idle = [(max(s.extra[key]) * len(s.extra[key]) - sum(s.extra[key]), s)
                for s in result.conv_layers]
        worst = max(idle, key=lambda t: t[0])[1]
        assert [p.get_height() for p in ax.containers[0]] == list(worst.extra[key])
        assert worst.name in ax.get_title() and key in ax.get_title()


def test_files_are_valid_png_and_svg(net, tmp_path):
    graph, x, results = net
    paths = plots.plot(results[:2], tmp_path / "figs", plots.densities(graph, x,
                                                                      results[0].outputs))
    assert sorted(p.name for p in paths) == sorted(
        f"{n}.{ext}" for n in ("cycles", "roofline", "utilisation", "density", "units")
        for ext in ("png", "svg"))
    assert {p.stem for p in paths} == set(plots.NAMES)  # the names checked before a run
    for path in paths:
        data = path.read_bytes()
        if path.suffix == ".png":
            assert data.startswith(b"\x89PNG\r\n\x1a\n")
            with Image.open(path) as im:
                assert im.info["Software"].startswith("npusim ")  # npusim's, to replace
                im.verify()
            with Image.open(path) as im:
                assert im.width > 300 and im.height > 200
                assert len(np.unique(np.asarray(im.convert("L")))) > 10  # something is drawn
        else:
            root = ET.fromstring(data)
            assert root.tag == "{http://www.w3.org/2000/svg}svg"
            creator = root.find(".//{http://purl.org/dc/elements/1.1/}creator")
            assert "".join(creator.itertext()).strip().startswith("npusim ")
            assert len(root.findall(".//{http://www.w3.org/2000/svg}path")) > 10


def test_shape_only_run_writes_figures_and_says_why_density_is_missing(tmp_path):
    topo = tmp_path / "net.csv"
    topo.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                    "Channels, Num Filter, Strides,\nc1, 18, 18, 3, 3, 8, 16, 1,\n"
                    "c2, 16, 16, 3, 3, 16, 16, 1,\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["run", str(topo), "-q", "--plots", str(tmp_path / "p")]) == 0
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == sorted(
        f"{n}.{ext}" for n in ("cycles", "roofline", "utilisation") for ext in ("png", "svg"))
    density = plots.draw_densities(None)
    assert density.figure is None and "shape-only" in density.note


def test_plots_folder_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["run", "Resnet18.csv", "-q", "--plots", str(tmp_path / "f")]) == 2
    assert "--plots" in err.getvalue() and "is no folder" in err.getvalue()


def test_plots_folder_that_cannot_be_made_is_refused_before_the_run(tmp_path, monkeypatch):
    """A missing folder under a file: refused before the network is built or run (the
    simulation, patched to fail, is never reached), naming the file in its way."""
    import importlib

    simulate = importlib.import_module("npusim.simulate")  # the module, not the function
    (tmp_path / "f").write_text("")
    monkeypatch.setattr(simulate, "simulate_shapes", lambda *a, **k: pytest.fail("ran"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["run", "Resnet18.csv", "-q", "--plots",
                         str(tmp_path / "f" / "figs")]) == 2
    assert f"cannot make the folder: {tmp_path / 'f'} is a file" in err.getvalue()
    assert not (tmp_path / "f").is_dir()


def test_a_failed_write_leaves_no_empty_folder_it_made(tmp_path, monkeypatch, figs):
    """A full disk at the first figure: the folders write_plots made are removed again
    (they were once left behind, empty); one that existed stays, and so does one a figure
    was written into."""
    from npusim import outfile
    from npusim.errors import OutputError

    written = []

    def fills_after(count):
        def write(path, data, *args):
            if len(written) >= count:
                raise OutputError(f"--plots {path}: cannot write: No space left on device")
            path.write_bytes(data)
            written.append(path)
        return write

    monkeypatch.setattr(outfile, "write_bytes", fills_after(0))
    with pytest.raises(OutputError, match="No space left"):
        plots.write_plots(list(figs.values()), tmp_path / "a" / "b")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    with pytest.raises(OutputError):
        plots.write_plots(list(figs.values()), tmp_path / "kept")
    monkeypatch.setattr(outfile, "write_bytes", fills_after(1))
    with pytest.raises(OutputError):
        plots.write_plots(list(figs.values()), tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "new"]
    assert [p.name for p in (tmp_path / "new").iterdir()] == [written[0].name]


def test_an_int8_run_s_densities_are_of_the_int8_operands(net):
    """The density figure of an int8 run showed the float weights' density (1.000) where
    the machine multiplies int8 weights that rounding left zero (0.973 on MTCNN's O-Net):
    each share is now of the operands as quantised, recomputed here in float64 (a value
    rounds to zero when it is at most half a step: per output channel for the weights, max
    |w| / 127; per tensor for a conv's input)."""
    graph, x, results = net
    outputs = results[0].outputs
    names, weights, acts = plots.densities(graph, x, outputs, "int8")
    for node, w_share, a_share in zip(graph.conv_nodes, weights, acts, strict=True):
        w = node.op.weight.astype(np.float64).reshape(node.op.weight.shape[0], -1)
        step = np.abs(w).max(axis=1, keepdims=True) / 127
        assert w_share == pytest.approx(np.mean(np.abs(w) > step / 2), abs=1e-12)
        a = np.asarray(outputs.get(node.inputs[0], x), np.float64)
        assert a_share == pytest.approx(np.mean(np.abs(a) > np.abs(a).max() / 127 / 2),
                                        abs=1e-12)
    assert min(weights) < 1.0  # rounding left some weight zero
