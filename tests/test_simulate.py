"""simulate() and conv2d(): outputs against torch, modes agreeing, errors naming what is wrong."""

import dataclasses
import importlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from strategies import rel_err

import npusim
from npusim import reference
from npusim.errors import InputError, NpusimError
from npusim.ir import ConvLayer, GraphBuilder


def small_net(rng, n=2):
    """conv-bn-relu, pool, residual add, concat, global pool, linear, softmax."""
    g = GraphBuilder("small", (n, 3, 15, 13))
    w1 = rng.standard_normal((8, 3, 3, 3)) * 0.3
    w2 = rng.standard_normal((8, 1, 3, 3)) * 0.3
    fc = rng.standard_normal((10, 16)) * 0.3
    a = g.relu(g.conv(g.input, w1, rng.standard_normal(8), stride=2, padding=(1, 0, 1, 2)))
    b = g.relu6(g.conv(a, w2, padding=2, dilation=2, groups=8))
    s = g.add(a, b)
    c = g.concat(s, g.maxpool(a, 3, 1, 1))
    y = g.softmax(g.linear(g.flatten(g.globalavgpool(c)), fc, np.zeros(10)))
    return g.build(y), (w1, w2, fc)


def small_net_torch(x, graph, weights):
    w1, w2, fc = (torch.tensor(w, dtype=torch.float64) for w in weights)
    b1 = torch.tensor(graph.node("conv1").op.bias, dtype=torch.float64)
    a = F.relu(F.conv2d(F.pad(x, (1, 2, 1, 0)), w1, b1, stride=2))
    b = F.relu6(F.conv2d(a, w2, padding=2, dilation=2, groups=8))
    c = torch.cat([a + b, F.max_pool2d(a, 3, 1, 1)], 1)
    return F.softmax(F.linear(c.mean((2, 3)), fc), 1)


def test_simulate_small_net_equals_torch_and_costs_every_op():
    rng = np.random.default_rng(0)
    graph, weights = small_net(rng)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    res = npusim.simulate(graph, x, "systolic-32x32-os")
    ref = small_net_torch(torch.tensor(x, dtype=torch.float64), graph, weights).numpy()
    assert rel_err(res.output, ref) < 1e-5
    assert len(res.layers) == len(graph.nodes)
    assert [s.name for s in res.conv_layers] == ["conv1", "conv2", "conv3"]
    assert res.total.cycles == sum(s.cycles for s in res.layers) > 0
    assert res.total.dense_macs == sum(layer.macs for layer in graph.layers.values())


def test_estimate_gives_the_same_stats_and_outputs_as_run():
    rng = np.random.default_rng(1)
    graph, _ = small_net(rng)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    run = npusim.simulate(graph, x, mode="run")
    est = npusim.simulate(graph, x, mode="estimate")
    assert run.layers == est.layers
    assert np.array_equal(run.output, est.output)


def test_int8_network_stays_close_to_float():
    rng = np.random.default_rng(2)
    graph, _ = small_net(rng, n=1)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    f32 = npusim.simulate(graph, x).output
    i8 = npusim.simulate(graph, x, dtype="int8").output
    assert np.abs(f32 - i8).max() < 0.05  # softmax probabilities


def test_batch_is_taken_from_the_input():
    rng = np.random.default_rng(3)
    graph, _ = small_net(rng, n=1)
    x = rng.standard_normal((3,) + graph.input_shape[1:]).astype(np.float32)
    res = npusim.simulate(graph, x)
    assert res.output.shape == (3, 10)
    assert res.total.dense_macs == 3 * npusim.simulate(graph, x[:1]).total.dense_macs


@pytest.mark.parametrize("call, error, message", [
    (lambda g, x: npusim.simulate(g, x[:, :2]), InputError,
     r"input shape \(1, 2, 15, 13\) does not fit small, which takes \(1, 3, 15, 13\)"),
    (lambda g, x: npusim.simulate(g, x, mode="fast"), NpusimError,
     "mode='fast': must be one of run, estimate, emulate"),
    (lambda g, x: npusim.simulate(g, x, dtype="int4"), NpusimError,
     "dtype='int4': must be one of float32, int8"),
    (lambda g, x: npusim.simulate(g, x, dataflow="magic"), NpusimError,
     "dataflow 'magic': must be one of"),
    (lambda g, x: npusim.simulate(g, x, "no-such-arch"), NpusimError,
     "arch 'no-such-arch': not a preset"),
])
def test_simulate_rejects_bad_arguments_clearly(call, error, message):
    rng = np.random.default_rng(4)
    graph, _ = small_net(rng, n=1)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    with pytest.raises(error, match=message):
        call(graph, x)


