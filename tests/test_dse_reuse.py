"""Masks kept from a model's first point and priced on later arch points give exactly the stats
of a fresh ``simulate`` of each point."""

import copy
import dataclasses
import json

import pytest

from npusim.arch import load_arch
from npusim.dse import reuse
from npusim.dse.runner import prepared
from npusim.simulate import simulate


def changed(base, change: dict):
    """``base`` with ``change`` made: a value of the arch, or of one of its sections (the
    memory, the energy table, a machine's parameters) by field."""
    sections = dict(base.sections)
    top = {}
    fields = {f.name for f in dataclasses.fields(base)}
    for key, value in change.items():
        if key not in fields:  # a section, the arch's or its defaults
            sections[key] = dataclasses.replace(base.params(key), **value)
        else:
            top[key] = (dataclasses.replace(getattr(base, key), **value)
                        if isinstance(value, dict) else value)
    return dataclasses.replace(base, sections=sections, **top)


def bandwidth(bytes_per_cycle: float) -> dict:
    return {"memory": {"dram_bytes_per_cycle": bytes_per_cycle}}


@pytest.mark.parametrize(("preset", "model", "changes", "dtype"), [
    ("sparse-pairs-32x32", "mtcnn-pnet",
     [{}, {"memory": {"ifmap_sram_kb": 8}}, {"clock_mhz": 500.0}, bandwidth(1.0),
      {"sparse-pairs": {"processor_groups": 2}}, bandwidth(64.0)], "int8"),
    ("input-reuse-1024", "mtcnn-pnet",
     [{}, {"vector": {"lanes": 4}}, {"energy": {"sram_byte_pj": 9.0}}], "float32"),
    # dilated-segnet: layers whose output blocks the group-tile compiler narrows (0 to 8 of
    # them on these points), and whose tap runs the dilated-grid planner shortens (0 to 3)
    ("group-tile-64mac", "dilated-segnet",
     [{}, bandwidth(1.0), bandwidth(64.0), {"group-tile": {"wide_kb": 8}},
      {"group-tile": {"wide_kb": 16}}, bandwidth(2.0), {"memory": {"double_buffered": False}},
      {}], "float32"),
    ("dilated-grid-2x2-h3", "dilated-segnet",
     [{}, bandwidth(0.5), bandwidth(64.0), {"dilated-grid": {"coef_rows": 1}}, bandwidth(0.5),
      {"memory": {"ifmap_sram_kb": 4}}, {}], "float32"),
    ("systolic-32x32-os", "mtcnn-pnet",
     [{}, bandwidth(2.0), {"systolic": {"cols": 8}}, {"memory": {"filter_sram_kb": 2}},
      bandwidth(64.0), {}], "int8"),
    # the hybrid: its members' choices (and so the inputs' moves between them) change with
    # the objective and the memory; with 8 processing units and a 1 KiB first buffer,
    # input-reuse cannot run 6 of dilated-segnet's convs, and still takes 2 of the others
    (("hybrid-3x1024", {"hybrid": {"machines": ("input-reuse", "group-tile", "sparse-pairs",
                                                "dilated-grid")}}), "dilated-segnet",
     [{}, {"hybrid": {"objective": "energy"}}, bandwidth(1.0),
      {"hybrid": {"objective": "energy"}, "input-reuse": {"first_buffer_kb": 1,
                                                          "processing_units": 8}},
      {"hybrid": {"objective": "energy-delay"}}, {"group-tile": {"wide_kb": 8}}, {}],
     "float32"),
    ("hybrid-3x1024", "mtcnn-pnet", [{}, bandwidth(2.0), {"clock_mhz": 300.0}], "int8"),
    # ResNet-18's repeated blocks: convs of one geometry share the shape-costed machines' memos
    ("group-tile-32mac", "resnet18", [{}, bandwidth(3.0), {"group-tile": {"macs": 16}}, {}],
     "float32"),
])
def test_reused_masks_price_like_a_fresh_simulate(preset, model, changes, dtype):
    preset, first = preset if isinstance(preset, tuple) else (preset, {})
    _, graph, x = prepared(model, 0.5, 1, 0)
    base = changed(load_arch(preset), first)
    reuse._masks.clear()
    for change in changes:
        arch = changed(base, change)
        got = reuse.estimate((model, 0.5, 1, 0), graph, x, arch, dtype)
        want = simulate(graph, x, arch, mode="estimate", dtype=dtype)
        assert got.layers == want.layers
        assert got.total == want.total
        assert [(p.layer, p.machine.name, p.source) for p in got.placements] == [
            (p.layer, p.machine.name, p.source) for p in want.placements]
    assert len(reuse._masks) == 1  # one recording, reused by the later points


