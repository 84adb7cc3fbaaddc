"""Weight-derived data (masks, int8 weights, packed mask words, per-tap counts) is made once per
read-only weight array and reused by later calls; never for an array that can still change."""

import copy
import pickle

import numpy as np
import pytest

from npusim import bitconv, derived, ops, quant, tensors
from npusim.dataflows import region_work
from npusim.dse.runner import prepared
from npusim.simulate import simulate


@pytest.fixture(scope="module")
def pnet():
    """MTCNN's P-Net (trained weights) at density 0.5, and its input."""
    _, graph, x = prepared("mtcnn-pnet", 0.5, 1, 0)
    return graph, x


def counting(monkeypatch, module, names: str) -> list:
    """Patch each of ``module``'s functions ``names`` ("a" or "a|b") to count its calls, all
    in one list (and still compute)."""
    calls: list = []

    def counter(real):
        def counted(*args):
            calls.append(1)
            return real(*args)
        return counted
    for name in names.split("|"):
        monkeypatch.setattr(module, name, counter(getattr(module, name)))
    return calls


def test_a_networks_weights_are_read_only(pnet):
    graph, _ = pnet
    for node in graph.conv_nodes:
        assert derived.is_frozen(node.op.weight)
        with pytest.raises(ValueError, match="read-only"):
            node.op.weight[(0,) * node.op.weight.ndim] = 1.0


def test_cached_weight_data_equals_a_fresh_recompute(pnet):
    """On every conv of a real network: the kept mask, packed words, per-kernel and per-tap
    counts and int8 weights equal those made again from a writeable copy of the weights (which
    is never cached), and the second call returns the kept arrays themselves."""
    graph, _ = pnet
    for node in graph.conv_nodes:
        layer, w = graph.layers[node.name], node.op.weight
        fresh = w.copy()
        mask = derived.weight_mask(w)
        assert mask is derived.weight_mask(w)
        np.testing.assert_array_equal(mask, fresh != 0)
        words = bitconv.pack_weights(layer, mask)
        assert words is bitconv.pack_weights(layer, mask)
        np.testing.assert_array_equal(words, bitconv.pack_weights(layer, fresh != 0))
        assert bitconv.kernel_ones(words) is bitconv.kernel_ones(words)
        np.testing.assert_array_equal(bitconv.kernel_ones(words),
                                      (fresh != 0).reshape(layer.K, -1).sum(axis=1))
        taps = region_work.tap_weights(layer, mask)
        want = (fresh != 0).reshape(layer.groups, layer.Kg, layer.Cg, layer.R, layer.S).sum(1)
        np.testing.assert_array_equal(taps, want)
        q, s = derived.derived(w, "int8", lambda w=w: quant.quantize_weights(w))
        q0, s0 = quant.quantize_weights(fresh)
        np.testing.assert_array_equal(q, q0)
        np.testing.assert_array_equal(s, s0)


@pytest.mark.parametrize(("preset", "dtype", "mode", "module", "name"), [
    ("sparse-pairs-32x32", "int8", "estimate", bitconv, "_pack"),
    ("sparse-pairs-32x32", "int8", "estimate", quant, "quantize_weights"),
    ("input-reuse-1024", "float32", "estimate", region_work, "_tap_weights"),
    ("input-reuse-1024", "float32", "estimate", derived, "_nonzero"),
    ("sparse-pairs-32x32", "float32", "run", derived, "_blocks"),
    ("sparse-pairs-32x32", "int8", "run", derived, "_blocks"),
    # kernel blocks for the register loop, the plain layout for rows narrower than its block
    ("group-tile-64mac", "float32", "run", derived, "_blocks|_lay_out"),
    ("group-tile-64mac", "int8", "run", derived, "_blocks|_lay_out"),
])
def test_a_second_simulate_does_not_derive_again(pnet, monkeypatch, preset, dtype, mode, module,
                                                 name):
    graph, x = pnet
    net = copy.deepcopy(graph)  # weights no call has derived anything from yet
    calls = counting(monkeypatch, module, name)
    first = simulate(net, x, preset, mode=mode, dtype=dtype)
    once = len(calls)
    assert once >= len(net.conv_nodes)
    second = simulate(net, x, preset, mode=mode, dtype=dtype)
    assert len(calls) == once  # nothing derived again from the same weights
    assert second.layers == first.layers
    np.testing.assert_array_equal(second.output, first.output)
    # the same network with writeable weights (never cached) derives all again, equally
    writeable = copy.deepcopy(graph)
    for node in writeable.conv_nodes:
        node.op.weight.setflags(write=True)
    fresh = simulate(writeable, x, preset, mode=mode, dtype=dtype)
    fresh_calls = len(calls)
    simulate(writeable, x, preset, mode=mode, dtype=dtype)
    assert len(calls) - fresh_calls == fresh_calls - once
    assert len(calls) >= 2 * once
    assert fresh.layers == first.layers
    np.testing.assert_array_equal(fresh.output, first.output)