@pytest.mark.parametrize("layers, message", [
    ([], r"simulate_shapes: no layers to run \(an empty list\)"),
    (ConvLayer(1, 3, 8, 8, 4, 3, 3), r"got one ConvLayer \(wrap it in a list\)"),
    (5, r"layers must be a list of ConvLayer, got int"),
    ([ConvLayer(1, 3, 8, 8, 4, 3, 3), "conv2"], r"layers\[1\] is a str, not a ConvLayer"),
])
def test_simulate_shapes_refuses_what_is_not_a_list_of_layers(layers, message):
    with pytest.raises(InputError, match=message):
        npusim.simulate_shapes(layers)


def test_simulate_shapes_takes_any_iterable_of_layers_once():
    """A generator is read once: its layers are the ones costed."""
    layers = [ConvLayer(1, 3, 8, 8, 4, 3, 3, name="a"), ConvLayer(1, 4, 6, 6, 2, 1, 1, name="b")]
    result = npusim.simulate_shapes(layer for layer in layers)
    assert [s.name for s in result.conv_layers] == ["a", "b"]


@pytest.mark.parametrize("kernel, dilation", [((2, 2), (1, 1)), ((3, 4), (2, 1)), ((1, 5), (1, 3))])
def test_conv2d_same_padding_matches_torch(kernel, dilation):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 9, 10)).astype(np.float32)
    w = rng.standard_normal((6, 4) + kernel).astype(np.float32)
    out, stats = npusim.conv2d(x, w, padding="same", dilation=dilation)
    ref = F.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                   padding="same", dilation=dilation).numpy()
    assert out.shape == ref.shape and rel_err(out, ref) < 1e-5
    assert stats.dense_macs == stats.macs == ref.size * 4 * kernel[0] * kernel[1]


@pytest.mark.parametrize("preset", ["input-reuse-1024", "sparse-pairs-32x32",
                                    "dilated-grid-2x2", "group-tile-32mac", "systolic-2x2-ws"])
def test_conv2d_on_an_arch_runs_the_arch_s_own_machine(preset):
    """As ``simulate`` does: an arch alone names its machine (it once ran the systolic array
    on the arch's memories unless ``dataflow`` was given too)."""
    rng = np.random.default_rng(8)
    x = np.maximum(rng.standard_normal((1, 4, 12, 12)), 0).astype(np.float32)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    out, stats = npusim.conv2d(x, w, padding=1, arch=preset)
    g = GraphBuilder("one", x.shape)
    whole = npusim.simulate(g.build(g.conv(g.input, w, padding=1)), x, preset)
    assert stats.dataflow == whole.conv_layers[0].dataflow == npusim.load_arch(preset).dataflow
    assert stats.cycles == whole.conv_layers[0].cycles
    ref = F.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                   padding=1).numpy()
    assert rel_err(out, ref) < 1e-5


