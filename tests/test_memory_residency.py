"""The memory model's residency rules (``memory.traffic``) against the rules of its module
doc written out plainly, one step at a time, on random layers: which bytes each step
fetches, spills, reads back and writes, for ids in runs or interleaved, blocks that fit or
thrash or stream, whole-block partial sums (``psum_size``) and a machine's own output
buffers (``ofmap_capacity``); and the same rules applied to many layers at once (their
steps joined end to end, as ``memory.time_layers`` times them), each layer on its own."""

import numpy as np
import pytest

from npusim import memory as memory_model
from npusim.arch import Memory
from npusim.memory import Steps, traffic


def live_peak(ids, used, size_at_first):
    """Most bytes held at once when each block stays from its first use to its last."""
    first, last = {}, {}
    for i in used:
        first.setdefault(ids[i], i)
        last[ids[i]] = i
    return max((sum(size_at_first[b] for b in first if first[b] <= i <= last[b])
                for i in used), default=0), first, last


def input_fetches(ids, nbytes, size, capacity):
    """An input operand: fetched whole at first use when every block can stay for its
    lifetime; else a step fetches its bytes when its block differs from the previous using
    step's, or when the block is larger than the buffer."""
    used = [i for i in range(len(ids)) if ids[i] >= 0]
    first = {}
    for i in used:
        first.setdefault(ids[i], i)
    peak, first, _ = live_peak(ids, used, {b: size[i] for b, i in first.items()})
    out = [0] * len(ids)
    if peak <= capacity:
        for i in first.values():
            out[i] = size[i]
        return out
    previous = None
    for i in used:
        if ids[i] != previous or size[i] > capacity:
            out[i] = nbytes[i]
        previous = ids[i]
    return out


def output_traffic(ids, out_bytes, psum_bytes, capacity, psum_size=None):
    """An output operand: each block written once after its last step; when the open blocks
    overflow the buffer, a block spills its partial sums when the next using step moves to
    another block and reads them back when a step returns to it (every step, if the block's
    partial sums alone overflow), except after its last step and before its first."""
    n = len(ids)
    used = [i for i in range(n) if ids[i] >= 0]
    if psum_size is None:
        psum = [psum_bytes[i] if psum_bytes[i] > 0 else out_bytes[i] for i in range(n)]
        held = psum
    else:
        psum, held = list(psum_bytes), list(psum_size)
    first = {}
    for i in used:
        first.setdefault(ids[i], i)
    occupancy = {b: max(held[i], out_bytes[i]) for b, i in first.items()}
    peak, first, last = live_peak(ids, used, occupancy)
    reads, writes = [0] * n, [0] * n
    for i in last.values():
        writes[i] += out_bytes[i]
    if peak <= capacity:
        return reads, writes
    for k, i in enumerate(used):
        b = ids[i]
        huge = occupancy[b] > capacity
        after = ids[used[k + 1]] if k + 1 < len(used) else None
        before = ids[used[k - 1]] if k > 0 else None
        if (after != b or huge) and i != last[b]:
            writes[i] += psum[i]
        if (before != b or huge) and i != first[b]:
            reads[i] += psum[i]
    return reads, writes


def random_layer(rng):
    """Steps with ids in runs or interleaved (some steps using no block) and bytes around
    the buffers' sizes, and a memory of 1-8 KiB buffers."""
    n = int(rng.integers(1, 30))
    kinds = int(rng.integers(1, 8))

    def ids():
        v = rng.integers(-1, kinds, n)
        return np.sort(v) if rng.random() < 0.3 else v

    def nbytes(top):
        return rng.integers(0, top, n)

    kib = rng.integers(1, 9, 3)
    top = int(kib.max()) * 1024
    fields = dict(compute=rng.integers(1, 100, n), ifmap=ids(), ifmap_bytes=nbytes(top),
                  filter=ids(), filter_bytes=nbytes(top), ofmap=ids(),
                  ofmap_bytes=nbytes(top), psum_bytes=nbytes(2 * top))
    if rng.random() < 0.4:  # steps reading parts of bigger blocks
        fields["ifmap_size"] = fields["ifmap_bytes"] + nbytes(top)
        fields["filter_size"] = fields["filter_bytes"] + nbytes(top)
    if rng.random() < 0.4:  # steps accumulating into parts of bigger blocks
        fields["psum_size"] = fields["psum_bytes"] + nbytes(top)
    if rng.random() < 0.3:  # the machine's own output buffers
        fields["ofmap_capacity"] = int(rng.integers(0, 4 * top))
    memory = Memory(*(int(k) for k in kib), 10.0, double_buffered=bool(rng.random() < 0.5))
    return Steps(**fields), memory


@pytest.mark.parametrize("seed", range(8))
def test_traffic_follows_the_residency_rules_step_by_step(seed):
    rng = np.random.default_rng(seed)
    for _ in range(250):
        steps, memory = random_layer(rng)
        assert_rules(traffic(steps, memory), steps, memory)


@pytest.mark.parametrize("seed", range(4))
def test_layers_joined_follow_the_rules_each_on_its_own(seed):
    """Two to six random layers joined end to end on one memory (block ids offset per
    layer): each layer's slice of the joined traffic is what the rules give it alone."""
    rng = np.random.default_rng(100 + seed)
    for _ in range(60):
        layers = [random_layer(rng)[0] for _ in range(int(rng.integers(2, 7)))]
        memory = random_layer(rng)[1]
        moved = memory_model._moved(memory_model._Joined(layers), memory)
        at = np.cumsum([0] + [len(s) for s in layers])
        for i, steps in enumerate(layers):
            part = dict(zip(("ifmap", "filter", "psum_in", "ofmap_out"),
                            moved[:, at[i]:at[i + 1]], strict=True))
            assert_rules(part, steps, memory)


def assert_rules(got: dict, steps: Steps, memory: Memory) -> None:
    """``got`` (``traffic``'s four arrays for ``steps``) equals the rules written out."""
    share = 2 if memory.double_buffered else 1
    for operand, kib in (("ifmap", memory.ifmap_sram_kb),
                         ("filter", memory.filter_sram_kb)):
        want = input_fetches(getattr(steps, operand).tolist(),
                             getattr(steps, f"{operand}_bytes").tolist(),
                             getattr(steps, f"{operand}_size").tolist(),
                             kib * 1024 / share)
        assert got[operand].tolist() == want, operand
    capacity = (memory.ofmap_sram_kb * 1024 / share if steps.ofmap_capacity is None
                else steps.ofmap_capacity)
    reads, writes = output_traffic(
        steps.ofmap.tolist(), steps.ofmap_bytes.tolist(), steps.psum_bytes.tolist(),
        capacity, None if steps.psum_size is None else steps.psum_size.tolist())
    assert got["psum_in"].tolist() == reads
    assert got["ofmap_out"].tolist() == writes