def test_an_unpickled_network_keeps_its_weights_read_only(pnet, monkeypatch):
    """A network sent to another process (a Dask worker, a spawned one) is unpickled there:
    its weights stay read-only, so a second simulate there derives nothing again."""
    graph, x = pnet
    net = pickle.loads(pickle.dumps(graph))
    assert all(derived.is_frozen(node.op.weight) for node in net.conv_nodes)
    calls = counting(monkeypatch, region_work, "_tap_weights")
    simulate(net, x, "input-reuse-1024", mode="estimate")
    once = len(calls)
    simulate(net, x, "input-reuse-1024", mode="estimate")
    assert once >= len(net.conv_nodes) and len(calls) == once


def test_a_conv_bias_stays_read_only_and_is_checked_once(pnet, monkeypatch):
    """``ops.Conv`` makes its bias read-only as it does its weights (also when unpickled), so
    the finite check of each weight and bias runs on the first simulate alone: a second
    one checks only the convs' inputs."""
    graph, x = pnet
    net = pickle.loads(pickle.dumps(graph))
    convs = net.conv_nodes
    assert all(n.op.bias is not None and derived.is_frozen(n.op.bias) for n in convs)
    assert derived.is_frozen(ops.Conv(np.ones((2, 1, 1, 1)), np.zeros(2)).bias)
    calls = counting(monkeypatch, tensors, "check_finite")
    simulate(net, x, "systolic-32x32-ws", mode="estimate")
    first = len(calls)
    simulate(net, x, "systolic-32x32-ws", mode="estimate")
    assert first - (len(calls) - first) == 2 * len(convs)  # each weight and bias, once


def test_a_kept_layout_is_the_weights_transposed():
    """``laid_out`` keeps, for read-only weights, the same values numpy's own transpose of a
    writeable copy gives, read-only, and lays out a writeable array afresh on every call."""
    rng = np.random.default_rng(3)
    w = derived.frozen(rng.standard_normal((6, 4, 3, 2)).astype(np.float32))
    kept = derived.laid_out(w, np.float64, (2, 3, 4, 3, 2), (0, 3, 4, 2, 1))
    assert kept is derived.laid_out(w, np.float64, (2, 3, 4, 3, 2), (0, 3, 4, 2, 1))
    assert not kept.flags.writeable and kept.flags.c_contiguous and kept.dtype == np.float64
    want = w.copy().astype(np.float64).reshape(2, 3, 4, 3, 2).transpose(0, 3, 4, 2, 1)
    np.testing.assert_array_equal(kept, want)
    other = derived.laid_out(w, np.float32, (2, 3, 4, 3, 2), (0, 2, 3, 4, 1))
    np.testing.assert_array_equal(other, w.reshape(2, 3, 4, 3, 2).transpose(0, 2, 3, 4, 1))
    writeable = w.copy()
    assert derived.laid_out(writeable, np.float32, (6, 24), (1, 0)) is not \
        derived.laid_out(writeable, np.float32, (6, 24), (1, 0))


def test_changeable_arrays_are_never_cached():
    w = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2) - 5
    assert not derived.is_frozen(w)
    before = derived.weight_mask(w).sum()
    w[w != 0] = 0  # changed in place: a cache would return the old mask
    assert derived.weight_mask(w).sum() == 0 != before
    view = w[:1]
    view.setflags(write=False)  # read-only view of writeable data: can still change
    assert not derived.is_frozen(view)
    conv = ops.Conv(view)
    assert conv.weight is not view and derived.is_frozen(conv.weight)
    w[0] = 1.0
    assert not conv.weight.any()  # its own copy did not change
    owned = np.ones((1, 1, 1, 1), np.float32)
    assert ops.Conv(owned).weight is owned and not owned.flags.writeable


def test_kernel_blocks_lay_each_blocks_taps_side_by_side_zero_padded_and_aligned():
    rng = np.random.default_rng(5)
    w = derived.frozen(rng.standard_normal((2 * 37, 3, 2, 5)).astype(np.float32))
    blocks = derived.kernel_blocks(w, np.float64, 2, 16)  # 37 kernels a group: 3 blocks
    assert blocks.shape == (2, 3, 3, 2, 5, 16) and blocks.dtype == np.float64
    assert blocks.ctypes.data % 64 == 0 and derived.is_frozen(blocks)
    assert derived.kernel_blocks(w, np.float64, 2, 16) is blocks  # made once
    for g in range(2):
        for k in range(48):
            want = w[g * 37 + k] if k < 37 else np.zeros((3, 2, 5))
            np.testing.assert_array_equal(blocks[g, k // 16, :, :, :, k % 16], want)