@pytest.mark.parametrize("dataflow", ["systolic", "sparse-pairs", "group-tile"])
def test_conv2d_int8_from_float_is_requantised_as_simulate_does(dataflow):
    """Quantise by hand (max |value| / 127, per tensor for x, per output channel for w),
    the exact integer sum by the reference, then the output requantised to int8."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    out, stats = npusim.conv2d(x, w, bias, padding=1, dtype="int8", dataflow=dataflow)
    sx = np.abs(x).max() / 127.0
    sw = np.abs(w).reshape(4, -1).max(axis=1) / 127.0
    xq = np.clip(np.rint(x / sx), -127, 127).astype(np.int8)
    wq = np.clip(np.rint(w / sw[:, None, None, None]), -127, 127).astype(np.int8)
    bq = np.rint(bias.astype(np.float64) / (sx * sw)).astype(np.int32)
    acc = reference.conv2d(xq, wq, bq, ConvLayer(1, 8, 6, 6, 4, 3, 3, padding=1, bias=True))
    real = acc * (sx * sw).reshape(1, -1, 1, 1)
    sy = np.abs(real).max() / 127.0
    expected = np.clip(np.rint(real / sy), -127, 127).astype(np.float32) * np.float32(sy)
    assert np.array_equal(out, expected)
    assert len(np.unique(out)) <= 255  # int8 levels, not the float accumulators
    assert stats.sram_ifmap_bytes > 0 and stats.energy_pj > 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(padding="full"), "conv2d.padding='full': must be 'same', 'valid' or integers"),
    (dict(groups=3), r"conv2d.groups=3: must divide both C=4 and K=6"),
    (dict(dataflow="nope"), "dataflow 'nope': must be one of"),
])
def test_conv2d_errors(kwargs, message):
    x, w = np.zeros((1, 4, 5, 5), np.float32), np.zeros((6, 4, 3, 3), np.float32)
    with pytest.raises(NpusimError, match=message):
        npusim.conv2d(x, w, **kwargs)


@pytest.mark.parametrize("arch", ["input-reuse-1024", "sparse-pairs-32x32"])
def test_costs_counted_beside_the_outputs_equal_costs_counted_inline(arch, monkeypatch):
    """The worker thread (mode run on input-reuse; estimate, and sparse-pairs whose arithmetic
    takes every core, count inline) only changes where the counts run: same stats, same
    order, and BLAS gets its thread count back afterwards."""
    import threading

    from threadpoolctl import threadpool_info

    from npusim.dataflows import get

    sim = importlib.import_module("npusim.simulate")  # the module, not the function
    monkeypatch.setattr(sim, "threads", lambda: 2)  # two threads allowed, whatever the machine
    where = []
    df = get(npusim.load_arch(arch).dataflow)
    def noting(counted):
        return lambda *a: where.append(threading.current_thread().name) or counted(*a)

    for part in ("estimate", "count"):  # a worker runs estimate; the batched costs, count
        monkeypatch.setattr(df, part, noting(getattr(df, part)))
    rng = np.random.default_rng(2)
    graph, _ = small_net(rng)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    def threads():
        return {lib["filepath"]: lib["num_threads"] for lib in threadpool_info()}

    before = threads()
    beside = {}
    for m in ("run", "estimate"):
        where.clear()
        beside[m] = npusim.simulate(graph, x, arch, mode=m)
        counted_on = {name.split("_")[0] for name in where}
        beside_it = m == "run" and arch == "input-reuse-1024"
        assert counted_on == ({"npusim-costs"} if beside_it else {"MainThread"})
    after = threads()
    assert {path: after[path] for path in before} == before
    counted_here = sim._Costs.__init__
    monkeypatch.setattr(sim._Costs, "__init__", lambda self, background, depth=2,
                        batch_bytes=0, counting=None: counted_here(self, False, depth,
                                                                   batch_bytes, counting))
    inline = {m: npusim.simulate(graph, x, arch, mode=m) for m in ("run", "estimate")}
    for m in beside:
        assert beside[m].layers == inline[m].layers
        assert np.array_equal(beside[m].output, inline[m].output)


@pytest.mark.parametrize("mode", ["estimate", "run"])
def test_costs_wait_for_the_walk_or_for_the_mask_budget(mode, monkeypatch):
    """Without a worker, the layers' costs are counted after the last node, in order (the
    progress callback naming each), and then taken to their counts and steps in order and
    priced together; a mask budget smaller than one layer's mask counts and prices each conv
    right after it runs; the stats are the same either way, and those of ``estimate`` called
    on each conv."""
    from npusim.dataflows import get

    sim = importlib.import_module("npusim.simulate")
    monkeypatch.setattr(sim, "threads", lambda: 1)  # no worker thread, whatever the machine
    df = get("sparse-pairs")
    counted, to_price = df.count, df.to_price
    events = []
    monkeypatch.setattr(df, "count", lambda layer, *a: events.append(("count", layer.name))
                        or counted(layer, *a))
    monkeypatch.setattr(df, "to_price", lambda layer, *a: events.append(("price", layer.name))
                        or to_price(layer, *a))
    rng = np.random.default_rng(4)
    graph, _ = small_net(rng)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)

    def run():
        events.clear()
        return npusim.simulate(graph, x, "sparse-pairs-32x32", mode=mode,
                               progress=lambda i, n, name: events.append(("node", name)))

    batched = run()
    convs = [n.name for n in graph.conv_nodes]
    assert events == [("node", n.name) for n in graph.nodes] + [
        e for c in convs for e in (("node", f"{c} (costs)"), ("count", c))] + [
        ("price", c) for c in convs]
    monkeypatch.setattr(sim, "BATCH_BYTES", 1)
    at_once = run()
    assert [events.index(("price", c)) - events.index(("node", c)) for c in convs] == \
        [3] * len(convs)  # the progress line naming the conv counted, its count, its price
    assert batched.layers == at_once.layers
    assert np.array_equal(batched.output, at_once.output)
    monkeypatch.setattr(sim._Costs, "run_waiting", lambda self: [  # estimate, layer by layer
        setattr(job, "stats", job.df.estimate(*job.args)) for job in self.waiting])
    assert run().layers == batched.layers


def test_costs_are_counted_inline_when_one_thread_is_allowed(monkeypatch):
    """One core in the affinity, or OMP_NUM_THREADS=1: no worker thread, BLAS untouched."""
    from npusim import parallel

    sim = importlib.import_module("npusim.simulate")
    monkeypatch.setattr(parallel, "cores", lambda: 4)
    for var in parallel.THREAD_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with sim._Costs(background=True) as costs:
        assert costs.pool is None and costs.limits is None
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with sim._Costs(background=True) as costs:
        assert costs.pool is not None


@pytest.mark.parametrize(("affinity", "env", "expected"), [
    ({0, 1, 2, 3}, {}, 4), ({0, 1, 2, 3}, {"OMP_NUM_THREADS": "2"}, 2),
    ({0, 1, 2, 3}, {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "3"}, 1),
    ({0, 1, 2, 3}, {"OMP_NUM_THREADS": "8"}, 4), ({5}, {}, 1),
    ({0, 1}, {"OMP_NUM_THREADS": "zero"}, 2), ({0, 1}, {"OMP_NUM_THREADS": "0"}, 2),
])
def test_thread_count_follows_affinity_and_the_users_variables(affinity, env, expected,
                                                                monkeypatch):
    import os

    from npusim import parallel

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: affinity, raising=False)
    for var in parallel.THREAD_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert parallel.threads() == expected


def test_an_error_while_counting_costs_reaches_the_caller(monkeypatch):
    from npusim.dataflows import get

    def broken(layer, x_mask, w_mask, arch):
        raise NpusimError(f"{layer.name}: counting failed")

    for part in ("estimate", "count"):  # the costs counted at once, or waiting for the walk
        monkeypatch.setattr(get("input-reuse"), part, broken)
    rng = np.random.default_rng(3)
    graph, _ = small_net(rng)
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    with pytest.raises(NpusimError, match="conv1: counting failed"):
        npusim.simulate(graph, x, "input-reuse-1024", mode="estimate")


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_tensors_are_dropped_exactly_when_no_later_node_reads_them(name):
    """After node i, the live tensors are the produced ones some node after i reads, plus the
    outputs (a brute-force scan of the rest of the graph at every node)."""
    from npusim.frontends import zoo
    from npusim.simulate import _dead_after

    graph = zoo.build(name)
    dead, live = _dead_after(graph), {graph.input_name}
    for i, node in enumerate(graph.nodes):
        live = (live | {node.name}) - set(dead.get(i, ()))
        later = {n for after in graph.nodes[i + 1:] for n in after.inputs}
        produced = {graph.input_name} | {n.name for n in graph.nodes[:i + 1]}
        assert live == produced & (later | graph.output_nodes), node.name


def _shared_outputs_net(rng):
    """Convs whose outputs an activation reads: alone (conv2, conv4, conv5), and with a
    node after it (conv1: the last add; conv3: the add right after its ReLU)."""
    g = GraphBuilder("shared", (2, 4, 9, 9))
    ws = [rng.standard_normal((4, 4, 3, 3)) * 0.4 for _ in range(5)]
    bs = [rng.standard_normal(4) for _ in range(5)]
    c1 = g.conv(g.input, ws[0], bs[0], padding=1)
    c2 = g.conv(g.relu6(c1, name="act1"), ws[1], bs[1], padding=1)
    c3 = g.conv(g.relu(c2, name="act2"), ws[2], bs[2], padding=1)
    c4 = g.conv(g.add(g.relu(c3, name="act3"), c3), ws[3], bs[3], padding=1)
    c5 = g.conv(g.add(g.relu6(c4, name="act4"), c1), ws[4], bs[4], padding=1)
    return g.build(g.hardswish(c5, name="act5")), ws, bs


def _shared_outputs_torch(x, ws, bs):
    w, b = ([torch.tensor(a, dtype=torch.float64) for a in arrays] for arrays in (ws, bs))
    c1 = F.conv2d(x, w[0], b[0], padding=1)
    c2 = F.conv2d(F.relu6(c1), w[1], b[1], padding=1)
    c3 = F.conv2d(F.relu(c2), w[2], b[2], padding=1)
    c4 = F.conv2d(F.relu(c3) + c3, w[3], b[3], padding=1)
    c5 = F.conv2d(F.relu6(c4) + c1, w[4], b[4], padding=1)
    return {"conv1": c1, "conv2": c2, "conv3": c3, "conv4": c4, "conv5": c5,
            "output": F.hardswish(c5)}


@pytest.mark.parametrize("arch", ["systolic-32x32-ws", "sparse-pairs-32x32"])
def test_an_activation_writes_over_a_conv_output_only_when_nothing_after_reads_it(arch):
    """ReLU, ReLU6 and hard swish write over a conv's output that no later node reads
    (conv2, conv4, conv5: ``simulate._overwrites``) and leave alone one that a later node
    reads (conv1, conv3): the output against torch in float64, and, with ``keep_outputs``,
    every conv's output as the conv made it, negatives included."""
    from npusim.simulate import _dead_after, _overwrites

    rng = np.random.default_rng(5)
    graph, ws, bs = _shared_outputs_net(rng)
    names = [node.name for node in graph.nodes]
    assert {names[i] for i in _overwrites(graph, _dead_after(graph))} == {"act2", "act4", "act5"}
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    ref = _shared_outputs_torch(torch.tensor(x, dtype=torch.float64), ws, bs)
    assert rel_err(npusim.simulate(graph, x, arch).output, ref["output"].numpy()) < 1e-5
    kept = npusim.simulate(graph, x, arch, keep_outputs=True).outputs
    for name in ("conv1", "conv2", "conv3", "conv4", "conv5"):
        assert (kept[name] < 0).any(), name
        assert rel_err(kept[name], ref[name].numpy()) < 1e-5, name
    assert rel_err(kept[graph.output_name], ref["output"].numpy()) < 1e-5