def test_convs_of_one_geometry_are_counted_once_a_point(monkeypatch):
    """A machine whose costs follow the shapes counts each geometry of a network once a
    point: ResNet-18's 21 convs are 12 geometries, whose counts every conv of it prices."""
    from npusim.dataflows import systolic
    from npusim.simulate import layer_geometry

    calls = []
    counted = systolic.fold_steps
    monkeypatch.setattr(systolic, "fold_steps",
                        lambda layer, *a: calls.append(layer_geometry(layer)) or counted(layer, *a))
    key = ("resnet18", 0.5, 1, 0)
    _, graph, x = prepared(*key)
    geometries = {layer_geometry(layer) for layer in graph.layers.values()}
    assert (len(graph.layers), len(geometries)) == (21, 12)
    reuse._masks.clear()
    reuse.estimate(key, graph, x, load_arch("systolic-32x32-ws"), "float32")
    assert sorted(calls) == sorted(geometries)


def test_sparse_pairs_counts_a_convs_pairs_once_for_every_point(monkeypatch):
    """Sparse-pairs' pair counts follow the masks alone: a sweep counts each conv's once,
    whatever its points change (the processors' units, the memory, the clock)."""
    from npusim import bitconv

    calls = []
    counted = bitconv.pair_counts
    monkeypatch.setattr(bitconv, "pair_counts", lambda *a: calls.append(1) or counted(*a))
    key = ("mtcnn-pnet", 0.5, 1, 0)
    _, graph, x = prepared(*key)
    base = load_arch("sparse-pairs-32x32")
    reuse._masks.clear()
    counted_by_reuse = 0
    for change in ({}, {"sparse-pairs": {"processor_groups": 4}}, bandwidth(2.0),
                   {"sparse-pairs": {"processors_per_group": 8, "grouping": "in-order"}},
                   {"clock_mhz": 200.0}):
        before = len(calls)
        got = reuse.estimate(key, graph, x, changed(base, change), "int8")
        counted_by_reuse += len(calls) - before
        assert got.layers == simulate(graph, x, changed(base, change), mode="estimate",
                                      dtype="int8").layers
    assert counted_by_reuse == len(graph.layers)


@pytest.mark.parametrize(("preset", "module", "counter", "again"), [
    ("sparse-pairs-32x32", "sparse_pairs", "schedule",
     [{"sparse-pairs": {"processor_groups": 2}}]),
    ("group-tile-64mac", "group_tile", "memory_steps",
     [{"memory": {"double_buffered": False}}, {"group-tile": {"wide_kb": 8}}]),
    ("dilated-grid-2x2-h3", "dilated_grid", "steps", [{"dilated-grid": {"coef_rows": 1}}]),
    ("systolic-32x32-ws", "systolic", "fold_steps", [{"systolic": {"rows": 16}}]),
    ("hybrid-3x1024", "sparse_pairs", "schedule", [{"sparse-pairs": {"processor_groups": 2}}]),
])
def test_a_point_of_other_dram_clock_or_energy_counts_nothing_again(monkeypatch, preset, module,
                                                                   counter, again):
    """What a machine counts from a conv's masks or shape and its own parameters (group-tile:
    and its tiles' buffer sizes) is kept in the conv's memo, a hybrid's members' each in its
    own: a later point that changes only the DRAM, the clock or the energy table prices it and
    counts nothing; one that changes what it follows counts again."""
    import importlib

    machine = importlib.import_module(f"npusim.dataflows.{module}")
    calls = []
    counted = getattr(machine, counter)
    monkeypatch.setattr(machine, counter, lambda *a, **k: calls.append(1) or counted(*a, **k))
    key = ("dilated-segnet", 0.5, 1, 0)
    _, graph, x = prepared(*key)
    base = load_arch(preset)
    reuse._masks.clear()
    reuse.estimate(key, graph, x, base, "float32")
    first = len(calls)
    assert first >= len(graph.layers)
    for change in (bandwidth(3.0), {"clock_mhz": 250.0}, {"energy": {"dram_byte_pj": 1.0}},
                   {"memory": {"dram_latency_cycles": 40}}):
        reuse.estimate(key, graph, x, changed(base, change), "float32")
    assert len(calls) == first
    for change in again:
        before = len(calls)
        reuse.estimate(key, graph, x, changed(base, change), "float32")
        assert len(calls) >= before + len(graph.layers)


SWEEP = """
base = "input-reuse-1024"
models = ["mtcnn-pnet"]
densities = [0.5]
mode = "estimate"
[parameters]
"input-reuse.operation_units" = [2, 8]
"input-reuse.processing_units" = [1, 3]
"input-reuse.work_stealing" = [true, false]
"memory.ifmap_sram_kb" = [1, 64]
"input-reuse.interconnect" = ["bus", "chain"]
"input-reuse.first_buffer_kb" = [1, 16]
"""