@pytest.mark.parametrize("arch", ["systolic-32x32-ws", "dilated-grid-2x2-h3", "group-tile-64mac"])
def test_shape_only_costs_counted_once_equal_the_machine_counting_each_layer(arch):
    """Two convs of one geometry under different names, and a second call: every conv's stats
    are what the machine counts for that layer by itself, names included."""
    from npusim.dataflows import get

    rng = np.random.default_rng(5)
    g = GraphBuilder("twins", (1, 8, 12, 12))
    w = [rng.standard_normal((8, 8, 3, 3)).astype(np.float32) for _ in range(3)]
    a = g.conv(g.input, w[0], padding=1, name="first")
    b = g.conv(a, w[1], padding=1, name="second")
    graph = g.build(g.conv(b, w[2], stride=2, padding=1, name="third"))
    x = rng.standard_normal(graph.input_shape).astype(np.float32)
    spec = npusim.load_arch(arch)
    df = get(spec.dataflow)
    want = [df.estimate(graph.layers[n.name], None, None, spec) for n in graph.conv_nodes]
    for _ in range(2):
        got = [s for s in npusim.simulate(graph, x, spec, mode="estimate").layers
               if s.dataflow != "vector"]
        assert got == want
        assert [s.name for s in got] == ["first", "second", "third"]


@pytest.mark.parametrize("preset", ["systolic-32x32-ws", "sparse-pairs-32x32"])
def test_vector_ops_priced_once_equal_ops_priced_afresh(preset):
    """Vector ops alike in kind, dtype and counts are priced once (``vector_priced``) and
    renamed: each op's stats in a run of PP-OCR's classifier (float32, then int8, then
    float32 again on the same arch, so kept stats meet the other dtype) equal its stats
    priced afresh (``_vector_price``), name included; and a third of the ops were not priced
    afresh."""
    from npusim.frontends import zoo
    from npusim.simulate import _vector_price, vector_work

    graph, x = zoo.build("ppocr-cls"), zoo.input_for("ppocr-cls")
    arch = npusim.load_arch(preset)
    for dtype in ("float32", "int8", "float32"):
        res = npusim.simulate(graph, x, arch, mode="estimate", dtype=dtype)
        by_name = {st.name: st for st in res.layers if st.dataflow == "vector"}
        vector_nodes = [node for node in graph.nodes if node.name in by_name]
        assert len(vector_nodes) == len(by_name) > 20
        kinds = set()
        for node in vector_nodes:
            counted = vector_work(node.name, node.op, [graph.shapes[n] for n in node.inputs],
                                  graph.shapes[node.name], dtype)
            kinds.add((counted[0].shape, *counted[1:]))
            assert by_name[node.name] == _vector_price(counted, arch)
        assert len(kinds) <= len(vector_nodes) * 2 / 3