def test_sweep_points_equal_a_fresh_simulate_of_each_arch(tmp_path):
    """Every point of a sweep that revisits unit counts and buffer sizes (so later points take
    the machine's kept counts, loop orders and steps) stores the layer stats a simulate of that
    point's arch gives on a fresh copy of the network (no state shared with the sweep); the
    small first buffers stall some units (their schedules are played as events)."""
    from npusim.dse import spec_from_toml_text, sweep
    from npusim.dse.store import Store

    reuse._masks.clear()
    spec = spec_from_toml_text(SWEEP, "test sweep")
    outcome = sweep(spec, tmp_path / "s.db", workers=1)
    assert (outcome.ran, outcome.failed) == (64, 0)
    _, graph, x = copy.deepcopy(prepared("mtcnn-pnet", 0.5, 1, 0))
    store = Store.read(tmp_path / "s.db")
    rows = store.rows()
    store.close()
    cycles, stalled = set(), 0
    for row in rows:
        want = simulate(graph, x.copy(), spec.arch(row["params"]), mode="estimate")
        assert row["layers"] == json.loads(json.dumps([s.as_dict() for s in want.layers]))
        cycles.add(want.total.cycles)
        stalled += want.total.extra["first_buffer_stall_cycles"] > 0
    assert len(cycles) > 16  # the points differ: the kept counts are not one arch's
    assert 0 < stalled < len(rows)


def test_pool_workers_share_the_cores_among_their_blas_threads():
    """Each of a local pool's workers gives BLAS its share of the cores (OpenBLAS threads spin
    while they wait: two workers with a thread per core each would fight over every core)."""
    import threadpoolctl

    from npusim.dse.runner import PoolRunner
    from npusim.parallel import cores

    runner = PoolRunner(2)
    try:
        info = runner.submit(threadpoolctl.threadpool_info).result(timeout=120)
    finally:
        runner.close()
    blas = [lib["num_threads"] for lib in info if lib["user_api"] == "blas"]
    assert blas and all(n == max(1, cores() // 2) for n in blas)


RUN_SWEEP = """
base = "sparse-pairs-32x32"
models = ["mtcnn-pnet"]
densities = [0.5]
mode = "run"
[parameters]
"sparse-pairs.processor_groups" = [4, 8, 16, 32]
"""


def test_forked_workers_run_points_as_the_driver_does(tmp_path):
    """A local pool's workers are forks of the driver taken after it ran the first point,
    whose pair kernels ran on npusim's row threads: a worker starts row threads of its own
    (the driver's do not exist in a fork; using them would wait for ever) and every point's
    stats equal those of the same sweep run in one process."""
    from dse_helpers import npusim, write_spec

    from npusim.dse import Store, spec_from_toml_text, sweep

    spec_file = write_spec(tmp_path, RUN_SWEEP)
    r = npusim("sweep", spec_file, "--store", tmp_path / "pool.db", "--workers", "2",
               timeout=120)
    assert r.returncode == 0, r.stderr
    sweep(spec_from_toml_text(RUN_SWEEP, "inline"), tmp_path / "one.db", workers=1)
    pool, one = Store.read(tmp_path / "pool.db"), Store.read(tmp_path / "one.db")
    try:
        pooled = {row["key"]: row for row in pool.rows()}
        inline = {row["key"]: row for row in one.rows()}
    finally:
        pool.close()
        one.close()
    assert pooled.keys() == inline.keys() and len(pooled) == 4
    for key, row in inline.items():
        assert row["status"] == pooled[key]["status"] == "ok"
        assert (row["totals"], row["layers"]) == (pooled[key]["totals"], pooled[key]["layers"])


def test_an_edited_model_file_is_built_again_by_a_process_that_ran_it(tmp_path):
    """Two sweeps of one spec in one process, the model files edited between them (so a new
    spec, a new store): the second stores what a fresh simulate of the edited files gives,
    not the kept build of the first files (a topology CSV's shapes, an ONNX file's masks)."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from npusim.dse import spec_from_toml_text, sweep
    from npusim.dse.store import Store
    from npusim.frontends import input_tensor, load_model

    def write_models(channels: int, zeros: float):
        (tmp_path / "net.csv").write_text(
            "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
            f"Num Filter, Strides,\nc1,16,16,3,3,{channels},8,1,\n")
        w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
        w[np.random.default_rng(1).random(w.shape) < zeros] = 0
        graph = helper.make_graph(
            [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
            [numpy_helper.from_array(w, "w")])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                  tmp_path / "net.onnx")

    text = f"""
base = "sparse-pairs-32x32"
models = ["{tmp_path / 'net.csv'}", "{tmp_path / 'net.onnx'}"]
[parameters]
"memory.ifmap_sram_kb" = [8, 64]
"""
    for store, (channels, zeros) in (("first.db", (4, 0.0)), ("second.db", (16, 0.7))):
        write_models(channels, zeros)
        spec = spec_from_toml_text(text, "test sweep")
        assert sweep(spec, tmp_path / store, workers=1).failed == 0
    rows = Store.read(tmp_path / "second.db").rows()
    for row in rows:
        model = load_model(row["model"])
        if isinstance(model, list):
            assert row["totals"]["dense_macs"] == sum(layer.macs for layer in model)
            continue
        x, _ = input_tensor(row["model"], model)
        want = simulate(model, x, spec.arch(row["params"]), mode="estimate")
        assert row["totals"]["macs"] == want.total.macs < want.total.dense_macs