def test_shape_costs_follow_every_field_of_a_conv_but_its_name():
    """``shape_costs`` (kept per geometry) against ``df.estimate`` counted afresh, on a conv
    and on convs that differ from it in one field each (and in the name): each gets its own
    stats, renamed; a conv that differs in its name alone reuses the first's."""
    import dataclasses

    from npusim.dataflows import REGISTRY
    from npusim.simulate import shape_costs

    arch = npusim.load_arch("systolic-32x32-ws")
    df = REGISTRY[arch.dataflow]
    base = ConvLayer(1, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1, False, "base")
    changes = {"N": 2, "C": 16, "H": 13, "W": 11, "K": 8, "R": 5, "S": 1, "stride": 2,
               "padding": (0, 1, 1, 0), "dilation": 2, "groups": 4, "bias": True,
               "dtype": "int8"}
    assert set(changes) | {"name"} == {f.name for f in dataclasses.fields(ConvLayer)}
    layers = [base, dataclasses.replace(base, name="renamed")]
    layers += [dataclasses.replace(base, name=f"other {k}", **{k: v})
               for k, v in changes.items()]
    for layer in layers * 2:  # the second time from the store
        fresh = df.estimate(layer, None, None, arch)
        assert shape_costs(df, layer, arch) == fresh
    assert len({shape_costs(df, layer, arch).cycles for layer in layers}) > 5


def test_a_result_prints_as_one_line_not_its_arrays():
    """The repr says where and how the network ran, its cycles (every layer's, summed) and
    the output's shape, not the output or any layer's fields."""
    rng = np.random.default_rng(0)
    g = GraphBuilder("tiny", (2, 3, 8, 8))
    g.relu(g.conv(g.input, rng.standard_normal((4, 3, 3, 3)).astype(np.float32)))
    r = npusim.simulate(g.build(), rng.standard_normal((2, 3, 8, 8)), "input-reuse-1024",
                        mode="estimate")
    cycles = sum(s.cycles for s in r.layers)
    assert repr(r) == (f"SimResult(input-reuse-1024 (input-reuse), estimate, float32: "
                       f"{cycles:,} cycles, 2 layers, output (2, 4, 6, 6))")
    shapes_only = dataclasses.replace(r, output=None, layers=r.layers[:1])
    assert repr(shapes_only).endswith(f"{r.layers[0].cycles:,} cycles, 1 layer, no output)")
